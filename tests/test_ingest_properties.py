"""Order does not matter: any permutation, with duplicates, of the same events gives the same state."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection, transaction
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.models import (
    ChangeRecord,
    Dataset,
    DatasetField,
    DatasetOwnership,
    DatasetVersion,
    FieldGap,
)
from catalog.queries import field_existed
from graph.models import ColumnEdge, Job, Run, RunDataset, TableEdge
from ingest.events import parse_event
from ingest.normalizer import normalize
from tests.ingest_builders import (
    PG,
    at,
    columns,
    dataset,
    dataset_event,
    drop,
    run_event,
    run_id,
    schema,
)

pytestmark = pytest.mark.django_db


def field_names() -> dict[int, str]:
    return {
        f.pk: f"{f.dataset.name}.{f.name}" for f in DatasetField.objects.select_related("dataset")
    }


def canonical(value: Any) -> str:
    """JSON with sorted keys: facets compare by content, whatever order their keys came in."""
    return json.dumps(value, sort_keys=True, default=str)


def named_facets(facets: dict[str, Any], names: dict[int, str]) -> dict[str, Any]:
    """A dataset's kept facets, the datasets a rename points at by name, not id."""
    named = dict(facets)
    for facet in ("renamedTo", "renamedFrom"):
        if facet in named:
            named[facet] = {**named[facet], "value": names.get(named[facet]["value"])}
    return named


def snapshot() -> dict[str, Any]:
    """Everything the normaliser derives, by natural keys (ids and arrival times left out)."""
    fields = field_names()
    names = dict(Dataset.objects.values_list("pk", "name"))
    return {
        "datasets": sorted(
            (
                d.namespace.name,
                d.name,
                d.first_seen,
                d.last_seen,
                d.lifecycle_state,
                d.dropped_at,
                d.description,
                d.source_name,
                d.alias_of.name if d.alias_of else None,
                canonical(named_facets(d.lineage_facets, names)),
            )
            for d in Dataset.objects.select_related("namespace", "alias_of")
        ),
        "fields": sorted(
            (fields[f.pk], f.type, f.description, f.ordinal, f.removed_at, f.first_seen)
            for f in DatasetField.objects.all()
        ),
        "gaps": sorted(
            (fields[g.field_id], g.removed_at, g.returned_at) for g in FieldGap.objects.all()
        ),
        "versions": sorted(
            (
                names[v.dataset_id],
                v.created_at,
                v.schema_hash,
                v.lifecycle_state,
                str(v.run_uuid),
                str(v.version),
            )
            for v in DatasetVersion.objects.all()
        ),
        # What the history says of each dataset: every answer as of an instant reads it.
        "history": sorted(
            (
                names[r.dataset_id],
                r.field_name,
                r.attribute,
                r.at,
                canonical(r.old),
                canonical(r.new),
                r.source,
            )
            for r in ChangeRecord.objects.all()
        ),
        "owners": sorted(
            (o.dataset.name, o.owner.name, o.ownership_type)
            for o in DatasetOwnership.objects.select_related("dataset", "owner")
        ),
        "jobs": sorted(
            (
                j.name,
                canonical(j.facets),
                j.sql,
                j.job_type,
                j.parent.name if j.parent else None,
                str(j.latest_run.run_uuid) if j.latest_run else None,
                j.created_at,
            )
            for j in Job.objects.select_related("parent", "latest_run")
        ),
        "runs": sorted(
            (
                str(r.run_uuid),
                r.job.name,
                r.state,
                r.state_event_time,
                r.started_at,
                r.ended_at,
                r.nominal_start_time,
                r.error_message,
                canonical(r.facets),
                str(r.parent_run_uuid),
                r.edges_applied,
                r.created_at,
                repr(
                    sorted(
                        (fields[e[0]], names[e[1]], fields.get(e[2]), *e[3:])
                        for e in r.column_lineage.get("edges", [])
                    )
                ),
                repr(sorted(names[d] for d in r.column_lineage.get("covered", []))),
            )
            for r in Run.objects.select_related("job")
        ),
        "run_io": sorted(
            (
                str(io.run.run_uuid),
                io.dataset.name,
                io.direction,
                io.event_time,
                io.dataset_version.created_at if io.dataset_version else None,
            )
            for io in RunDataset.objects.select_related("run", "dataset", "dataset_version")
        ),
        "table_edges": sorted(
            (e.job.name, e.dataset.name, e.direction, e.valid_from, e.valid_to)
            for e in TableEdge.objects.select_related("job", "dataset")
        ),
        "column_edges": sorted(
            (
                e.job.name if e.job else None,
                fields[e.source_field_id],
                names[e.target_dataset_id],
                fields.get(e.target_field_id) if e.target_field_id else None,
                e.transformation_type,
                e.transformation_subtype,
                e.masking,
                e.description,
                e.valid_from,
                e.valid_to,
            )
            for e in ColumnEdge.objects.all()
        ),
    }


def state_after(events: list[dict[str, Any]], chunks: list[int]) -> dict[str, Any]:
    """Normalise the events in the given order and chunking, snapshot, and roll back."""
    with transaction.atomic():
        start = 0
        for size in [*chunks, len(events)]:
            part = events[start : start + size]
            if part:
                normalize([parse_event(e) for e in part])
            start += size
        state = snapshot()
        transaction.set_rollback(True)
    return state


@st.composite
def shuffled_with_duplicates(
    draw: st.DrawFn, events: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[int]]:
    order = draw(st.permutations(list(range(len(events)))))
    extra = draw(st.lists(st.sampled_from(range(len(events))), max_size=len(events)))
    sequence = list(order)
    for index in extra:
        sequence.insert(draw(st.integers(0, len(sequence))), index)
    chunks = draw(st.lists(st.integers(1, 4), max_size=len(sequence)))
    return [events[i] for i in sequence], chunks


def one_run_events() -> list[dict[str, Any]]:
    """The events of one Spark-like run, facets and io spread over them, with a prior run."""
    rid = run_id(2)
    parent = {"run": {"runId": run_id(90)}, "job": {"namespace": "spark", "name": "app"}}
    inputs = [dataset("shop.orders", schema=schema("id", "amount", "country"))]
    out = dataset(
        "dw.orders",
        schema=schema("id", "amount_eur"),
        columnLineage=columns(
            {"id": [("shop.orders", "id")], "amount_eur": [("shop.orders", "amount")]}
        ),
        ownership={"owners": [{"name": "team:dw", "type": "MAINTAINER"}]},
        documentation={"description": "Orders in euros"},
    )
    previous = [
        run_event(
            "START", run_id(1), at(1, 1), inputs=[dataset("shop.orders"), dataset("fx.rates")]
        ),
        run_event(
            "COMPLETE",
            run_id(1),
            at(1, 2),
            inputs=[dataset("shop.orders"), dataset("fx.rates")],
            outputs=[dataset("dw.orders", schema=schema("id", "amount"))],
        ),
    ]
    return [
        *previous,
        run_event(
            "START",
            rid,
            at(2, 1),
            inputs=inputs,
            run_facets={"parent": parent, "nominalTime": {"nominalStartTime": at(2)}},
            job_facets={"jobType": {"processingType": "BATCH", "integration": "SPARK"}},
        ),
        run_event(
            "RUNNING", rid, at(2, 1, 30), inputs=inputs, run_facets={"progress": {"pct": 50}}
        ),
        run_event("OTHER", rid, at(2, 1, 40), run_facets={"progress": {"pct": 80}}),
        run_event(
            "COMPLETE",
            rid,
            at(2, 2),
            inputs=inputs,
            outputs=[out],
            run_facets={"parent": parent, "progress": {"pct": 100}},
            job_facets={"sql": {"query": "insert into dw.orders select …"}},
        ),
    ]


RUN_EVENTS = one_run_events()


@settings(max_examples=40)
@given(case=shuffled_with_duplicates(RUN_EVENTS))
def test_it_settles_a_runs_events_in_any_order_with_duplicates(case):
    events, chunks = case
    expected = state_after(RUN_EVENTS, [1] * len(RUN_EVENTS))
    assert state_after(events, chunks) == expected


def completed(n: int, day: int, ins: list[Any], outs: list[Any]) -> list[dict[str, Any]]:
    return [
        run_event("START", run_id(n), at(day, 1), inputs=ins),
        run_event("COMPLETE", run_id(n), at(day, 2), inputs=ins, outputs=outs),
    ]


def out(mapping: dict[str, list[tuple[str, str]]]) -> dict[str, Any]:
    return dataset("dw.o", schema=schema(*mapping), columnLineage=columns(mapping))


def job_history() -> list[dict[str, Any]]:
    """Several runs of one job changing inputs, outputs and column mappings, and a drop."""
    return [
        *completed(1, 1, [dataset("a"), dataset("b")], [out({"x": [("a", "x")]})]),
        *completed(2, 2, [dataset("a")], [out({"x": [("a", "y")]})]),
        *completed(
            3, 3, [dataset("a"), dataset("b")], [out({"x": [("a", "x")], "z": [("b", "z")]})]
        ),
        drop("b", at(4)),
        *completed(4, 5, [dataset("a"), dataset("b")], [out({"x": [("a", "x")]})]),
        run_event("FAIL", run_id(5), at(6, 2), inputs=[dataset("c")], outputs=[dataset("dw.o")]),
    ]


JOB_HISTORY = job_history()


@settings(max_examples=40)
@given(case=shuffled_with_duplicates(JOB_HISTORY))
def test_it_computes_the_same_validity_intervals_whatever_the_order(case):
    events, chunks = case
    expected = state_after(JOB_HISTORY, [1] * len(JOB_HISTORY))
    got = state_after(events, chunks)
    assert got["table_edges"] == expected["table_edges"]
    assert got["column_edges"] == expected["column_edges"]
    assert got == expected


def test_the_in_order_history_has_the_intervals_we_expect():
    state = state_after(JOB_HISTORY, [1] * len(JOB_HISTORY))
    b_edges = [e for e in state["table_edges"] if e[1] == "b"]
    assert [(e[3].day, e[4].day if e[4] else None) for e in b_edges] == [(1, 2), (3, 4), (5, None)]
    x_from_a = [e for e in state["column_edges"] if e[1] == "a.x"]
    assert [(e[8].day, e[9].day if e[9] else None) for e in x_from_a] == [(1, 2), (3, None)]


def repeating_history() -> list[dict[str, Any]]:
    """A scheduled job: the same lineage run after run, a drop between two runs, one change."""

    def same(n: int, day: int) -> list[dict[str, Any]]:
        return completed(n, day, [dataset("a"), dataset("b")], [out({"x": [("a", "x")]})])

    return [
        *same(1, 1),
        *same(2, 2),
        *same(3, 3),
        drop("b", at(3, 12)),
        *same(4, 4),
        *same(5, 5),
        *completed(6, 6, [dataset("a")], [out({"x": [("a", "y")]})]),
        *same(7, 7),
        *same(8, 8),
    ]


REPEATING = repeating_history()


@settings(max_examples=40)
@given(case=shuffled_with_duplicates(REPEATING))
def test_it_computes_the_same_intervals_for_repeated_lineage_whatever_the_order(case):
    events, chunks = case
    expected = state_after(REPEATING, [2] * len(REPEATING))
    got = state_after(events, chunks)
    assert got["table_edges"] == expected["table_edges"]
    assert got["column_edges"] == expected["column_edges"]
    assert got == expected


@pytest.mark.parametrize(
    ("batches", "replays"),
    [
        # Each run, and the drop, in its own batch. Runs 1, 4 (after the drop), 6 (new
        # lineage) and 7 (back again) replay, and so does the drop; runs 2, 3, 5 and 8
        # repeat the step before them and only move the timeline's end.
        ([2, 2, 2, 1, 2, 2, 2, 2, 2], [1, 0, 0, 1, 1, 0, 1, 1, 0]),
        # Runs 1 to 3 and the drop after them in one batch: the timeline ends in a
        # closing, so run 4 must replay although it repeats run 3.
        ([7, 2, 2, 2, 2, 2], [1, 1, 0, 1, 1, 0]),
    ],
)
def test_it_moves_the_timeline_end_without_a_replay_when_a_run_repeats_the_last_one(
    monkeypatch, batches, replays
):
    from graph import actions as graph_actions

    replayed: list[set[int]] = []
    recompute = graph_actions.recompute_jobs

    def counting(since, jobs):
        replayed.append(set(since))
        return recompute(since, jobs)

    monkeypatch.setattr(graph_actions, "recompute_jobs", counting)
    with transaction.atomic():
        start = 0
        for size in batches:
            normalize([parse_event(e) for e in REPEATING[start : start + size]])
            start += size
        state = snapshot()
        job = Job.objects.get()
        transaction.set_rollback(True)
    assert [int(bool(s)) for s in replayed] == replays
    assert job.timeline_end is not None and job.timeline_end.day == 8
    assert job.timeline_digest
    b_edges = [e for e in state["table_edges"] if e[1] == "b"]
    assert [(e[3].day, e[4].day if e[4] else None) for e in b_edges] == [(1, 3), (4, 6), (7, None)]
    a_edges = [e for e in state["table_edges"] if e[1] == "a"]
    assert [(e[3].day, e[4]) for e in a_edges] == [(1, None)]
    x_from_a = [e for e in state["column_edges"] if e[1] == "a.x"]
    assert [(e[8].day, e[9].day if e[9] else None) for e in x_from_a] == [(1, 6), (7, None)]


def late_repeats() -> list[list[dict[str, Any]]]:
    """A scheduled job's runs, in time order, one list of events per run: runs 6 and 7 end
    at the same instant, run 6 also reading c."""

    def same(n: int, day: int) -> list[dict[str, Any]]:
        return completed(n, day, [dataset("a"), dataset("b")], [out({"x": [("a", "x")]})])

    return [
        same(1, 1),
        same(2, 2),
        same(3, 3),
        same(4, 4),
        completed(6, 5, [dataset("a"), dataset("b"), dataset("c")], [out({"x": [("a", "x")]})]),
        same(7, 5),
        same(8, 6),
    ]


@pytest.mark.parametrize(
    ("late", "replays"),
    [
        # Runs 1, 6 (reads c too) and 7 (back again) replay as they come; run 3, late,
        # repeats the runs around it: it changes no edge and replays nothing.
        ([2], [1, 0, 0, 1, 1, 0, 0]),
        # Run 7, late, repeats them too, but at the instant run 6 began reading c, which
        # run 7 does not read: its job replays (c's edge, opened there, closes at once).
        ([5], [1, 0, 0, 0, 1, 1, 1]),
    ],
)
def test_a_late_run_that_changes_no_edge_replays_nothing(monkeypatch, late, replays):
    from graph import actions as graph_actions

    runs = late_repeats()
    replayed: list[bool] = []
    recompute = graph_actions.recompute_jobs

    def counting(since, jobs):
        replayed.append(bool(since))
        return recompute(since, jobs)

    expected = state_after([e for run in runs for e in run], [2] * len(runs))
    monkeypatch.setattr(graph_actions, "recompute_jobs", counting)
    arrival = [run for n, run in enumerate(runs) if n not in late] + [runs[n] for n in late]
    got = state_after([e for run in arrival for e in run], [2] * len(runs))
    assert got == expected
    assert [int(r) for r in replayed] == replays, replayed
    c_edges = [e for e in got["table_edges"] if e[1] == "c"]
    assert c_edges == []  # run 7 closes, at the instant it opened, what run 6 began reading


@pytest.mark.parametrize("first", [("x",), ("x", "y")])
def test_a_late_sighting_of_the_schema_before_it_at_the_instant_of_another_schema(first):
    """The late sighting repeats the schema seen an hour before, but another schema was seen
    at its very instant: whichever of the two sorts last there, the versions come out as
    when all arrive in time (either order of the two schemas is tried)."""
    other = ("x", "y") if first == ("x",) else ("x",)
    events = [
        dataset_event(at(1, 1), dataset("a", schema=schema(*first))),
        dataset_event(at(1, 2), dataset("a", schema=schema(*other))),
        dataset_event(at(1, 2), dataset("a", schema=schema(*first))),
        dataset_event(at(1, 3), dataset("a", schema=schema(*other))),
    ]
    expected = state_after(events, [len(events)])
    late = [events[0], events[1], events[3], events[2]]
    assert state_after(late, [1, 1, 1, 1]) == expected


@pytest.mark.parametrize("first", [("x",), ("x", "y")])
def test_a_late_sighting_after_an_instant_of_two_schemas(first):
    """Two schemas were seen at one instant: a later sighting of either starts a version or
    not by the one that sorts last there (both orders of the two are tried)."""
    other = ("x", "y") if first == ("x",) else ("x",)
    events = [
        dataset_event(at(1, 1), dataset("a", schema=schema(*first))),
        dataset_event(at(1, 1), dataset("a", schema=schema(*other))),
        dataset_event(at(1, 3), dataset("a", schema=schema(*first))),
        dataset_event(at(1, 2), dataset("a", schema=schema(*first))),
    ]
    in_time = [events[0], events[1], events[3], events[2]]
    expected = state_after(events, [len(events)])  # one batch: every sighting replayed
    assert state_after(in_time, [1, 1, 1, 1]) == expected
    assert state_after(events, [1, 1, 1, 1]) == expected


def test_a_late_sighting_of_an_unchanged_schema_reads_no_sightings_after_it(monkeypatch):
    """Hourly sightings of one schema, one of them late: on PostgreSQL its dataset's versions
    are not derived again (no window of sightings is read), and they are as in time order."""
    from catalog.lookups import in_windows as read

    windows: list[Any] = []

    def counting(model, *args, **kwargs):
        windows.append(model)
        return read(model, *args, **kwargs)

    events = [dataset_event(at(1, hour), dataset("a", schema=schema("x"))) for hour in range(6)]
    expected = state_after(events, [1] * len(events))
    monkeypatch.setattr("ingest.normalizer.in_windows", counting)
    late = [*events[:2], *events[3:], events[2]]
    assert state_after(late, [1] * len(events)) == expected
    # The first sighting starts the only version; on PostgreSQL none after it is replayed.
    replays = 1 if connection.vendor == "postgresql" else len(events)
    assert len(windows) == replays


def long_history() -> list[dict[str, Any]]:
    """Two jobs run hourly for a day, mostly the same lineage: an input's schema changes and
    changes back, a mapping changes for a while, an input is dropped and comes back."""
    events: list[dict[str, Any]] = []
    for hour in range(24):
        a_fields = ("x", "y", "w") if 7 <= hour < 15 else ("x", "y")
        for job, target in (("etl.one", "dw.one"), ("etl.two", "dw.two")):
            source = "y" if job == "etl.one" and 10 <= hour < 13 else "x"
            ins = [dataset("a", schema=schema(*a_fields)), dataset("b", schema=schema("z"))]
            if job == "etl.two" and 18 <= hour < 20:
                ins = ins[:1]
            output = dataset(
                target,
                schema=schema("x", "z"),
                columnLineage=columns({"x": [("a", source)], "z": [("b", "z")]}),
            )
            n = hour * 2 + (job == "etl.two") + 100
            events.append(run_event("START", run_id(n), at(2, hour, 1), job=job, inputs=ins))
            events.append(
                run_event(
                    "COMPLETE", run_id(n), at(2, hour, 20), job=job, inputs=ins, outputs=[output]
                )
            )
        if hour == 16:
            events.append(drop("b", at(2, hour, 40)))
    return events


LONG = long_history()


def late(events: list[dict[str, Any]], every: int, hours: int) -> list[dict[str, Any]]:
    """Every ``every``-th run's events arrive ``hours`` after their event time."""
    delayed = []
    for n, event in enumerate(events):
        shift = hours * 3600 if (n // 2) % every == 0 else 0
        arrival = parse_event(event).event_time.timestamp() + shift
        delayed.append((arrival, n, event))
    return [event for _, _, event in sorted(delayed, key=lambda item: item[:2])]


@pytest.mark.parametrize(
    ("name", "arrival", "chunk"),
    [
        ("newest first", lambda events: list(reversed(events)), 6),
        ("one run in ten five hours late", lambda events: late(events, 10, 5), 4),
        ("one run in three a day late", lambda events: late(events, 3, 24), 7),
    ],
)
def test_a_long_history_loaded_late_or_newest_first_ends_as_in_time_order(name, arrival, chunk):
    expected = state_after(LONG, [8] * len(LONG))
    assert state_after(arrival(LONG), [chunk] * len(LONG)) == expected, name


@settings(max_examples=15)
@given(case=shuffled_with_duplicates(LONG))
def test_a_long_history_in_any_order_ends_as_in_time_order(case):
    events, chunks = case
    expected = state_after(LONG, [8] * len(LONG))
    assert state_after(events, [size * 4 for size in chunks]) == expected


@settings(max_examples=30)
@given(
    schemas=st.lists(
        st.sets(st.sampled_from(("a", "b", "c")), min_size=1).map(sorted), min_size=1, max_size=6
    ),
    data=st.data(),
)
def test_the_fields_as_of_any_instant_are_the_schema_then_in_any_arrival_order(schemas, data):
    """Fields leave a schema and come back: as of any instant, the fields that existed are
    the ones of the schema in force then, computed from scratch."""
    events = [
        run_event("COMPLETE", run_id(day), at(day), outputs=[dataset("dw.o", schema=schema(*s))])
        for day, s in enumerate(schemas, 1)
    ]
    order, chunks = data.draw(shuffled_with_duplicates(events))
    with transaction.atomic():
        start = 0
        for size in [*chunks, len(order)]:
            if order[start : start + size]:
                normalize([parse_event(e) for e in order[start : start + size]])
            start += size
        for day in range(1, len(schemas) + 1):
            for hour in (0, 12):
                instant = parse_event(run_event("OTHER", run_id(0), at(day, hour))).event_time
                existed = DatasetField.objects.filter(field_existed(instant))
                assert sorted(existed.values_list("name", flat=True)) == schemas[day - 1]
        transaction.set_rollback(True)


def docs_event(run: int, when: str, description: str | None, owner: str) -> dict[str, Any]:
    """A run writing dw.docs with documentation (unless None) and ownership facets."""
    facets: dict[str, Any] = {
        "ownership": {"owners": [{"name": f"team:{owner}", "type": "MAINTAINER"}]}
    }
    if description is not None:
        facets["documentation"] = {"description": description}
    return run_event("COMPLETE", run_id(run), when, outputs=[dataset("dw.docs", **facets)])


def _steward_edit(when: str, description: str | None, owner: str | None) -> None:
    from catalog import actions as catalog_actions

    changes: dict[str, Any] = {}
    if description is not None:
        changes["description"] = description
    if owner is not None:
        changes["owners"] = [catalog_actions.OwnerSpec(f"team:{owner}", "MAINTAINER")]
    catalog_actions.update_dataset(
        Dataset.objects.get(name="dw.docs"),
        changes,
        catalog_actions.Actor(name="sam"),
        at=parse_event(run_event("COMPLETE", run_id(1), when)).event_time,
    )


@settings(max_examples=60)
@given(
    values=st.lists(
        st.tuples(st.sampled_from(("", "Orders", "Orders in euros")), st.sampled_from("ab")),
        min_size=1,
        max_size=5,
    ),
    edit=st.one_of(
        st.none(),
        st.tuples(
            st.integers(0, 4),
            # Values no facet gives: the edit changes them, whatever came before it. (A
            # person's edit to the value already there writes no record, so an older facet
            # that comes after it cannot tell it was there.)
            st.one_of(st.none(), st.just("Curated")),
            st.one_of(st.none(), st.just("s")),
        ),
    ),
    data=st.data(),
)
def test_descriptions_and_owners_have_the_same_history_in_any_arrival_order(values, edit, data):
    """A producer's documentation and ownership facets, changing over time, and maybe a
    steward's edit between two of them: whatever order they arrive in, today's values and
    the history every answer as of an instant reads are those of arrival in time order."""
    first = run_event("COMPLETE", run_id(299), at(2, 23), outputs=[dataset("dw.docs")])
    steps: list[Any] = [
        docs_event(300 + hour, at(3, hour), description, owner)
        for hour, (description, owner) in enumerate(values)
    ]
    if edit is not None:
        steps.append((at(3, edit[0], 30), edit[1], edit[2]))

    def when(step: Any) -> str:
        return str(step[0] if isinstance(step, tuple) else step["eventTime"])

    sequence = [steps[i] for i in data.draw(st.permutations(range(len(steps))))]
    if edit is not None:
        # A person edits at the instant the edit says: events of later times came after it.
        person = next(step for step in sequence if isinstance(step, tuple))
        position = sequence.index(person)
        sequence.remove(person)
        later = [i for i, step in enumerate(sequence) if when(step) > person[0]]
        sequence.insert(min([position, *later]), person)

    # Facets that arrive together are normalised in one batch, which puts several of them
    # in the history late at once.
    together = data.draw(st.lists(st.booleans(), min_size=len(steps), max_size=len(steps)))

    def state(sequence: list[Any], together: list[bool]) -> dict[str, Any]:
        with transaction.atomic():
            normalize([parse_event(first)])
            batch: list[Any] = []
            for step, joins in zip([*sequence, None], [*together, False], strict=True):
                if batch and not (joins and isinstance(step, dict)):
                    normalize([parse_event(e) for e in batch])
                    batch = []
                if isinstance(step, tuple):
                    _steward_edit(*step)
                elif step is not None:
                    batch.append(step)
            found = snapshot()
            transaction.set_rollback(True)
        return found

    assert state(sequence, together) == state(sorted(steps, key=when), [False] * len(steps))


def test_a_late_facet_shows_its_changes_in_the_history_as_arrival_in_time_order_would():
    """Documentation and ownership that come late at one instant are listed in the history
    as they would have been written in time: the description's change, then the owners'."""
    from catalog.queries import history

    first = docs_event(401, at(3, 1), None, "a")
    second = docs_event(402, at(3, 2), "Orders", "b")
    third = docs_event(403, at(3, 3), "Sales", "c")

    def shown(batches: list[list[dict[str, Any]]]) -> list[tuple[str, Any, Any]]:
        with transaction.atomic():
            for batch in batches:
                normalize([parse_event(e) for e in batch])
            found = [
                (r.attribute, r.old, r.new)
                for r in history(Dataset.objects.get(name="dw.docs"))
                if r.attribute != "lifecycle"
            ]
            transaction.set_rollback(True)
        return found

    in_time = shown([[first], [second], [third]])
    assert [attribute for attribute, *_ in in_time[:4]] == [
        "owners",
        "description",
        "owners",
        "description",
    ]
    assert shown([[first, third], [second]]) == in_time


# Instants a microsecond apart, one written with a +02:00 offset, and hours apart: late
# instants next to each other and next to the ones around them.
INSTANTS = [
    "2026-03-03T10:00:00Z",
    "2026-03-03T10:00:00.000001Z",
    "2026-03-03T10:00:00.000002Z",
    "2026-03-03T13:00:00+02:00",
    "2026-03-03T12:00:00Z",
    "2026-03-03T12:00:00.000001Z",
    "2026-03-03T14:00:00Z",
    "2026-03-04T00:00:00Z",
]


@settings(max_examples=40)
@given(
    said=st.dictionaries(
        st.integers(0, len(INSTANTS) - 1),
        st.lists(
            st.tuples(st.sampled_from(("", "Orders", "Sales")), st.sampled_from("ab")),
            min_size=1,
            max_size=2,
        ),
        min_size=2,
    ),
    data=st.data(),
)
def test_late_facets_next_to_each_other_give_the_history_of_arrival_in_time_order(said, data):
    """Documentation and ownership facets at instants a microsecond apart and in another
    offset, one or two events at an instant (told apart by their fingerprints, saying the
    same or something else), arriving in any order and batching: the history and today's
    values are those of arrival in the order of time and fingerprint."""
    events = [
        docs_event(500 + 10 * instant + copy, INSTANTS[instant], description, owner)
        for instant, values in said.items()
        for copy, (description, owner) in enumerate(values)
    ]
    order = [events[i] for i in data.draw(st.permutations(range(len(events))))]
    chunks = data.draw(st.lists(st.integers(1, 4), min_size=len(events), max_size=len(events)))
    in_time = sorted(events, key=lambda e: parse_event(e).sort_key)
    assert state_after(order, chunks) == state_after(in_time, [1] * len(events))


def test_events_at_one_instant_saying_different_things_leave_one_record_there():
    """Two events at one microsecond give different descriptions and owners: the one last by
    fingerprint is what the dataset says from then on, and the history holds one record of
    each there (from what was said before the instant), whichever of them came first and
    whether a newer event came in between."""
    from itertools import permutations

    events = [
        docs_event(600, at(3, 1), "Orders", "a"),
        docs_event(601, at(3, 1), "Sales", "b"),
        docs_event(602, at(3, 2), "Totals", "a"),
    ]
    last = max(events[:2], key=lambda e: parse_event(e).sort_key)
    said = last["outputs"][0]["facets"]["documentation"]["description"]
    owner = last["outputs"][0]["facets"]["ownership"]["owners"]
    in_time = state_after(sorted(events, key=lambda e: parse_event(e).sort_key), [1, 1, 1])
    assert sorted(
        (when.hour, attribute, json.loads(old), json.loads(new))
        for _, _, attribute, when, old, new, _ in in_time["history"]
        if attribute != "lifecycle"
    ) == [
        (1, "description", "", said),
        (1, "owners", [], owner),
        (2, "description", said, "Totals"),
        *(
            [(2, "owners", owner, [{"name": "team:a", "type": "MAINTAINER"}])]
            if said == "Sales"
            else []
        ),
    ]
    for order in permutations(events):
        assert state_after(list(order), [1, 1, 1]) == in_time


def test_a_persons_edit_between_two_events_of_one_instant_stays_in_the_history():
    """Owners z, then two events at one instant saying a and then (by fingerprint) z, with
    a steward's edit at that instant arriving between them: the later event's record follows
    the edit (nothing joins across it), and today's owners are the history's last."""
    from catalog import actions as catalog_actions
    from catalog.queries import history

    def key(e: dict[str, Any]) -> Any:
        return parse_event(e).sort_key

    # Runs whose events at 3:01 sort a's before z's.
    run = next(
        n
        for n in range(701, 800, 2)
        if key(docs_event(n, at(3, 1), "", "a")) < key(docs_event(n + 1, at(3, 1), "", "z"))
    )
    normalize([parse_event(docs_event(700, at(3, 0), "", "z"))])
    normalize([parse_event(docs_event(run, at(3, 1), "", "a"))])
    _steward_edit(at(3, 1), None, "s")
    normalize([parse_event(docs_event(run + 1, at(3, 1), "", "z"))])
    docs = Dataset.objects.get(name="dw.docs")
    assert [
        ([o["name"] for o in r.old or []], [o["name"] for o in r.new or []], r.source)
        for r in reversed(history(docs))
        if r.attribute == "owners"
    ] == [
        ([], ["team:z"], "lineage"),
        (["team:z"], ["team:a"], "lineage"),
        (["team:a"], ["team:s"], "steward"),
        (["team:s"], ["team:z"], "lineage"),
    ]
    assert [o["name"] for o in catalog_actions.owners_value(docs)] == ["team:z"]


def test_an_earlier_event_of_the_instant_arriving_after_a_persons_edit_leaves_it_standing():
    """Owners a from the event last by fingerprint at 3:01, then a steward's edit at 3:01,
    then the instant's other event (owners b, before it by fingerprint): the instant still
    says a, the steward's edit follows it, and the steward's owners are today's."""
    from catalog import actions as catalog_actions
    from catalog.queries import history

    def key(e: dict[str, Any]) -> Any:
        return parse_event(e).sort_key

    run = next(
        n
        for n in range(801, 900, 2)
        if key(docs_event(n, at(3, 1), "", "b")) < key(docs_event(n + 1, at(3, 1), "", "a"))
    )
    normalize([parse_event(docs_event(run + 1, at(3, 1), "", "a"))])
    _steward_edit(at(3, 1), None, "s")
    normalize([parse_event(docs_event(run, at(3, 1), "", "b"))])
    docs = Dataset.objects.get(name="dw.docs")
    assert [
        ([o["name"] for o in r.old or []], [o["name"] for o in r.new or []], r.source)
        for r in reversed(history(docs))
        if r.attribute == "owners"
    ] == [([], ["team:a"], "lineage"), (["team:a"], ["team:s"], "steward")]
    assert [o["name"] for o in catalog_actions.owners_value(docs)] == ["team:s"]


def _documented(name: str, run: int, hour: int, description: str, owner: str) -> dict[str, Any]:
    facets = {
        "documentation": {"description": description},
        "ownership": {"owners": [{"name": f"team:{owner}", "type": "MAINTAINER"}]},
    }
    return run_event("COMPLETE", run_id(run), at(3, hour), outputs=[dataset(name, **facets)])


SAID = st.tuples(st.sampled_from(("", "Orders", "Sales")), st.sampled_from("ab"))


@settings(max_examples=40)
@given(
    old=st.dictionaries(st.integers(0, 5), SAID, max_size=3),
    new=st.dictionaries(st.integers(0, 11).filter(lambda hour: hour != 6), SAID, max_size=3),
    own=st.one_of(st.none(), st.sampled_from(("", "Renamed"))),
    data=st.data(),
)
def test_a_renames_carry_is_the_same_in_any_arrival_order(old, new, own, data):
    """dw.old, documented and owned over the morning, is renamed dw.docs at 06:00 (the
    rename maybe documenting it), and dw.docs is documented before and after: whatever order
    the events arrive in and however they are batched, what the rename carries to dw.docs
    (the old name's description and owners then, unless dw.docs had its own), today's
    values and the history are those of arrival in time order."""
    facets = {"documentation": {"description": own}} if own is not None else {}
    rename = dataset_event(
        at(3, 6),
        dataset(
            "dw.docs",
            lifecycleStateChange={
                "lifecycleStateChange": "RENAME",
                "previousIdentifier": {"namespace": PG, "name": "dw.old"},
            },
            **facets,
        ),
    )
    events = [
        rename,
        *(_documented("dw.old", 400 + h, h, text, owner) for h, (text, owner) in old.items()),
        *(_documented("dw.docs", 500 + h, h, text, owner) for h, (text, owner) in new.items()),
    ]
    sequence = [events[i] for i in data.draw(st.permutations(range(len(events))))]
    together = data.draw(st.lists(st.booleans(), min_size=len(events), max_size=len(events)))

    def state(sequence: list[dict[str, Any]], together: list[bool]) -> dict[str, Any]:
        with transaction.atomic():
            batch: list[dict[str, Any]] = []
            for event, joins in zip([*sequence, None], [*together, False], strict=True):
                if batch and not joins:
                    normalize([parse_event(e) for e in batch])
                    batch = []
                if event is not None:
                    batch.append(event)
            found = snapshot()
            found["owners"] = sorted(
                DatasetOwnership.objects.values_list("dataset__name", "owner__name")
            )
            transaction.set_rollback(True)
        return found

    in_time = sorted(events, key=lambda e: e["eventTime"])
    assert state(sequence, together) == state(in_time, [False] * len(events))
