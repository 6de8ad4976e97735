"""Personal data follows the data: the propagation rules, the incremental upkeep checked
against a from-scratch recomputation (now and as of any instant), and scenarios with known
truth."""

from __future__ import annotations

import os
from dataclasses import astuple
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
import time_machine
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog import actions as catalog_actions
from catalog.flags import copied_flags_as_of, field_flags, flags_as_of, timelines, union_kinds
from catalog.models import (
    ChangeSource,
    Dataset,
    DatasetField,
    FlagSource,
    PiiCategory,
    PropagatedFlag,
    SubjectKind,
)
from graph import details, directory, nodecache, nodedata, propagation, queries
from graph.models import ColumnEdge, Job
from graph.resolve import resolve_node_id
from privacy.queries import Identifier, SubjectSearch, search_subject, subject_fields
from tests.factories import dataset as make_dataset
from tests.graph_builders import node_store_written

pytestmark = pytest.mark.django_db

T0 = datetime(2025, 1, 1, tzinfo=UTC)
STEWARD = catalog_actions.Actor(name="stella", source=ChangeSource.STEWARD)


def at(hours: int) -> datetime:
    return T0 + timedelta(hours=hours)


# -- the rules, alone ------------------------------------------------------------------------


def test_only_direct_identity_and_transformation_carry_a_flag():
    assert propagation.carries("DIRECT", "IDENTITY")
    assert propagation.carries("DIRECT", "TRANSFORMATION")
    assert propagation.carries("DIRECT", "")
    for subtype in ("AGGREGATION",):
        assert not propagation.carries("DIRECT", subtype)
    for subtype in ("JOIN", "FILTER", "GROUP_BY", "SORT", "WINDOW", "CONDITIONAL", "", "IDENTITY"):
        assert not propagation.carries("INDIRECT", subtype)


def _edges(*pairs: tuple[int, int, bool]) -> dict[int, list[propagation.Edge]]:
    found: dict[int, list[propagation.Edge]] = {}
    for source, target, masking in pairs:
        found.setdefault(source, []).append(propagation.Edge(source, target, masking, T0, None))
    return found


def test_reach_follows_copies_masks_stops_at_declared_and_blocked_fields():
    edges = _edges((1, 2, False), (2, 3, True), (3, 4, False), (1, 5, False), (5, 6, False))
    assert propagation.reach(1, edges, at(1), {1}, set()) == {
        2: False,
        3: True,
        4: True,
        5: False,
        6: False,
    }
    # A declared field is a source of its own; a blocked one stops the flag there and below.
    assert propagation.reach(1, edges, at(1), {1, 5}, {3}) == {2: False}
    assert propagation.reach(1, edges, at(1), set(), set()) == {}


def test_a_field_reached_by_an_unmasked_path_is_not_masked():
    edges = _edges((1, 2, True), (2, 4, False), (1, 3, False), (3, 4, False))
    assert propagation.reach(1, edges, at(1), {1}, set())[4] is False


# -- a small world ----------------------------------------------------------------------------


class World:
    """Fields f0..fn in their own datasets, one job, and the actions the product takes."""

    def __init__(self, n: int) -> None:
        self.kind, _ = SubjectKind.objects.get_or_create(name="customer")
        self.fields: list[DatasetField] = []
        for i in range(n):
            ds = make_dataset(namespace="pg://w", name=f"t{i}", fields=("c",), at=T0)
            self.fields.append(ds.fields.get())
        self.edges: list[ColumnEdge] = []

    def declare(self, i: int, category: str, when: datetime) -> None:
        changes: dict[str, Any] = {"pii_category": category}
        if category == PiiCategory.IDENTIFIER:
            changes["subject_kind"] = self.kind
        catalog_actions.update_field(self.fields[i], changes, STEWARD, at=when)

    def undeclare(self, i: int, when: datetime) -> None:
        catalog_actions.update_field(
            self.fields[i], {"pii_category": "", "subject_kind": None}, STEWARD, at=when
        )

    def block(self, i: int, blocked: bool, when: datetime) -> None:
        catalog_actions.update_field(
            self.fields[i], {"propagation_blocked": blocked}, STEWARD, at=when
        )

    def open(
        self, u: int, v: int, subtype: str, masking: bool, start: datetime, end: datetime | None
    ) -> None:
        job = Job.objects.create(
            namespace=self.fields[0].dataset.namespace, name=f"etl{len(self.edges)}", created_at=T0
        )
        edge = ColumnEdge.objects.create(
            job=job,
            source_field=self.fields[u],
            target_dataset=self.fields[v].dataset,
            target_field=self.fields[v],
            transformation_type="INDIRECT" if subtype == "JOIN" else "DIRECT",
            transformation_subtype=subtype,
            masking=masking,
            valid_from=start,
            valid_to=end,
        )
        self.edges.append(edge)
        propagation.edges_changed([self.fields[u].pk], start)

    def close(self, index: int, end: datetime) -> None:
        edge = self.edges[index]
        if edge.valid_to is None and end > edge.valid_from:
            edge.valid_to = end
            edge.save(update_fields=["valid_to"])
            propagation.edges_changed([edge.source_field_id], end)

    def flag(self, i: int) -> tuple[str, str | None, str, bool]:
        f = DatasetField.objects.select_related("subject_kind").get(pk=self.fields[i].pk)
        return (
            f.pii_category,
            f.subject_kind.name if f.subject_kind else None,
            f.flag_source,
            f.flag_masked,
        )


def rows() -> set[tuple[int, int, bool, datetime, datetime | None]]:
    return set(
        PropagatedFlag.objects.values_list(
            "field_id", "source_id", "masked", "valid_from", "valid_to"
        )
    )


# -- scenarios with known truth ---------------------------------------------------------------


def test_a_renamed_key_and_a_masked_hash_are_flagged_an_aggregate_is_not():
    w = World(5)
    w.declare(0, PiiCategory.IDENTIFIER, at(0))
    w.declare(1, PiiCategory.EMAIL, at(0))
    w.open(0, 2, "IDENTITY", False, at(1), None)  # customer_id -> cust_key
    w.open(1, 3, "TRANSFORMATION", True, at(1), None)  # email -> sha2(email)
    w.open(2, 4, "AGGREGATION", False, at(1), None)  # count(cust_key)
    assert w.flag(2) == (PiiCategory.IDENTIFIER, "customer", FlagSource.PROPAGATED, False)
    assert w.flag(3) == (PiiCategory.EMAIL, None, FlagSource.PROPAGATED, True)
    assert w.flag(4) == ("", None, FlagSource.DECLARED, False)


def test_a_job_that_stops_reading_a_column_closes_the_flag_at_that_instant():
    w = World(3)
    w.declare(0, PiiCategory.NAME, at(0))
    w.open(0, 1, "IDENTITY", False, at(1), None)
    w.open(1, 2, "IDENTITY", False, at(1), None)
    w.close(0, at(5))
    assert w.flag(1)[0] == "" and w.flag(2)[0] == ""
    assert rows() == {
        (w.fields[1].pk, w.fields[0].pk, False, at(1), at(5)),
        (w.fields[2].pk, w.fields[0].pk, False, at(1), at(5)),
    }


def test_declared_flags_win_and_a_block_stops_the_flag_below():
    w = World(4)
    w.declare(0, PiiCategory.EMAIL, at(0))
    for u, v in ((0, 1), (1, 2), (2, 3)):
        w.open(u, v, "IDENTITY", False, at(1), None)
    w.declare(1, PiiCategory.NAME, at(2))
    assert w.flag(1)[:3] == (PiiCategory.NAME, None, FlagSource.DECLARED)
    assert w.flag(3)[0] == PiiCategory.NAME  # from field 1 now, not from 0
    w.block(2, True, at(3))
    assert w.flag(2)[0] == "" and w.flag(3)[0] == ""
    w.block(2, False, at(4))
    assert w.flag(3)[0] == PiiCategory.NAME
    w.undeclare(1, at(5))
    assert w.flag(1)[:3] == (PiiCategory.EMAIL, None, FlagSource.PROPAGATED)
    assert w.flag(3)[0] == PiiCategory.EMAIL


def test_a_confirmed_flag_becomes_declared_and_keeps_its_value():
    w = World(2)
    w.declare(0, PiiCategory.IDENTIFIER, at(0))
    w.open(0, 1, "IDENTITY", False, at(1), None)
    catalog_actions.confirm_flag(w.fields[1], STEWARD, at=at(2))
    assert w.flag(1) == (PiiCategory.IDENTIFIER, "customer", FlagSource.DECLARED, False)
    w.undeclare(0, at(3))
    assert w.flag(1)[:3] == (PiiCategory.IDENTIFIER, "customer", FlagSource.DECLARED)


def test_a_field_reached_from_several_sources_keeps_each():
    w = World(3)
    w.declare(0, PiiCategory.NAME, at(0))
    w.declare(1, PiiCategory.EMAIL, at(0))
    w.open(0, 2, "TRANSFORMATION", False, at(1), None)
    w.open(1, 2, "TRANSFORMATION", True, at(1), None)
    sources = set(
        PropagatedFlag.objects.filter(field=w.fields[2]).values_list("source_id", flat=True)
    )
    assert sources == {w.fields[0].pk, w.fields[1].pk}
    assert w.flag(2) == (PiiCategory.EMAIL, None, FlagSource.PROPAGATED, False)


# -- the incremental upkeep against a recomputation -------------------------------------------

N_FIELDS = 6
SUBTYPES = ["IDENTITY", "TRANSFORMATION", "AGGREGATION", "JOIN"]
categories = st.sampled_from([PiiCategory.EMAIL, PiiCategory.NAME, PiiCategory.IDENTIFIER])
field_index = st.integers(0, N_FIELDS - 1)
hours = st.integers(0, 40)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("declare"), field_index, categories),
        st.tuples(st.just("undeclare"), field_index),
        st.tuples(st.just("block"), field_index, st.booleans()),
        st.tuples(
            st.just("open"),
            field_index,
            field_index,
            st.sampled_from(SUBTYPES),
            st.booleans(),
            hours,
            st.one_of(st.none(), st.integers(1, 20)),
        ),
        st.tuples(st.just("close"), st.integers(0, 30), hours),
    ),
    max_size=16,
)


def naive_flags(w: World, moment: datetime) -> dict[int, dict[int, bool]]:
    """{field: {source: masked}} at ``moment``, from the raw facts, by brute force."""
    lines = timelines([f.pk for f in w.fields])
    declared = {pk for pk, line in lines.items() if line.declared_at(moment)}
    blocked = {pk for pk, line in lines.items() if line.blocked_at(moment)}
    live = [
        e
        for e in ColumnEdge.objects.all()
        if propagation.carries(e.transformation_type, e.transformation_subtype)
        and e.valid_from <= moment
        and (e.valid_to is None or moment < e.valid_to)
    ]
    found: dict[int, dict[int, bool]] = {}
    for source in declared:
        # Every simple path from the source, the flag entering only undeclared, unblocked fields.
        best: dict[int, bool] = {}
        stack: list[tuple[int, bool, frozenset[int]]] = [(source, False, frozenset({source}))]
        while stack:
            node, masked, path = stack.pop()
            for e in live:
                if e.source_field_id != node or e.target_field_id in path:
                    continue
                target = e.target_field_id
                if target in declared or target in blocked:
                    continue
                now = masked or e.masking
                if target not in best or (best[target] and not now):
                    best[target] = now
                stack.append((target, now, path | {target}))
        for target, masked in best.items():
            found.setdefault(target, {})[source] = masked
    return found


def _listed(found: SubjectSearch) -> dict[int, tuple[Any, ...]]:
    """What a search shows of each dataset it lists."""
    return {
        h.id: (h.relation, h.distance, h.evidence, [astuple(f) for f in h.fields])
        for h in found.all_hits
    }


def flags_from_rows(moment: datetime) -> dict[int, dict[int, bool]]:
    found: dict[int, dict[int, bool]] = {}
    for field, source, masked, start, end in rows():
        if start <= moment and (end is None or moment < end):
            found.setdefault(field, {})[source] = masked
    return found


@settings(
    max_examples=int(os.environ.get("PROPAGATION_EXAMPLES", "100")),
    suppress_health_check=list(HealthCheck),
)
@given(ops=operations)
def test_incremental_flags_equal_a_recomputation_now_and_as_of_any_instant(ops):
    with transaction.atomic():
        w = World(N_FIELDS)
        # Steward edits happen in order (one an hour); edges may be late or early.
        for clock, op in enumerate(ops, start=1):
            if op[0] == "declare":
                w.declare(op[1], op[2], at(clock))
            elif op[0] == "undeclare":
                w.undeclare(op[1], at(clock))
            elif op[0] == "block":
                w.block(op[1], op[2], at(clock))
            elif op[0] == "open":
                _, u, v, subtype, masking, start, length = op
                if u != v:
                    end = None if length is None else at(start + length)
                    w.open(u, v, subtype, masking, at(start), end)
            elif op[0] == "close" and w.edges:
                w.close(op[1] % len(w.edges), at(op[2]))
        incremental = rows()
        shown = [w.flag(i) for i in range(N_FIELDS)]
        PropagatedFlag.objects.all().delete()
        propagation.recompute_all()
        assert rows() == incremental
        assert [w.flag(i) for i in range(N_FIELDS)] == shown
        node_id = {f.pk: f"datasetField:pg://w:{f.dataset.name}:c" for f in w.fields}
        for hour in range(0, 64, 4):
            naive = naive_flags(w, at(hour))
            assert flags_from_rows(at(hour)) == naive, hour
            # What a reader is shown as of then: the sources it names and the masking.
            shown_then = field_flags(w.fields, as_of=at(hour))
            for f in w.fields:
                flag, reached = shown_then[f.pk], naive.get(f.pk, {})
                assert (flag.source == FlagSource.PROPAGATED) == bool(reached), (hour, f.pk)
                if reached:
                    assert set(flag.propagated_from) == {node_id[s] for s in reached}
                    assert flag.masked == all(reached.values())
            # Subject search's fields then are those showing its kind then, field by field.
            holding = {
                (f.pk, shown_then[f.pk].pii, shown_then[f.pk].source == FlagSource.DECLARED)
                for f in w.fields
                if shown_then[f.pk].subject_kind == w.kind.name
            }
            then = subject_fields(w.kind, at(hour))
            assert {(f.id, f.pii_category, f.declared) for f in then} == holding, hour
            # And the search as of then finds every one of them, through lineage.
            search = search_subject(w.kind, [Identifier(0)], at(hour))
            assert {pk for pk, _, _ in holding} <= set(search.reached_fields.tolist()), hour
            if hour % 8 == 0:
                # Hiding datasets (scratch tables) leaves them out of the answer, and
                # changes nothing else: a field declared there still leads to its copies.
                hide = {w.fields[i].dataset_id for i in range(hour % 3, N_FIELDS, 3)}
                Dataset.objects.filter(pk__in=hide).update(is_hidden=True)
                hidden = search_subject(w.kind, [Identifier(0)], at(hour))
                Dataset.objects.filter(pk__in=hide).update(is_hidden=False)
                assert _listed(hidden) == {
                    pk: hit for pk, hit in _listed(search).items() if pk not in hide
                }, hour
        # Subject search's fields as of a later instant are those it reads from now.
        now = {(f.id, f.pii_category, f.declared) for f in subject_fields(w.kind, None)}
        assert {(f.id, f.pii_category, f.declared) for f in subject_fields(w.kind, at(999))} == now
        # Lineage answers as of then show each dataset as a rendering from the history
        # does, read by a process that started after every change (so that its node
        # directory tells which datasets changed since only by a propagated flag).
        try:
            pks = [f.dataset_id for f in w.fields]
            read = node_store_written()
            ever = {
                f.pk: (f.dataset_id, f.name)
                for f in DatasetField.objects.filter(pk__in=PropagatedFlag.objects.values("field"))
            }
            assert read is None or read.flagged_fields(pks) == {
                ds: [(pk, name) for pk, (of, name) in sorted(ever.items()) if of == ds]
                for ds in {ds for ds, _ in ever.values()}
            }
            for hour in range(0, 64, 4):
                rendered = nodedata.render_datasets(pks, at(hour))
                expected = {pk: entry.data.encode() for pk, entry in rendered.items()}
                assert nodedata.lineage_data(pks, [], at(hour))[0] == expected, hour
                # Impact lists and subject search name the fields personal then.
                flags = field_flags(w.fields, as_of=at(hour))
                personal = {
                    f.dataset_id: [(f.name, flags[f.pk].pii, flags[f.pk].subject_kind)]
                    if flags[f.pk].pii or flags[f.pk].subject_kind
                    else []
                    for f in w.fields
                }
                for found in (
                    nodedata.dataset_infos(pks, at(hour)),
                    details.load_datasets(pks, at(hour), "personal"),
                ):
                    assert {
                        pk: [(f.name, f.pii_category, f.subject_kind) for f in info.pii_fields]
                        for pk, info in found.items()
                    } == personal, hour
                # Column lineage as of then names each field's subject kind then.
                for f in w.fields:
                    answer = queries.column_lineage(
                        resolve_node_id(node_id[f.pk]), depth=3, as_of=at(hour)
                    )
                    assert {
                        n.pk: n.subject_kind for n in answer.nodes if n.kind == "DATASET_FIELD"
                    } == {
                        n.pk: flags[n.pk].subject_kind
                        for n in answer.nodes
                        if n.kind == "DATASET_FIELD"
                    }, hour
        finally:
            nodecache.cache.clear()
            directory.reset()
        transaction.set_rollback(True)


def test_copies_read_as_of_an_instant_from_their_flag_rows_alone_show_what_they_showed():
    """A copy's flag as of any instant, read from the flag rows valid then or now and its
    sources' history (what lineage answers do for datasets whose flags alone changed), is
    the flag a reading of every field's own history gives."""
    w = World(4)
    w.declare(0, PiiCategory.EMAIL, at(1))
    w.open(0, 1, "IDENTITY", False, at(2), None)
    w.open(1, 2, "TRANSFORMATION", True, at(3), at(7))
    w.declare(3, PiiCategory.IDENTIFIER, at(4))
    w.open(3, 2, "IDENTITY", False, at(5), None)
    w.declare(0, PiiCategory.NAME, at(6))
    w.undeclare(3, at(8))
    copies = [f.pk for f in w.fields[1:3]]
    for hour in range(0, 11):
        full = flags_as_of(copies, at(hour))
        read = copied_flags_as_of(copies, at(hour))
        for pk in copies:
            shown = (full[pk].pii, full[pk].subject_kind)
            assert read.get(pk, ("", None)) == shown, (hour, pk)
    # Left out: a copy reached neither then nor now (f2 since f3 was undeclared at 8).
    assert set(copied_flags_as_of(copies, at(10))) == {copies[0]}


# -- through the API and ingestion ------------------------------------------------------------


def _ingest(api, producer, capture, events):
    with capture(execute=True):
        response = api(producer).post("/api/v1/lineage/batch", events, format="json")
    assert response.status_code == 201, response.content


def _copy_event(n, when, source, target, columns, masking=False, source_schema=None):
    from tests.ingest_builders import PG, dataset, run_event, run_id, schema

    fields = {
        out: {
            "inputFields": [
                {
                    "namespace": PG,
                    "name": source,
                    "field": inp,
                    "transformations": [
                        {
                            "type": "DIRECT",
                            "subtype": "TRANSFORMATION" if masking else "IDENTITY",
                            "masking": masking,
                        }
                    ],
                }
            ]
        }
        for out, inp in columns.items()
    }
    return run_event(
        "COMPLETE",
        run_id(n),
        when,
        job=f"copy.{target}",
        inputs=[dataset(source, schema=schema(*(source_schema or columns.values())))],
        outputs=[dataset(target, schema=schema(*columns), columnLineage={"fields": fields})],
    )


def test_flags_reach_copies_made_by_ingestion_and_show_in_the_api(
    api, producer, steward, viewer, django_capture_on_commit_callbacks
):
    from urllib.parse import quote

    from tests.ingest_builders import PG
    from tests.ingest_builders import at as event_at

    SubjectKind.objects.create(name="customer")
    capture = django_capture_on_commit_callbacks
    _ingest(
        api,
        producer,
        capture,
        [
            _copy_event(
                1,
                event_at(1),
                "raw.customers",
                "staging.customers",
                {"cust_key": "id", "full_name": "name"},
            ),
            _copy_event(
                2,
                event_at(2),
                "staging.customers",
                "marts.c360",
                {"customer": "cust_key"},
                masking=True,
                source_schema=("cust_key", "full_name"),
            ),
        ],
    )
    base = f"/api/v1/namespaces/{quote(PG, safe='')}/datasets"
    with capture(execute=True):
        for column, body in (
            ("id", {"pii": "identifier", "subjectKind": "customer"}),
            ("name", {"pii": "name"}),
        ):
            response = api(steward).patch(
                f"{base}/raw.customers/fields/{column}", body, format="json"
            )
            assert response.status_code == 200, response.content
    staging = {f["name"]: f for f in api(viewer).get(f"{base}/staging.customers").json()["fields"]}
    expected = {
        "pii": "identifier",
        "subjectKind": "customer",
        "flagSource": "propagated",
        "masked": False,
        "propagatedFrom": [f"datasetField:{PG}:raw.customers:id"],
    }
    assert {key: staging["cust_key"][key] for key in expected} == expected
    assert staging["full_name"]["pii"] == "name"
    mart = api(viewer).get(f"{base}/marts.c360").json()["fields"][0]
    assert (mart["pii"], mart["masked"], mart["flagSource"]) == ("identifier", True, "propagated")

    # A steward blocks the flag on the copy: it stops there and below, and history keeps it.
    response = api(steward).patch(
        f"{base}/staging.customers/fields/cust_key", {"pii": None}, format="json"
    )
    assert response.status_code == 200
    assert (response.json()["pii"], response.json()["propagationBlocked"]) == (None, True)
    assert api(viewer).get(f"{base}/marts.c360").json()["fields"][0]["pii"] is None
    history = api(viewer).get(f"{base}/staging.customers/history").json()["changes"]
    assert any(c["attribute"] == "propagation_blocked" and c["new"] is True for c in history)
    api(steward).patch(
        f"{base}/staging.customers/fields/cust_key", {"propagationBlocked": False}, format="json"
    )
    assert api(viewer).get(f"{base}/marts.c360").json()["fields"][0]["pii"] == "identifier"

    # Confirming makes the propagated flag declared.
    response = api(steward).patch(
        f"{base}/staging.customers/fields/full_name", {"confirm": True}, format="json"
    )
    assert (response.json()["flagSource"], response.json()["pii"]) == ("declared", "name")
    again = api(steward).patch(
        f"{base}/staging.customers/fields/full_name", {"confirm": True}, format="json"
    )
    assert again.status_code == 400 and again.json()["field"] == "confirm"

    # As of before the steward declared anything, no copy held a flag.
    before = api(viewer).get(f"{base}/staging.customers?asOf=2026-03-01T12:00:00Z").json()
    assert all(f["pii"] is None for f in before["fields"])


def test_an_aggregate_report_stays_unflagged_and_a_dropped_copy_loses_its_flag(
    api, producer, steward, viewer, django_capture_on_commit_callbacks
):
    from urllib.parse import quote

    from tests.ingest_builders import PG, dataset, drop, run_event, run_id, schema
    from tests.ingest_builders import at as event_at

    capture = django_capture_on_commit_callbacks
    _ingest(
        api,
        producer,
        capture,
        [_copy_event(1, event_at(1), "raw.people", "scratch.export", {"email": "email"})],
    )
    report = run_event(
        "COMPLETE",
        run_id(9),
        event_at(2),
        job="report",
        inputs=[dataset("raw.people", schema=schema("email"))],
        outputs=[
            dataset(
                "marts.report",
                schema=schema("people"),
                columnLineage={
                    "fields": {
                        "people": {
                            "inputFields": [
                                {
                                    "namespace": PG,
                                    "name": "raw.people",
                                    "field": "email",
                                    "transformations": [
                                        {"type": "DIRECT", "subtype": "AGGREGATION"}
                                    ],
                                }
                            ]
                        }
                    }
                },
            )
        ],
    )
    _ingest(api, producer, capture, [report])
    base = f"/api/v1/namespaces/{quote(PG, safe='')}/datasets"
    with time_machine.travel(datetime(2026, 2, 1, tzinfo=UTC)), capture(execute=True):
        api(steward).patch(f"{base}/raw.people/fields/email", {"pii": "email"}, format="json")
    assert api(viewer).get(f"{base}/scratch.export").json()["fields"][0]["pii"] == "email"
    assert api(viewer).get(f"{base}/marts.report").json()["fields"][0]["pii"] is None
    _ingest(api, producer, capture, [drop("scratch.export", event_at(5))])
    assert api(viewer).get(f"{base}/scratch.export/fields/email").json()["pii"] is None
    then = api(viewer).get(f"{base}/scratch.export?asOf=2026-03-04T00:00:00Z").json()["fields"][0]
    assert (then["pii"], then["flagSource"]) == ("email", "propagated")


# -- on the pages ------------------------------------------------------------------------------


def test_the_dataset_page_says_where_a_flag_came_from_and_lets_a_steward_confirm_or_block_it(
    client, steward
):
    w = World(3)
    w.declare(0, PiiCategory.EMAIL, at(0))
    w.open(0, 1, "TRANSFORMATION", True, at(1), None)
    w.open(1, 2, "IDENTITY", False, at(1), None)
    client.force_login(steward)
    page = "/datasets/show?namespace=pg://w&name=t1"
    html = client.get(page).content.decode()
    assert "PII · Email address · masked" in html
    assert 'title="datasetField:pg://w:t0:c"' in html
    assert "t0.c</a>" in html
    edit = "/datasets/field?namespace=pg://w&name=t1&field=c"
    assert client.post(edit, {"action": "block"}).status_code == 302
    assert "not personal data here" in client.get(page).content.decode()
    assert w.flag(2)[0] == ""
    client.post(edit, {"action": "unblock"})
    assert w.flag(2)[0] == PiiCategory.EMAIL
    # Saving the form unchanged keeps the flag propagated; a new kind is made in place.
    client.post(edit, {"pii_category": "email", "description": "hashed e-mail"})
    assert w.flag(1)[2] == FlagSource.PROPAGATED
    client.post(edit, {"pii_category": "email", "new_subject_kind": "newsletter-reader"})
    assert w.flag(1)[:3] == (PiiCategory.EMAIL, "newsletter-reader", FlagSource.DECLARED)
    bad = client.post(edit, {"pii_category": "email", "new_subject_kind": "Not A Slug"})
    assert bad.status_code == 422 and "lower-case word" in bad.content.decode()


def test_stewards_manage_subject_kinds_on_a_page(client, steward, compliance):
    client.force_login(steward)
    page = client.get("/stewardship/subject-kinds").content.decode()
    assert "No subject kinds yet" in page
    response = client.post(
        "/stewardship/subject-kinds", {"name": "patient", "description": "Treated"}
    )
    assert response.status_code == 302
    client.post(
        "/stewardship/subject-kinds",
        {"name": "patient", "description": "Anyone treated", "edit": "1"},
    )
    assert SubjectKind.objects.get(name="patient").description == "Anyone treated"
    twice = client.post("/stewardship/subject-kinds", {"name": "patient"})
    assert twice.status_code == 422 and "exists already" in twice.content.decode()
    client.force_login(compliance)
    assert "Anyone treated" in client.get("/stewardship/subject-kinds").content.decode()
    assert client.post("/stewardship/subject-kinds", {"name": "visitor"}).status_code == 403


def test_an_erasure_plan_anonymises_every_personal_column_of_a_copy(admin_user):
    from datetime import timedelta as days

    from catalog.models import RetentionAction, RetentionPolicy
    from privacy import actions as privacy_actions

    w = World(6)  # 0..2: raw id, name, phone; 3..5: the copy's key, full name, country
    w.declare(0, PiiCategory.IDENTIFIER, at(0))
    w.declare(1, PiiCategory.NAME, at(0))
    w.declare(2, PiiCategory.PHONE, at(0))
    copy = w.fields[3].dataset
    for i in (4, 5):  # one dataset for the copy: move the fields into it
        DatasetField.objects.filter(pk=w.fields[i].pk).update(dataset=copy, name=f"c{i}")
    w.fields = list(DatasetField.objects.filter(pk__in=[f.pk for f in w.fields]).order_by("pk"))
    copy.retention_policy = RetentionPolicy.objects.create(
        name="anonymise-later", duration=days(days=30), action=RetentionAction.ANONYMISE
    )
    copy.save()
    w.open(0, 3, "IDENTITY", False, at(1), None)
    w.open(1, 4, "IDENTITY", False, at(1), None)
    w.open(2, 5, "TRANSFORMATION", True, at(1), None)
    request = privacy_actions.SubjectRequest.build(w.kind, [(None, None, "4242")], None)
    plan = privacy_actions.create_erasure_plan(admin_user, request)
    privacy_actions.build_erasure_plan(str(plan.id))
    plan.refresh_from_db()
    step = next(s for s in plan.steps if s["name"] == copy.name)
    assert step["operation"] == "anonymise"
    assert step["anonymiseColumns"] == ["c", "c4", "c5"]


def test_subject_search_stops_where_a_steward_blocked_the_flag(admin_user):
    from privacy import actions as privacy_actions
    from privacy.queries import search_subject

    w = World(4)
    w.declare(0, PiiCategory.IDENTIFIER, at(0))
    for u, v in ((0, 1), (1, 2), (0, 3)):
        w.open(u, v, "IDENTITY", False, at(1), None)
    request = privacy_actions.SubjectRequest.build(w.kind, [(None, None, "4242")], None)

    def relations() -> dict[str, str]:
        found = search_subject(w.kind, request.identifiers, None, None)
        return {h.name: h.relation for h in found.all_hits}

    assert relations() == {"t0": "direct", "t1": "derived", "t2": "derived", "t3": "derived"}
    w.block(1, True, at(2))
    assert relations() == {"t0": "direct", "t1": "aggregate", "t2": "aggregate", "t3": "derived"}
    assert {w.flag(i)[0] for i in (1, 2)} == {""}


def test_the_graph_shows_flags_as_they_were_at_an_instant(client, viewer):
    from urllib.parse import quote

    w = World(2)
    w.open(0, 1, "IDENTITY", False, at(5), None)
    w.declare(0, PiiCategory.EMAIL, at(8))
    client.force_login(viewer)

    def copy_flag(hour: int) -> tuple[bool, bool]:
        when = quote(at(hour).isoformat())
        url = f"/graph/data?node=datasetField:pg://w:t0:c&level=column&asOf={when}"
        nodes = {n["id"]: n for n in client.get(url).json()["nodes"]}
        node = nodes["datasetField:pg://w:t1:c"]
        return node["pii"], node["propagated"]

    assert copy_flag(10) == (True, True)
    assert copy_flag(6) == (False, False)  # the source was not declared yet


def copy_data(client: Any, hour: int) -> Any:
    """The lineage API's data of the copy ``t1`` as of ``at(hour)``."""
    when = at(hour).isoformat().replace("+", "%2B")
    body = client.get(f"/api/v1/lineage?nodeId=dataset:pg://w:t1&asOf={when}").json()
    (node,) = [n for n in body["graph"] if n["id"] == "dataset:pg://w:t1"]
    return node["data"]


@pytest.mark.django_db(transaction=True)
def test_a_copy_shows_its_source_s_category_as_it_was_then(client, viewer):
    """A source declared anew changes what its copies show without a row of theirs
    changing: as of before, they show the category the source had then."""
    w = World(2)
    w.declare(0, PiiCategory.EMAIL, at(1))
    w.open(0, 1, "IDENTITY", False, at(2), None)
    w.declare(0, PiiCategory.PHONE, at(6))
    assert w.flag(1)[0] == PiiCategory.PHONE
    node_store_written()
    client.force_login(viewer)

    shown = [copy_data(client, hour)["fields"][0]["pii"] for hour in (1, 4, 8)]
    assert shown == [None, "email", "phone"]


@pytest.mark.django_db(transaction=True)
def test_a_flag_found_only_for_the_past_shows_in_answers_as_of_then(client, viewer):
    """Lineage that arrives late can give a copy a flag it held only in the past: nothing
    it shows now changes, yet a process that read its node directory before must not
    take the copy as unchanged since then."""
    w = World(2)
    w.declare(0, PiiCategory.EMAIL, at(2))
    node_store_written()
    w.open(0, 1, "IDENTITY", False, at(5), at(8))
    assert w.flag(1)[0] == ""
    client.force_login(viewer)

    assert [copy_data(client, hour)["hasPii"] for hour in (4, 6, 9)] == [False, True, False]


@pytest.mark.django_db(transaction=True)
def test_past_flags_are_right_from_a_node_directory_read_after_they_changed(client, viewer):
    w = World(2)
    w.open(0, 1, "IDENTITY", False, at(5), None)
    w.declare(0, PiiCategory.EMAIL, at(8))
    w.block(1, True, at(12))
    # A process that starts now maps the directory written after every change.
    found = node_store_written()
    pks = sorted({f.dataset_id for f in w.fields})
    for hour in (4, 6, 9, 11, 13):
        if found is None:
            break
        changed, reflagged, unknown = found.changed_since(pks, at(hour))
        assert not unknown
        assert changed == details.changed_since(pks, at(hour)), hour
        # The copy's dataset changed only by its propagated flag; the source was declared.
        assert reflagged == changed - {w.fields[0].dataset_id}, hour
    client.force_login(viewer)

    def copy_flag(hour: int) -> tuple[bool, bool]:
        when = at(hour).isoformat().replace("+", "%2B")
        explorer = client.get(f"/graph/data?node=dataset:pg://w:t1&asOf={when}").json()
        api = client.get(f"/api/v1/lineage?nodeId=dataset:pg://w:t1&asOf={when}").json()
        return explorer["nodes"][0]["pii"], api["graph"][0]["data"]["hasPii"]

    def api_flag(hour: int) -> Any:
        when = at(hour).isoformat().replace("+", "%2B")
        url = f"/api/v1/namespaces/pg%3A%2F%2Fw/datasets/t1?asOf={when}"
        return client.get(url).json()["fields"][0]["pii"]

    expected = [(False, False), (True, True), (False, False), (True, True)]
    assert [copy_flag(h) for h in (6, 9, 13, 9)] == expected
    assert [api_flag(h) for h in (6, 9, 13)] == [None, "email", None]


def test_subject_search_as_of_an_instant_lists_only_the_copies_flagged_then():
    from privacy import actions as privacy_actions
    from privacy.queries import search_subject

    w = World(3)
    w.declare(0, PiiCategory.IDENTIFIER, at(1))
    w.open(0, 1, "IDENTITY", False, at(5), None)
    w.open(1, 2, "IDENTITY", False, at(2), at(4))
    request = privacy_actions.SubjectRequest.build(w.kind, [(None, None, "4242")], None)

    def relations(hour: int) -> dict[str, str]:
        found = search_subject(w.kind, request.identifiers, at(hour), None)
        return {h.name: h.relation for h in found.all_hits}

    assert relations(3) == {"t0": "direct"}
    assert relations(6) == {"t0": "direct", "t1": "derived"}
    # With a depth limit, a copy beyond it is still listed as holding the flag it held then.
    shallow = search_subject(w.kind, request.identifiers, at(3), 0)
    assert {h.name for h in shallow.all_hits} == {"t0"}


def test_the_catalog_file_holds_declared_flags_only_and_keeps_a_copys_own_attributes():
    from catalog import catalog_file

    w = World(2)
    w.open(0, 1, "IDENTITY", False, at(1), None)
    w.declare(0, PiiCategory.EMAIL, at(2))
    catalog_actions.update_field(w.fields[1], {"sensitivity": "confidential"}, STEWARD, at=at(3))
    exported = {d["name"]: d.get("fields", {}) for d in catalog_file.export()["datasets"]}
    assert exported["t0"] == {"c": {"pii": "email"}}
    assert exported["t1"] == {"c": {"sensitivity": "confidential"}}  # not the propagated flag
    # Importing the file back changes nothing: the copy's flag stays propagated.
    catalog_file.apply(catalog_file.parse(catalog_file.dump(catalog_file.export())))
    assert w.flag(1)[:3] == ("email", None, FlagSource.PROPAGATED)


def test_a_copy_follows_its_source_when_the_source_is_reclassified():
    w = World(3)
    w.open(0, 1, "IDENTITY", False, at(1), None)
    w.open(1, 2, "TRANSFORMATION", True, at(1), None)
    w.declare(0, PiiCategory.EMAIL, at(2))
    assert [w.flag(i)[0] for i in (1, 2)] == ["email", "email"]
    w.declare(0, PiiCategory.NAME, at(3))
    assert [w.flag(i)[0] for i in (1, 2)] == ["name", "name"]
    w.declare(0, PiiCategory.IDENTIFIER, at(4))
    assert [w.flag(i)[:2] for i in (1, 2)] == [("identifier", "customer")] * 2
    assert field_flags(w.fields, as_of=at(2) + timedelta(minutes=30))[w.fields[2].pk].pii == "email"


def test_the_union_of_many_fields_leaves_out_sources_that_declared_nothing():
    fields, sources = np.asarray([1, 1, 2, 3]), np.asarray([10, 11, 12, 13])
    declared = {10: ("email", None), 11: ("identifier", "customer"), 12: ("", None)}
    found = union_kinds(fields, sources, declared)
    assert found.field.tolist() == [1]
    assert found.with_kind("customer") == ([1], ["identifier"])
    assert union_kinds(fields, sources, {}).field.size == 0


@pytest.mark.django_db(transaction=True)
def test_impact_as_of_lists_the_personal_fields_of_then_not_of_now(client, viewer):
    """A copy flagged then and no longer now is listed with its flag as of then; a field
    flagged only since is not."""
    w = World(3)
    w.declare(0, PiiCategory.EMAIL, at(1))
    w.open(0, 1, "IDENTITY", False, at(2), None)
    w.open(0, 2, "IDENTITY", False, at(2), None)
    w.undeclare(0, at(6))
    w.declare(2, PiiCategory.PHONE, at(7))
    client.force_login(viewer)

    def pii_fields(hour: int | None) -> dict[str, list[Any]]:
        when = "" if hour is None else "&asOf=" + at(hour).isoformat().replace("+", "%2B")
        body = client.get(f"/api/v1/lineage/impact?nodeId=datasetField:pg://w:t0:c{when}").json()
        return {
            d["name"]: [(f["name"], f["pii"]) for f in d["piiFields"]] for d in body["datasets"]
        }

    assert pii_fields(4) == {"t1": [("c", "email")], "t2": [("c", "email")]}
    assert pii_fields(8) == {"t1": [], "t2": [("c", "phone")]}
    assert pii_fields(None) == pii_fields(8)


@pytest.mark.django_db(transaction=True)
def test_subject_search_as_of_shows_the_personal_fields_of_then():
    from privacy import actions as privacy_actions

    w = World(2)
    w.declare(0, PiiCategory.IDENTIFIER, at(1))
    w.open(0, 1, "IDENTITY", False, at(2), None)
    w.undeclare(0, at(6))
    request = privacy_actions.SubjectRequest.build(w.kind, [(None, None, "4242")], None)

    def personal(hour: int) -> dict[str, list[tuple[str, str]]]:
        found = search_subject(w.kind, request.identifiers, at(hour), None)
        return {h.name: h.personal_fields for h in found.all_hits}

    assert personal(4) == {"t0": [("c", "identifier")], "t1": [("c", "identifier")]}
    assert personal(8) == {}


@pytest.mark.django_db(transaction=True)
def test_column_lineage_as_of_shows_the_subject_kinds_of_then(client, viewer):
    w = World(2)
    w.open(0, 1, "IDENTITY", False, at(1), None)
    w.declare(0, PiiCategory.IDENTIFIER, at(2))
    w.undeclare(0, at(10))
    client.force_login(viewer)

    def kinds(hour: int | None) -> dict[str, Any]:
        when = "" if hour is None else "&asOf=" + at(hour).isoformat().replace("+", "%2B")
        body = client.get(f"/api/v1/column-lineage?nodeId=datasetField:pg://w:t1:c{when}").json()
        explorer = client.get(
            f"/graph/data?node=datasetField:pg://w:t1:c&level=column{when}"
        ).json()
        shown = {n["id"]: n["subject"] for n in explorer["nodes"] if n["kind"] == "field"}
        return {
            n["id"].rsplit(":", 2)[1]: (n["data"]["subjectKind"], shown[n["id"]])
            for n in body["graph"]
        }

    then = ("customer", "customer")
    assert kinds(5) == {"t0": then, "t1": then}
    assert kinds(1) == kinds(12) == kinds(None) == {"t0": (None, None), "t1": (None, None)}
