"""The normaliser: events into catalog and graph rows, with edge validity from event times."""

from __future__ import annotations

import gc
import itertools
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.urls import reverse

from catalog import actions as catalog_actions
from catalog.models import (
    ChangeRecord,
    Dataset,
    DatasetField,
    DatasetVersion,
    Owner,
    OwnerKind,
    PiiCategory,
    SubjectKind,
)
from graph.models import ColumnEdge, Job, Run, RunDataset, TableEdge
from graph.retention import compact_lineage
from ingest.events import parse_event
from ingest.normalizer import collector_paused, normalize
from tests.ingest_builders import (
    PG,
    at,
    columns,
    dataset,
    dataset_event,
    drop,
    fixture_events,
    run_event,
    run_id,
    schema,
)

pytestmark = pytest.mark.django_db


def ingest(*events):
    return normalize([parse_event(e) for e in events])


def t(day=1, hour=0, minute=0, second=0):
    return datetime(2026, 3, day, hour, minute, second, tzinfo=UTC)


def table_edges(job="etl.orders"):
    """{(dataset name, direction): [(from, to), …]} of a job's table edges."""
    found: dict[tuple[str, str], list[tuple[datetime, datetime | None]]] = {}
    for e in (
        TableEdge.objects.filter(job__name=job).select_related("dataset").order_by("valid_from")
    ):
        found.setdefault((e.dataset.name, e.direction), []).append((e.valid_from, e.valid_to))
    return found


def column_edges():
    found: dict[tuple[str, str], list[tuple[datetime, datetime | None]]] = {}
    for e in ColumnEdge.objects.select_related(
        "source_field__dataset", "target_field", "target_dataset"
    ).order_by("valid_from"):
        key = (
            f"{e.source_field.dataset.name}.{e.source_field.name}",
            f"{e.target_dataset.name}.{e.target_field.name if e.target_field else '*'}",
        )
        found.setdefault(key, []).append((e.valid_from, e.valid_to))
    return found


def completed(n, day, inputs, outputs, job="etl.orders"):
    return [
        run_event("START", run_id(n), at(day, 1), job=job, inputs=inputs),
        run_event("COMPLETE", run_id(n), at(day, 2), job=job, inputs=inputs, outputs=outputs),
    ]


def test_it_opens_table_edges_at_the_completion_time():
    ingest(*completed(1, 1, [dataset("shop.orders")], [dataset("dw.orders")]))
    assert table_edges() == {
        ("shop.orders", "in"): [(t(1, 2), None)],
        ("dw.orders", "out"): [(t(1, 2), None)],
    }


def test_it_closes_edges_when_job_drops_an_input():
    ingest(*completed(1, 1, [dataset("shop.orders"), dataset("shop.refunds")], [dataset("dw.o")]))
    ingest(*completed(2, 2, [dataset("shop.orders")], [dataset("dw.o")]))
    edges = table_edges()
    assert edges[("shop.refunds", "in")] == [(t(1, 2), t(2, 2))]
    assert edges[("shop.orders", "in")] == [(t(1, 2), None)]


def test_it_keeps_validity_right_when_an_old_run_arrives_after_a_newer_one():
    day2 = completed(2, 2, [dataset("shop.orders")], [dataset("dw.o")])
    day1 = completed(1, 1, [dataset("shop.orders"), dataset("shop.refunds")], [dataset("dw.o")])
    ingest(*day2)
    ingest(*day1)
    edges = table_edges()
    assert edges[("shop.refunds", "in")] == [(t(1, 2), t(2, 2))]
    assert edges[("shop.orders", "in")] == [(t(1, 2), None)]
    assert edges[("dw.o", "out")] == [(t(1, 2), None)]


def test_it_reopens_an_edge_when_an_input_comes_back():
    ingest(*completed(1, 1, [dataset("a"), dataset("b")], [dataset("c")]))
    ingest(*completed(2, 2, [dataset("a")], [dataset("c")]))
    ingest(*completed(3, 3, [dataset("a"), dataset("b")], [dataset("c")]))
    assert table_edges()[("b", "in")] == [(t(1, 2), t(2, 2)), (t(3, 2), None)]


def test_it_ignores_failed_runs_for_validity():
    ingest(*completed(1, 1, [dataset("a")], [dataset("c")]))
    ingest(
        run_event("START", run_id(2), at(2, 1), inputs=[dataset("z")]),
        run_event("FAIL", run_id(2), at(2, 2), inputs=[dataset("z")], outputs=[dataset("c")]),
    )
    assert table_edges() == {("a", "in"): [(t(1, 2), None)], ("c", "out"): [(t(1, 2), None)]}
    run = Run.objects.get(run_uuid=run_id(2))
    assert run.state == "FAILED"
    assert set(run.io.values_list("dataset__name", flat=True)) == {"z", "c"}


def test_it_unions_io_over_the_events_of_a_run():
    ingest(
        run_event("START", run_id(1), at(1, 1), inputs=[dataset("a")]),
        run_event("COMPLETE", run_id(1), at(1, 2), outputs=[dataset("c")]),
    )
    assert set(table_edges()) == {("a", "in"), ("c", "out")}
    assert RunDataset.objects.get(dataset__name="a").event_time == t(1, 1)


def test_it_builds_column_edges_and_closes_vanished_mappings():
    def out(mapping):
        return dataset("dw.o", schema=schema("id", "v"), columnLineage=columns(mapping))

    ins = [dataset("a", schema=schema("id", "x", "y"))]
    ingest(*completed(1, 1, ins, [out({"id": [("a", "id")], "v": [("a", "x")]})]))
    ingest(*completed(2, 2, ins, [out({"id": [("a", "id")], "v": [("a", "y")]})]))
    edges = column_edges()
    assert edges[("a.id", "dw.o.id")] == [(t(1, 2), None)]
    assert edges[("a.x", "dw.o.v")] == [(t(1, 2), t(2, 2))]
    assert edges[("a.y", "dw.o.v")] == [(t(2, 2), None)]


def test_it_keeps_column_edges_when_a_run_reports_no_column_lineage():
    ins = [dataset("a", schema=schema("id"))]
    ingest(*completed(1, 1, ins, [dataset("o", columnLineage=columns({"id": [("a", "id")]}))]))
    ingest(*completed(2, 2, ins, [dataset("o")]))
    assert column_edges()[("a.id", "o.id")] == [(t(1, 2), None)]


def test_it_reads_transformations_masking_and_dataset_level_dependencies():
    facet = {
        "fields": {
            "email_hash": {
                "inputFields": [
                    {
                        "namespace": PG,
                        "name": "crm.customers",
                        "field": "email",
                        "transformations": [
                            {"type": "DIRECT", "subtype": "TRANSFORMATION", "masking": True}
                        ],
                    }
                ]
            },
            "id": {
                "inputFields": [{"namespace": PG, "name": "crm.customers", "field": "id"}],
                "transformationType": "IDENTITY",
                "transformationDescription": "copied",
            },
        },
        "dataset": [
            {
                "namespace": PG,
                "name": "crm.customers",
                "field": "deleted_at",
                "transformations": [{"type": "INDIRECT", "subtype": "FILTER"}],
            }
        ],
    }
    ingest(*completed(1, 1, [], [dataset("dw.customers", columnLineage=facet)]))
    rows = {
        (e.source_field.name, e.target_field.name if e.target_field else None): e
        for e in ColumnEdge.objects.select_related("source_field", "target_field")
    }
    assert rows[("email", "email_hash")].masking is True
    assert rows[("email", "email_hash")].transformation_subtype == "TRANSFORMATION"
    assert rows[("id", "id")].transformation_subtype == "IDENTITY"
    assert rows[("id", "id")].description == "copied"
    filt = rows[("deleted_at", None)]
    assert (filt.transformation_type, filt.transformation_subtype) == ("INDIRECT", "FILTER")
    # A column read is a dataset read, even when the producer did not list the input.
    assert ("crm.customers", "in") in table_edges()


def test_it_closes_a_dropped_datasets_edges_and_marks_it():
    ingest(*completed(1, 1, [dataset("a")], [dataset("c", schema=schema("id"))]))
    ingest(drop("c", at(3)))
    assert table_edges()[("c", "out")] == [(t(1, 2), t(3))]
    c = Dataset.objects.get(name="c")
    assert c.lifecycle_state == "DROPPED"
    assert c.dropped_at == t(3)
    assert DatasetVersion.objects.filter(dataset=c, lifecycle_state="DROP").exists()
    assert ChangeRecord.objects.filter(dataset=c, attribute="lifecycle", new="DROP").exists()


def test_the_catalog_tells_a_dropped_datasets_lifecycle_at_any_instant():
    from catalog.queries import dataset_lifecycle

    ingest(drop("c", at(3)))
    ingest(*completed(1, 1, [dataset("a")], [dataset("c")]))
    ingest(*completed(2, 5, [dataset("a")], [dataset("c")]))
    c = Dataset.objects.get(name="c")
    assert dataset_lifecycle(c, t(2)) == ("Active", None)
    assert dataset_lifecycle(c, t(4)) == ("Dropped", t(3))
    assert dataset_lifecycle(c, t(6)) == ("Active", None)  # written again at 5
    assert dataset_lifecycle(c, datetime(2020, 1, 1, tzinfo=UTC)) == ("Not yet seen", None)
    assert dataset_lifecycle(c, None) == ("Active", None)  # not "since" its drop


def test_metadata_alone_about_a_dropped_dataset_does_not_bring_it_back():
    """A dataset event with no schema and no run (documentation, say) after the drop: the
    table is not there again, now or as of any instant, until a run or a schema names it."""
    from catalog.queries import dataset_lifecycle

    ingest(*completed(1, 1, [dataset("a")], [dataset("c", schema=schema("id"))]))
    # The documentation arrives before the drop it follows.
    ingest(dataset_event(at(4), dataset("c", documentation={"description": "Orders"})))
    ingest(drop("c", at(3)))
    c = Dataset.objects.get(name="c")
    assert (c.lifecycle_state, c.description) == ("DROPPED", "Orders")
    assert dataset_lifecycle(c, None) == dataset_lifecycle(c, t(5)) == ("Dropped", t(3))
    # A lifecycle event saying it was created again, with no schema: it is back from then.
    ingest(
        dataset_event(at(6), dataset("c", lifecycleStateChange={"lifecycleStateChange": "CREATE"}))
    )
    c.refresh_from_db()
    assert c.lifecycle_state == "ACTIVE"
    assert dataset_lifecycle(c, None) == dataset_lifecycle(c, t(7)) == ("Active", None)
    assert dataset_lifecycle(c, t(5)) == ("Dropped", t(3))


FAR = datetime(2100, 1, 1, tzinfo=UTC)


def test_the_lifecycle_now_is_the_lifecycle_as_of_any_later_instant():
    """Metadata before and after a drop, a dataset read only through column lineage after
    it, a dataset stored before sightings were kept: now, as of later and the stored state
    agree."""
    from catalog.queries import dataset_lifecycle

    ingest(dataset_event(at(1), dataset("m", documentation={"description": "x"})))
    ingest(drop("m", at(2)))
    ingest(dataset_event(at(3), dataset("m", documentation={"description": "y"})))
    ingest(*completed(1, 1, [dataset("a")], [dataset("c", schema=schema("id"))]))
    ingest(drop("c", at(3)))
    read = dataset("o", schema=schema("id"), columnLineage=columns({"id": [("c", "id")]}))
    ingest(run_event("COMPLETE", run_id(7), at(5), job="r", outputs=[read]))
    ingest(*completed(3, 1, [dataset("a")], [dataset("old", schema=schema("id"))]))
    ingest(drop("old", at(2)))
    old = Dataset.objects.get(name="old")
    old.lineage_facets.pop("sighted")  # as stored before sightings were kept
    Dataset.objects.filter(pk=old.pk).update(lineage_facets=old.lineage_facets)
    ingest(dataset_event(at(3), dataset("old", documentation={"description": "y"})))
    expected = {"m": "DROPPED", "c": "ACTIVE", "old": "DROPPED"}
    for name, state in expected.items():
        ds = Dataset.objects.get(name=name)
        assert ds.lifecycle_state == state, name
        assert dataset_lifecycle(ds, None) == dataset_lifecycle(ds, FAR), name


def test_twins_merged_keep_the_drop_of_the_one_table(monkeypatch):
    from catalog.queries import dataset_lifecycle
    from ingest.normalizer import canonicalise_names

    monkeypatch.setattr("ingest.events.naming.canonical", lambda namespace, name: (namespace, name))
    pg, bare = "postgres://db:5432", "postgres://db"
    for day, namespace in ((1, pg), (2, bare)):  # one table written under both spellings
        written = dataset("s.p.t", namespace, schema=schema("id"))
        ingest(run_event("COMPLETE", run_id(day), at(day), job=f"j{day}", outputs=[written]))
    ingest(drop("s.p.t", at(3), ns=pg))
    ingest(dataset_event(at(4), dataset("s.p.t", bare, documentation={"description": "doc"})))
    monkeypatch.undo()
    canonicalise_names()
    ds = Dataset.objects.get()
    assert (ds.lifecycle_state, ds.dropped_at) == ("DROPPED", t(3))
    assert dataset_lifecycle(ds, None) == dataset_lifecycle(ds, FAR) == ("Dropped", t(3))


def customers_in_c_dropped_on_day_3() -> SubjectKind:
    """Dataset c, written on day 1, its id declared to identify customers, dropped on day 3."""
    ingest(*completed(1, 1, [dataset("c", schema=schema("id"))], [dataset("out")]))
    kind = customer_id_in("c")
    ingest(drop("c", at(3)))
    return kind


def customer_id_in(name: str) -> SubjectKind:
    """Declare the id of dataset ``name`` to identify customers, on day 1 at 5."""
    kind = SubjectKind.objects.create(name="customer")
    catalog_actions.update_field(
        DatasetField.objects.get(dataset__name=name, name="id"),
        {"pii_category": PiiCategory.IDENTIFIER, "subject_kind": kind},
        catalog_actions.Actor(name="stella"),
        at=t(1, 5),
    )
    return kind


def test_a_dataset_dropped_and_written_again_is_in_answers_outside_the_gap():
    """Dropped at day 3, written again at day 5: every answer leaves it out only in
    between, as the catalog's lifecycle says (its dropped_at stays day 3)."""
    from graph import queries
    from ops.slis import Scope
    from privacy.queries import Identifier, search_subject

    kind = customers_in_c_dropped_on_day_3()
    ingest(*completed(2, 5, [dataset("c", schema=schema("id"))], [dataset("out")]))
    assert Dataset.objects.get(name="c").dropped_at == t(3)

    def holding(when: datetime | None) -> list[str]:
        return [h.name for h in search_subject(kind, [Identifier(0)], when).datasets]

    def listed(when: datetime | None) -> bool:
        return "c" in {d.name for d in queries.sources(as_of=when).items}

    assert [holding(w) for w in (t(2), t(4), t(6), None)] == [["c"], [], ["c"], ["c"]]
    assert [listed(w) for w in (t(2), t(4), t(6), None)] == [True, False, True, True]
    assert Scope().datasets().filter(name="c").exists()
    assert queries.diff(t(4), t(6)).datasets_added == ("dataset:postgres://shop-db:5432:c",)
    assert queries.diff(t(2), t(4)).datasets_removed == ("dataset:postgres://shop-db:5432:c",)


def test_answers_as_of_an_instant_show_the_lifecycle_of_then(client, viewer):
    from urllib.parse import quote

    from privacy.queries import Identifier, search_subject

    kind = customers_in_c_dropped_on_day_3()
    client.force_login(viewer)

    def shown(when: datetime | None) -> tuple[Any, ...]:
        asked = "" if when is None else "&asOf=" + quote(when.isoformat())
        node = f"dataset:{PG}:c"
        lineage = client.get(f"/api/v1/lineage?nodeId={quote(node)}{asked}").json()
        (data,) = [n["data"] for n in lineage["graph"] if n["id"] == node]
        catalog = client.get(
            f"/api/v1/namespaces/{quote(PG, safe='')}/datasets/c?{asked[1:]}"
        ).json()
        hits = search_subject(kind, [Identifier(0)], when).datasets
        return (
            data["lastLifecycleState"],
            data["deleted"],
            catalog["lastLifecycleState"],
            catalog["deleted"],
            [h.lifecycle_state for h in hits],
        )

    assert shown(t(2)) == ("ACTIVE", False, "ACTIVE", False, ["ACTIVE"])
    assert shown(t(4)) == ("DROPPED", True, "DROPPED", True, [])
    assert shown(None) == ("DROPPED", True, "DROPPED", True, [])


def test_it_applies_a_drop_that_arrives_late():
    ingest(drop("c", at(3)))
    ingest(*completed(1, 1, [dataset("a")], [dataset("c")]))
    ingest(*completed(2, 5, [dataset("a")], [dataset("c")]))
    assert table_edges()[("c", "out")] == [(t(1, 2), t(3)), (t(5, 2), None)]
    assert table_edges()[("a", "in")] == [(t(1, 2), None)]
    assert Dataset.objects.get(name="c").lifecycle_state == "ACTIVE"


def test_it_renames_a_dataset_closing_the_old_names_edges():
    ingest(*completed(1, 1, [dataset("old")], [dataset("out")]))
    renamed = dataset(
        "new",
        lifecycleStateChange={
            "lifecycleStateChange": "RENAME",
            "previousIdentifier": {"namespace": PG, "name": "old"},
        },
    )
    ingest(dataset_event(at(2), renamed))
    old = Dataset.objects.get(name="old")
    assert old.lifecycle_state == "RENAMED"
    assert old.alias_of == Dataset.objects.get(name="new")
    assert table_edges()[("old", "in")] == [(t(1, 2), t(2))]


def test_it_keeps_edges_on_overwrite_and_truncate():
    ingest(*completed(1, 1, [dataset("a")], [dataset("c")]))
    ingest(
        dataset_event(
            at(2), dataset("c", lifecycleStateChange={"lifecycleStateChange": "TRUNCATE"})
        )
    )
    assert table_edges()[("c", "out")] == [(t(1, 2), None)]
    assert ChangeRecord.objects.filter(attribute="lifecycle", new="TRUNCATE").count() == 1


def test_it_versions_schemas_at_event_time_with_nested_fields():
    nested = {
        "fields": [
            {"name": "id", "type": "long"},
            {
                "name": "address",
                "type": "struct",
                "fields": [{"name": "city", "type": "string"}, {"name": "zip", "type": "string"}],
            },
        ]
    }
    ingest(*completed(1, 1, [], [dataset("c", schema=schema("id"))]))
    ingest(*completed(2, 2, [], [dataset("c", schema=nested)]))
    ingest(*completed(3, 3, [], [dataset("c", schema=nested)]))
    versions = list(DatasetVersion.objects.filter(dataset__name="c").order_by("created_at"))
    assert [v.created_at for v in versions] == [t(1, 2), t(2, 2)]
    assert [f["name"] for f in versions[1].fields] == [
        "id",
        "address",
        "address.city",
        "address.zip",
    ]
    assert versions[1].run_uuid is not None
    fields = {f.name: f for f in DatasetField.objects.filter(dataset__name="c")}
    assert fields["address.city"].removed_at is None


def test_it_moves_a_version_back_when_an_earlier_observation_arrives():
    ingest(*completed(2, 2, [], [dataset("c", schema=schema("id", "v"))]))
    ingest(*completed(1, 1, [], [dataset("c", schema=schema("id", "v"))]))
    versions = list(DatasetVersion.objects.filter(dataset__name="c"))
    assert [v.created_at for v in versions] == [t(1, 2)]


def test_it_marks_fields_that_left_the_schema_as_removed():
    ingest(*completed(1, 1, [], [dataset("c", schema=schema("id", "legacy"))]))
    ingest(*completed(2, 2, [], [dataset("c", schema=schema("id"))]))
    legacy = DatasetField.objects.get(dataset__name="c", name="legacy")
    assert legacy.removed_at == t(2, 2)


def test_it_sets_owners_from_the_ownership_facet_only_when_it_changes(steward):
    def owned(day, *names):
        facet = {"owners": [{"name": n, "type": "MAINTAINER"} for n in names]}
        return dataset_event(at(day), dataset("c", ownership=facet))

    ingest(owned(1, "team:crm"))
    c = Dataset.objects.get(name="c")
    assert [o.owner.name for o in c.ownerships.all()] == ["team:crm"]
    catalog_actions.update_dataset(
        c,
        {"owners": [catalog_actions.OwnerSpec("team:dpo")]},
        catalog_actions.Actor(user=steward),
        at=t(1, 12),
    )
    ingest(owned(2, "team:crm"))  # same facet again: the steward's edit stands
    assert [o.owner.name for o in c.ownerships.all()] == ["team:dpo"]
    ingest(owned(3, "team:crm", "user:ana"))  # the producer declares new owners
    assert sorted(o.owner.name for o in c.ownerships.all()) == ["team:crm", "user:ana"]
    lineage = ChangeRecord.objects.filter(dataset=c, attribute="owners", source="lineage")
    assert [r.at for r in lineage.order_by("at")] == [t(1), t(3)]


def test_an_ownership_facet_guesses_a_new_owners_kind_but_keeps_a_stewards(steward):
    def owned(day, name, *names):
        facet = {"owners": [{"name": n} for n in names]}
        return dataset_event(at(day), dataset(name, ownership=facet))

    ingest(owned(1, "c", "user:ana", "crm"))
    kinds = dict(Owner.objects.values_list("name", "kind"))
    assert kinds == {"user:ana": OwnerKind.PERSON, "crm": OwnerKind.TEAM}
    c = Dataset.objects.get(name="c")
    catalog_actions.update_dataset(
        c,
        {"owners": [catalog_actions.OwnerSpec("crm", kind=OwnerKind.PERSON)]},
        catalog_actions.Actor(user=steward),
        at=t(1, 12),
    )
    ingest(owned(2, "d", "crm"))  # another dataset's facet names the same owner
    assert Owner.objects.get(name="crm").kind == OwnerKind.PERSON


def test_a_late_ownership_facet_leaves_owners_set_after_it(steward, client, viewer):
    """Owners declared at day 5 but received after a steward's edit of day 10 are the owners
    from day 5 to day 10, as if received in order, and the steward's edit stands: owners as
    of any instant are the same in every answer."""
    from urllib.parse import quote

    def owned(day, *names):
        facet = {"owners": [{"name": n, "type": "MAINTAINER"} for n in names]}
        return dataset_event(at(day), dataset("c", ownership=facet))

    ingest(owned(1, "team:a"))
    c = Dataset.objects.get(name="c")
    catalog_actions.update_dataset(
        c,
        {"owners": [catalog_actions.OwnerSpec("team:steward")]},
        catalog_actions.Actor(user=steward),
        at=t(10),
    )
    ingest(owned(5, "team:late"))
    assert [o.owner.name for o in c.ownerships.all()] == ["team:steward"]
    client.force_login(viewer)

    def owners(day: int) -> tuple[list[str], list[str]]:
        when = quote(t(day).isoformat())
        node = quote(f"dataset:{PG}:c")
        lineage = client.get(f"/api/v1/lineage?nodeId={node}&asOf={when}").json()
        catalog = client.get(
            f"/api/v1/namespaces/{quote(PG, safe='')}/datasets/c?asOf={when}"
        ).json()
        return (
            [o["name"] for o in lineage["graph"][0]["data"]["owners"]],
            [o["name"] for o in catalog["owners"]],
        )

    assert owners(3) == (["team:a"], ["team:a"])
    assert owners(7) == (["team:late"], ["team:late"])
    assert owners(12) == (["team:steward"], ["team:steward"])


def test_it_sets_the_description_until_a_steward_edits_it(steward):
    ingest(dataset_event(at(1), dataset("c", documentation={"description": "From dbt"})))
    c = Dataset.objects.get(name="c")
    assert c.description == "From dbt"
    catalog_actions.update_dataset(
        c, {"description": "Curated"}, catalog_actions.Actor(user=steward)
    )
    ingest(dataset_event(at(2), dataset("c", documentation={"description": "New from dbt"})))
    c.refresh_from_db()
    assert c.description == "Curated"


def test_a_description_from_a_catalog_file_is_not_overruled_by_lineage():
    from catalog.catalog_file import apply, parse

    ingest(dataset_event(at(1), dataset("c", schema=schema("id"))))
    apply(
        parse(
            f"datasets: [{{namespace: '{PG}', name: c, description: Curated,"
            " fields: {id: {description: The key}}}]"
        )
    )
    described = dataset(
        "c",
        documentation={"description": "From dbt"},
        schema={"fields": [{"name": "id", "type": "string", "description": "dbt's id"}]},
    )
    ingest(dataset_event(at(2), described))
    c = Dataset.objects.get(name="c")
    assert (c.description, c.fields.get(name="id").description) == ("Curated", "The key")


def test_it_ignores_documentation_older_than_what_it_has():
    ingest(dataset_event(at(2), dataset("c", documentation={"description": "newer"})))
    ingest(dataset_event(at(1), dataset("c", documentation={"description": "older"})))
    assert Dataset.objects.get(name="c").description == "newer"


def test_it_records_symlinks_as_aliases_and_data_sources():
    ds = dataset(
        "/warehouse/raw/orders",
        ns="file",
        symlinks={
            "identifiers": [{"namespace": "hive://ms:9083", "name": "raw.orders", "type": "TABLE"}]
        },
        dataSource={"name": "lake", "uri": "s3://acme-lake"},
        storage={"storageLayer": "iceberg", "fileFormat": "parquet"},
    )
    ingest(dataset_event(at(1), ds))
    canonical = Dataset.objects.get()
    assert canonical.name == "/warehouse/raw/orders"
    assert list(canonical.aliases.values_list("namespace__name", "name")) == [
        ("hive://ms:9083", "raw.orders")
    ]
    assert (canonical.source_name, canonical.platform, canonical.storage_format) == (
        "lake",
        "s3",
        "parquet",
    )
    assert canonical.location == "file:///warehouse/raw/orders"


def test_it_records_job_facets_sql_type_and_run_errors():
    ingest(
        run_event(
            "FAIL",
            run_id(1),
            at(1),
            job_facets={
                "sql": {"query": "insert into x select 1"},
                "jobType": {
                    "processingType": "BATCH",
                    "integration": "SPARK",
                    "jobType": "SQL_JOB",
                },
                "documentation": {"description": "Loads x"},
            },
            run_facets={
                "errorMessage": {"message": "boom", "programmingLanguage": "python"},
                "processing_engine": {"name": "spark", "version": "3.5.3"},
                "nominalTime": {"nominalStartTime": at(1)},
            },
        )
    )
    job = Job.objects.get(name="etl.orders")
    assert (job.sql, job.processing_type, job.integration, job.job_type, job.description) == (
        "insert into x select 1",
        "BATCH",
        "SPARK",
        "SQL_JOB",
        "Loads x",
    )
    run = Run.objects.get()
    assert (run.state, run.error_message, run.nominal_start_time) == ("FAILED", "boom", t(1))
    assert run.facets["processing_engine"]["version"] == "3.5.3"
    assert job.latest_run == run


def test_a_late_event_for_a_compacted_run_keeps_its_error_parent_and_nominal_time():
    parent = {"run": {"runId": run_id(9)}, "job": {"namespace": "airflow", "name": "dag"}}
    ingest(run_event("START", run_id(9), at(1), job="dag", job_ns="airflow"))
    facets = {
        "errorMessage": {"message": "boom", "programmingLanguage": "python"},
        "nominalTime": {"nominalStartTime": at(1)},
        "parent": parent,
    }
    ingest(run_event("FAIL", run_id(1), at(1, 5), run_facets=facets))
    compact_lineage(timedelta(days=30), now=t(1) + timedelta(days=60))
    # A late RUNNING event with a facet of its own, long after the run was compacted.
    late = {"processing_engine": {"name": "spark", "version": "3.5.3"}}
    ingest(run_event("RUNNING", run_id(1), at(1, 2), run_facets=late))

    run = Run.objects.get(run_uuid=run_id(1))
    assert (run.state, run.error_message, run.nominal_start_time) == ("FAILED", "boom", t(1))
    assert run.parent == Run.objects.get(run_uuid=run_id(9))
    assert run.facets["processing_engine"]["version"] == "3.5.3"


def test_it_links_parent_runs_and_jobs_whichever_arrives_first():
    parent = {"run": {"runId": run_id(9)}, "job": {"namespace": "airflow", "name": "dag"}}
    ingest(run_event("START", run_id(1), at(1, 1), job="dag.task", run_facets={"parent": parent}))
    ingest(run_event("START", run_id(9), at(1), job="dag", job_ns="airflow"))
    child = Run.objects.get(run_uuid=run_id(1))
    assert child.parent == Run.objects.get(run_uuid=run_id(9))
    assert child.job.parent == Job.objects.get(name="dag")


def test_it_settles_run_state_whatever_the_order():
    events = [
        run_event("START", run_id(1), at(1, 1)),
        run_event("RUNNING", run_id(1), at(1, 3)),
        run_event("COMPLETE", run_id(1), at(1, 2)),
    ]
    ingest(events[2])
    ingest(events[1])
    ingest(events[0])
    run = Run.objects.get()
    assert (run.state, run.started_at, run.ended_at) == ("COMPLETED", t(1, 1), t(1, 2))


def test_it_treats_a_job_event_as_a_declaration_of_io():
    job_event = {
        "eventTime": at(1),
        "producer": "x",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/JobEvent",
        "job": {"namespace": "views", "name": "v_active", "facets": {"sql": {"query": "select 1"}}},
        "inputs": [dataset("a")],
        "outputs": [dataset("v")],
    }
    ingest(job_event)
    assert set(table_edges("v_active")) == {("a", "in"), ("v", "out")}
    assert Job.objects.get(name="v_active").sql == "select 1"


def test_it_is_idempotent():
    events = fixture_events("airflow_shop_daily.json")
    ingest(*events)
    counts = (TableEdge.objects.count(), ColumnEdge.objects.count(), Run.objects.count())
    versions = DatasetVersion.objects.count()
    ingest(*events)
    assert (TableEdge.objects.count(), ColumnEdge.objects.count(), Run.objects.count()) == counts
    assert DatasetVersion.objects.count() == versions
    assert ChangeRecord.objects.filter(source="lineage", attribute="owners").count() == 1


@pytest.mark.parametrize(
    "name",
    [
        "spark_orders_etl.ndjson",
        "airflow_shop_daily.json",
        "dbt_jaffle_shop.ndjson",
        "dataset_and_job_events.ndjson",
    ],
)
def test_it_normalises_real_producer_shapes(name):
    result = ingest(*fixture_events(name))
    assert result.jobs
    assert Dataset.objects.exists()


def test_it_normalises_the_spark_fixture_with_column_lineage():
    ingest(*fixture_events("spark_orders_etl.ndjson"))
    edges = column_edges()
    assert (
        "/warehouse/raw/orders.shipping.country",
        "/warehouse/staging/orders_clean.country",
    ) in edges
    assert ("/warehouse/raw/orders.status", "/warehouse/staging/orders_clean.*") in edges
    raw = Dataset.objects.get(name="/warehouse/raw/orders")
    assert list(raw.aliases.values_list("name", flat=True)) == ["raw.orders"]
    assert not Dataset.objects.filter(name="raw.orders").exists()
    run = Run.objects.get(run_uuid="0193e2a1-6a10-7c55-8f21-3b4c5d6e7f80")
    assert run.state == "COMPLETED"
    assert run.parent_run_uuid is not None


def test_overlapping_collector_pauses_resume_the_collector_once_all_are_over():
    inside = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with collector_paused():
            inside.set()
            release.wait(5)

    assert gc.isenabled()
    other = threading.Thread(target=hold)
    other.start()
    assert inside.wait(5)
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other thread's pause is still on
    release.set()
    other.join()
    assert gc.isenabled()


def test_root_cause_after_the_last_event_shows_the_job_s_latest_run_as_now(client, viewer):
    """Run 2 started after run 1 and completed first; run 1 failed last, so it is the
    job's latest run, now and as of any instant after its failure."""
    from urllib.parse import quote

    ins, outs = [dataset("a")], [dataset("c")]
    ingest(
        run_event("START", run_id(1), at(1, 1), inputs=ins),
        run_event("START", run_id(2), at(1, 2), inputs=ins),
        run_event("COMPLETE", run_id(2), at(1, 3), inputs=ins, outputs=outs),
        run_event("FAIL", run_id(1), at(1, 4), inputs=ins, outputs=outs),
    )
    client.force_login(viewer)

    def latest(when: datetime | None) -> tuple[str, str]:
        asked = "" if when is None else "&asOf=" + quote(when.isoformat())
        body = client.get(
            f"/api/v1/lineage/root-cause?nodeId={quote(f'dataset:{PG}:c')}{asked}"
        ).json()
        (job,) = body["jobs"]
        return job["latestRun"]["id"], job["latestRun"]["state"]

    assert latest(t(5)) == latest(None) == (run_id(1), "FAILED")
    assert latest(t(1, 3))[1] == "COMPLETED"  # run 2, the last started, had completed
    # The dataset page lists its producer with the same run.
    from graph.page_data import lineage_summary

    (producer,) = lineage_summary(Dataset.objects.get(name="c"), t(5)).producers
    assert producer.latest_run is not None and producer.latest_run.state == "FAILED"


def rename_old_to_new(day: int) -> None:
    """A lifecycle event: the table "old" (id, email) is now called "new"."""
    renamed = dataset(
        "new",
        schema=schema("id", "email"),
        lifecycleStateChange={
            "lifecycleStateChange": "RENAME",
            "previousIdentifier": {"namespace": PG, "name": "old"},
        },
    )
    ingest(dataset_event(at(day), renamed))


@pytest.mark.parametrize("newest_first", [False, True])
def test_a_name_renamed_twice_points_at_its_newest_new_name_whatever_the_order(newest_first):
    """ "old" became "new" on day 3; created again, it became "newer" on day 5 (then was
    dropped on day 6). Where the name went is the newest rename's, in either order."""

    def renamed(day: int, name: str) -> dict[str, Any]:
        change = {
            "lifecycleStateChange": "RENAME",
            "previousIdentifier": {"namespace": PG, "name": "old"},
        }
        return dataset_event(at(day), dataset(name, lifecycleStateChange=change))

    dropped = dataset_event(
        at(6), dataset("old", lifecycleStateChange={"lifecycleStateChange": "DROP"})
    )
    ingest(*completed(1, 1, [dataset("src")], [dataset("old", schema=schema("id"))]))
    events = [renamed(3, "new"), renamed(5, "newer"), dropped]
    for event in reversed(events) if newest_first else events:
        ingest(event)
    old = Dataset.objects.select_related("alias_of").get(name="old")
    assert old.alias_of is not None and old.alias_of.name == "newer"


def test_a_renamed_table_keeps_its_declared_columns_and_its_copies_are_flagged():
    """old.id identifies customers; old is renamed new on day 3; a job copies new.id on
    day 5. The search finds the table under the name it had at each instant, and the copy."""
    from privacy.queries import Identifier, search_subject

    ingest(*completed(1, 1, [dataset("src")], [dataset("old", schema=schema("id", "email"))]))
    kind = customer_id_in("old")
    rename_old_to_new(day=3)
    copied = dataset("copy", schema=schema("id"), columnLineage=columns({"id": [("new", "id")]}))
    ingest(*completed(2, 5, [dataset("new")], [copied], job="etl.copy"))

    def holding(when: datetime | None) -> dict[str, str]:
        found = search_subject(kind, [Identifier(0)], when)
        return {h.name: h.relation for h in found.all_hits}

    assert holding(t(2)) == {"old": "direct"}
    assert holding(t(4)) == {"new": "direct"}
    assert holding(t(6)) == holding(None) == {"new": "direct", "copy": "derived"}
    new_id = DatasetField.objects.get(dataset__name="new", name="id")
    assert (new_id.pii_category, new_id.flag_source) == ("identifier", "declared")
    # A steward who clears it later is not overruled by the next batch naming the table.
    catalog_actions.update_field(
        new_id, {"pii_category": "", "subject_kind": None}, catalog_actions.Actor(name="stella")
    )
    ingest(*completed(3, 7, [dataset("new")], [copied], job="etl.copy"))
    assert DatasetField.objects.get(pk=new_id.pk).pii_category == ""


def test_a_renamed_table_keeps_its_owners_retention_and_description():
    """What stewards said of the table under its old name holds under the new one, from the
    rename on: the subject search and the erasure plan name its owners and its policy."""
    from datetime import timedelta

    from catalog.models import RetentionAction, RetentionPolicy
    from privacy import erasure
    from privacy.queries import Identifier, dataset_links, search_subject

    ingest(*completed(1, 1, [dataset("src")], [dataset("old", schema=schema("id", "email"))]))
    kind = customer_id_in("old")
    policy = RetentionPolicy.objects.create(
        name="sales-10y", duration=timedelta(days=3650), action=RetentionAction.ANONYMISE
    )
    steward = catalog_actions.Actor(name="stella")
    changes = {
        "retention_policy": policy,
        "owners": [catalog_actions.OwnerSpec("team-sales")],
        "description": "orders as sold",
    }
    catalog_actions.update_dataset(Dataset.objects.get(name="old"), changes, steward, at=t(2))
    column = {"description": "the buyer's address", "sensitivity": "confidential", "tags": ["a"]}
    email = DatasetField.objects.get(dataset__name="old", name="email")
    catalog_actions.update_field(email, column, steward, at=t(2))
    rename_old_to_new(day=3)
    found = search_subject(kind, [Identifier(0)])
    (hit,) = found.datasets
    assert (hit.name, hit.retention.name, [o["name"] for o in hit.owners]) == (
        "new",
        "sales-10y",
        ["team-sales"],
    )
    (step,) = erasure.plan_steps(found, dataset_links(found))
    assert step["operation"] == "anonymise"
    new = Dataset.objects.get(name="new")
    assert new.description == "orders as sold"
    # Its columns' descriptions, sensitivity and tags too, from the rename on.
    from catalog.queries import dataset_state_as_of

    carried = DatasetField.objects.get(dataset=new, name="email")
    assert (carried.description, carried.sensitivity, [t.name for t in carried.tags.all()]) == (
        "the buyer's address",
        "confidential",
        ["a"],
    )
    (then,) = [f for f in dataset_state_as_of(new, t(3)).fields if f.name == "email"]
    assert (then.description, then.sensitivity, then.tags) == (
        "the buyer's address",
        "confidential",
        ["a"],
    )
    # From the rename on: as of the day before, the new name had none of it.
    before = search_subject(kind, [Identifier(0)], t(2))
    assert [h.name for h in before.datasets] == ["old"]
    # A steward who clears the owners later is not overruled by the next batch.
    catalog_actions.update_dataset(new, {"owners": []}, steward)
    ingest(*completed(2, 5, [dataset("new")], [dataset("copy")], job="etl.copy"))
    assert not Dataset.objects.get(name="new").ownerships.exists()


def a_person_describes_old() -> catalog_actions.Actor:
    """ "old" (id, email) is written on day 1; on day 2 stella describes it and its email."""
    ingest(*completed(1, 1, [dataset("src")], [dataset("old", schema=schema("id", "email"))]))
    stella = catalog_actions.Actor(name="stella")
    catalog_actions.update_dataset(
        Dataset.objects.get(name="old"), {"description": "orders as sold"}, stella, at=t(2)
    )
    email = DatasetField.objects.get(dataset__name="old", name="email")
    catalog_actions.update_field(email, {"description": "the buyer's address"}, stella, at=t(2))
    return stella


@pytest.mark.parametrize(
    ("rename_first", "documented"),
    [(True, "loaded by etl"), (False, "loaded by etl"), (False, "orders as sold")],
)
def test_what_a_person_wrote_of_a_renamed_table_stays_theirs_under_the_new_name(
    rename_first, documented
):
    """A description a person wrote under the old name is carried as theirs: lineage's own
    descriptions of the new name (documentation, a schema's column descriptions) give way to
    it, as they would to one written under the new name, whichever event came first."""
    from catalog.queries import dataset_state_as_of

    stella = a_person_describes_old()
    documented = dataset(
        "new",
        schema={"fields": [{"name": "email", "type": "string", "description": "raw"}]},
        documentation={"description": documented},
    )
    load = completed(2, 5, [dataset("src")], [documented], job="etl.load")
    if rename_first:
        rename_old_to_new(day=3)
        ingest(*load)
    else:
        ingest(*load)
        rename_old_to_new(day=3)

    new = Dataset.objects.get(name="new")
    assert new.description == "orders as sold"
    assert new.fields.get(name="email").description == "the buyer's address"
    said = new.changes.filter(attribute="description").order_by("field_name")
    assert [(c.field_name, c.at, c.actor_name, c.source, c.old, c.new) for c in said] == [
        ("", t(3), "stella", "steward", "", "orders as sold"),
        ("email", t(3), "stella", "steward", "", "the buyer's address"),
    ]
    then = dataset_state_as_of(new, t(6))
    assert then.description == "orders as sold"
    assert [f.description for f in then.fields if f.name == "email"] == ["the buyer's address"]
    # A person who writes another under the new name has the last word.
    catalog_actions.update_dataset(new, {"description": "orders"}, stella)
    ingest(*completed(3, 7, [dataset("src")], [documented], job="etl.load"))
    assert Dataset.objects.get(name="new").description == "orders"


def test_a_persons_description_lineage_had_sent_before_the_rename_is_still_theirs(
    client, admin_user
):
    """Lineage documented the new name with the very text a person wrote under the old one,
    before the rename: from the rename on the text is the person's, the history says so, and
    a later documentation facet does not overrule it. (A schema's column descriptions keep
    no history, so the column's record starts from nothing.)"""
    a_person_describes_old()

    def load(n, day, text, column):
        documented = dataset(
            "new",
            schema={"fields": [{"name": "email", "type": "string", "description": column}]},
            documentation={"description": text},
        )
        ingest(*completed(n, day, [dataset("src")], [documented], job="etl.load"))

    load(2, 2, "orders as sold", "the buyer's address")
    rename_old_to_new(day=3)
    load(3, 5, "loaded by etl", "raw")

    new = Dataset.objects.get(name="new")
    assert new.description == "orders as sold"
    assert new.fields.get(name="email").description == "the buyer's address"
    said = new.changes.filter(attribute="description", source="steward").order_by("field_name")
    assert [(c.field_name, c.at, c.actor_name, c.old, c.new) for c in said] == [
        ("", t(3), "stella", "orders as sold", "orders as sold"),
        ("email", t(3), "stella", "", "the buyer's address"),
    ]
    # The history page says the text stayed the same and became the person's.
    client.force_login(admin_user)
    page = client.get(reverse("dataset-detail"), {"namespace": new.namespace.name, "name": "new"})
    assert "the same, from then on theirs" in page.content.decode()


@pytest.mark.parametrize("batches", [[[0, 1, 2]], [[0], [1], [2]], [[2], [1], [0]], [[1], [2, 0]]])
def test_a_columns_description_is_the_newest_one_given_however_events_are_batched(batches):
    """Day 1 describes x "raw id", day 2 gives it no description (OpenLineage's is optional),
    day 3 "customer id" for y only: x keeps "raw id", y has "customer id"."""

    def described(day: int, **descriptions: str) -> dict[str, Any]:
        fields = [
            {"name": name, "type": "int", "description": descriptions.get(name, "")}
            for name in ("x", "y")
        ]
        return dataset_event(at(day), dataset("a", schema={"fields": fields}))

    events = [described(1, x="raw id"), described(2), described(3, y="customer id")]
    for batch in batches:
        ingest(*(events[n] for n in batch))
    shown = dict(DatasetField.objects.filter(dataset__name="a").values_list("name", "description"))
    assert shown == {"x": "raw id", "y": "customer id"}


# shop.orders's symlink: its name in the Hive metastore.
SYMLINK = {"identifiers": [{"namespace": "hive://ms:9083", "name": "raw.orders", "type": "TABLE"}]}


@pytest.mark.parametrize("twin_first", [False, True])
@pytest.mark.parametrize("newer", ["new text", ""])
def test_twins_merged_show_the_newest_documentation_whichever_name_came_first(
    twin_first, newer, django_capture_on_commit_callbacks
):
    """shop.orders (documented on day 1) names raw.orders as its symlink; raw.orders was
    documented on day 2 (maybe as nothing). Sent first, raw.orders is a dataset of its own
    until the merge: the table then shows day 2's description either way."""
    main = dataset_event(
        at(1), dataset("shop.orders", documentation={"description": "old text"}, symlinks=SYMLINK)
    )
    twin = dataset_event(
        at(2), dataset("raw.orders", ns="hive://ms:9083", documentation={"description": newer})
    )
    for event in (twin, main) if twin_first else (main, twin):
        with django_capture_on_commit_callbacks(execute=True):
            ingest(event)
    (table,) = Dataset.objects.all()
    assert (table.name, table.description) == ("shop.orders", newer)


def test_a_twins_rename_does_not_stand_for_the_table_it_merged_into(
    django_capture_on_commit_callbacks,
):
    """raw.orders was renamed raw.orders_v1 on day 5; shop.orders, whose symlink it is
    (sent on day 1), was renamed shop.orders_v2 on day 3, sent after the merge: shop.orders
    went to shop.orders_v2, which the twin's later rename does not hide."""

    def renamed(day: int, old: tuple[str, str], name: str) -> dict[str, Any]:
        change = {
            "lifecycleStateChange": "RENAME",
            "previousIdentifier": {"namespace": old[0], "name": old[1]},
        }
        return dataset_event(at(day), dataset(name, ns=old[0], lifecycleStateChange=change))

    hive = "hive://ms:9083"
    events = [
        dataset_event(at(2), dataset("raw.orders", ns=hive)),
        renamed(5, (hive, "raw.orders"), "raw.orders_v1"),
        dataset_event(at(1), dataset("shop.orders", symlinks=SYMLINK)),
        renamed(3, (PG, "shop.orders"), "shop.orders_v2"),
    ]
    for event in events:
        with django_capture_on_commit_callbacks(execute=True):
            ingest(event)
    table = Dataset.objects.select_related("alias_of").get(name="shop.orders")
    assert table.alias_of is not None and table.alias_of.name == "shop.orders_v2"


@pytest.mark.parametrize("described", ["shop.orders", "raw.orders"])
def test_twins_merged_keep_a_persons_description_over_lineages(
    described, django_capture_on_commit_callbacks
):
    """A steward described shop.orders (or raw.orders), and lineage documented the other
    name last; then raw.orders turns out to be shop.orders's symlink: the merged table
    keeps what the person wrote."""
    hive = "hive://ms:9083"
    names = {"shop.orders": PG, "raw.orders": hive}
    for day, name in enumerate(names, start=1):
        ingest(dataset_event(at(day), dataset(name, ns=names[name])))
    stella = catalog_actions.Actor(name="stella")
    catalog_actions.update_dataset(
        Dataset.objects.get(name=described), {"description": "orders as sold"}, stella
    )
    (other,) = set(names) - {described}
    documented = dataset(other, ns=names[other], documentation={"description": "loaded by etl"})
    ingest(dataset_event(at(3), documented))
    with django_capture_on_commit_callbacks(execute=True):
        ingest(dataset_event(at(4), dataset("shop.orders", symlinks=SYMLINK)))
    (table,) = Dataset.objects.all()
    assert (table.name, table.description) == ("shop.orders", "orders as sold")


@pytest.mark.parametrize("late", [False, True])
def test_a_rename_carries_nothing_the_new_name_had_before_it_whatever_arrives_first(late):
    """ "old" is documented and owned at day 1, "new" at day 2, and old is renamed new at day
    3: new had a description and owners before the rename, so it keeps its own, even when
    day 2's event arrives after the rename's."""
    from catalog.queries import dataset_state_as_of

    def documented(name: str, n: int, day: int, text: str, owner: str) -> dict[str, Any]:
        facets = {
            "documentation": {"description": text},
            "ownership": {"owners": [{"name": owner, "type": "MAINTAINER"}]},
        }
        return run_event("COMPLETE", run_id(n), at(day), outputs=[dataset(name, **facets)])

    ingest(documented("old", 1, 1, "D", "team-o"))
    if not late:
        ingest(documented("new", 2, 2, "X", "team-x"))
    rename_old_to_new(day=3)
    if late:
        ingest(documented("new", 2, 2, "X", "team-x"))
    new = Dataset.objects.get(name="new")
    assert (new.description, catalog_actions.owners_value(new)) == (
        "X",
        [{"name": "team-x", "type": "MAINTAINER"}],
    )
    for day in (2, 4):
        then = dataset_state_as_of(new, t(day) + timedelta(hours=1))
        assert (then.description, [o["name"] for o in then.owners]) == ("X", ["team-x"]), day


@pytest.mark.parametrize("late", [False, True])
def test_a_rename_that_documents_its_new_name_keeps_its_own_description_whatever_arrives_first(
    late,
):
    """ "old" is documented at day 1, "new" at day 2, and the day-3 event that renames old
    new documents it too: day 3's description is the rename's own, not one carried from the
    old name, and it stays when day 2's event arrives after the rename's."""
    from catalog.queries import dataset_state_as_of

    def documented(name: str, n: int, day: int, text: str) -> dict[str, Any]:
        facets = {"documentation": {"description": text}}
        return run_event("COMPLETE", run_id(n), at(day), outputs=[dataset(name, **facets)])

    ingest(documented("old", 1, 1, "D"))
    if not late:
        ingest(documented("new", 2, 2, "X"))
    renamed = dataset(
        "new",
        documentation={"description": "R"},
        lifecycleStateChange={
            "lifecycleStateChange": "RENAME",
            "previousIdentifier": {"namespace": PG, "name": "old"},
        },
    )
    ingest(dataset_event(at(3), renamed))
    if late:
        ingest(documented("new", 2, 2, "X"))
    new = Dataset.objects.get(name="new")
    assert new.description == "R"
    for day, text in ((2, "X"), (4, "R")):
        assert dataset_state_as_of(new, t(day) + timedelta(hours=1)).description == text, day


RENAME_STORY = {
    "old documented day 1": ("old", 1, "D1", "team-1"),
    "old documented day 2": ("old", 2, "D2", "team-2"),
    "renamed day 3": None,
    "new documented day 5": ("new", 5, "N5", "team-5"),
}


@pytest.mark.parametrize(
    "order", list(itertools.permutations(RENAME_STORY)), ids=lambda order: " / ".join(order)
)
def test_a_rename_carries_what_the_old_name_said_then_in_any_arrival_order(order):
    """ "old" is documented and owned on days 1 and 2, renamed "new" on day 3, and "new" is
    documented on day 5: in any arrival order, "new" shows day 2's description and owners
    from the rename to day 5 and its own after, as in time order. (Before, a rename that
    came before the old name's events carried nothing, or day 1's.)"""
    from catalog.queries import dataset_state_as_of

    for step in order:
        said = RENAME_STORY[step]
        if said is None:
            rename_old_to_new(day=3)
            continue
        name, day, text, owner = said
        facets = {
            "documentation": {"description": text},
            "ownership": {"owners": [{"name": owner, "type": "MAINTAINER"}]},
        }
        ingest(run_event("COMPLETE", run_id(day), at(day), outputs=[dataset(name, **facets)]))
    new = Dataset.objects.get(name="new")
    shown = {"today": (new.description, [o["name"] for o in catalog_actions.owners_value(new)])}
    for day in (2, 4, 6):
        then = dataset_state_as_of(new, t(day))
        shown[day] = (then.description, [o["name"] for o in then.owners])
    assert shown == {
        "today": ("N5", ["team-5"]),
        2: ("", []),
        4: ("D2", ["team-2"]),
        6: ("N5", ["team-5"]),
    }


# -- a declaration follows a table through its renames, in any arrival order -------------------


def renamed_to(new: str, old: str, day: int) -> dict[str, Any]:
    """A lifecycle event: the table ``old`` (id) is now called ``new``."""
    change = {
        "lifecycleStateChange": "RENAME",
        "previousIdentifier": {"namespace": PG, "name": old},
    }
    return dataset_event(at(day), dataset(new, schema=schema("id"), lifecycleStateChange=change))


def arrive(story: list[dict[str, Any]], arrival: str) -> None:
    """The events of ``story`` one by one in time order, in one batch, or newest first."""
    if arrival == "one batch":
        ingest(*story)
        return
    for event in story if arrival == "one by one" else reversed(story):
        ingest(event)


def holding_customers(when: datetime | None = None) -> dict[str, str]:
    from privacy.queries import Identifier, search_subject

    kind = SubjectKind.objects.get(name="customer")
    return {h.name: h.relation for h in search_subject(kind, [Identifier(0)], when).all_hits}


def declared(name: str) -> tuple[str, str]:
    found = DatasetField.objects.get(dataset__name=name, name="id")
    return (found.pii_category, found.flag_source)


@pytest.mark.parametrize("arrival", ["one by one", "one batch", "newest first"])
def test_a_rename_carries_a_declaration_whatever_became_of_the_old_name_after(arrival):
    """old.id identifies customers from day 1; old became new on day 3; a new table "old"
    was made on day 4 and dropped on day 6. Before, only one by one in time order carried
    the declaration: the old name's drop hid the rename."""
    ingest(*completed(1, 1, [dataset("src")], [dataset("old", schema=schema("id"))]))
    customer_id_in("old")
    made = completed(2, 4, [dataset("src")], [dataset("old", schema=schema("id"))])
    dropped = dataset_event(
        at(6), dataset("old", lifecycleStateChange={"lifecycleStateChange": "DROP"})
    )
    story = [renamed_to("new", "old", 3), *made, dropped]
    arrive(story, arrival)
    assert declared("new") == ("identifier", "declared")
    assert holding_customers() == {"new": "direct"}
    assert holding_customers(t(2)) == {"old": "direct"}


@pytest.mark.parametrize("newest_first", [False, True])
def test_a_name_renamed_twice_carries_its_declaration_to_both_new_names(newest_first):
    """old.id is declared on day 1 at 5: what was "old" on day 2 became new (day 3), and
    the name, made again on day 4, became newer (day 5). Before, with the newest rename
    first, new lost the declaration."""
    ingest(*completed(1, 1, [dataset("src")], [dataset("old", schema=schema("id"))]))
    customer_id_in("old")
    batches = [
        [renamed_to("new", "old", 3)],
        completed(2, 4, [dataset("src")], [dataset("old", schema=schema("id"))]),
        [renamed_to("newer", "old", 5)],
    ]
    for batch in reversed(batches) if newest_first else batches:
        ingest(*batch)
    assert holding_customers() == {"new": "direct", "newer": "direct"}


@pytest.mark.parametrize("arrival", ["one by one", "one batch", "newest first"])
def test_a_declaration_follows_a_chain_of_renames_in_any_arrival_order(arrival):
    """a.id is declared on day 1 at 5; a became b on day 3 and b became c on day 5. Before,
    only one rename at a time in time order got it to c: b's column had left with its own
    rename, so a's carry found none to carry to."""
    ingest(*completed(1, 1, [dataset("src")], [dataset("a", schema=schema("id"))]))
    customer_id_in("a")
    story = [renamed_to("b", "a", 3), renamed_to("c", "b", 5)]
    arrive(story, arrival)
    assert declared("c") == ("identifier", "declared")
    assert holding_customers() == {"c": "direct"}
    assert holding_customers(t(4)) == {"b": "direct"}
    assert holding_customers(t(2)) == {"a": "direct"}


@pytest.mark.parametrize("rename_first", [True, False])
def test_a_declaration_made_after_the_rename_is_carried_from_when_it_was_made(rename_first):
    """A steward declares old.id today; the rename is of day 3. Whichever came first, new.id
    is declared now, and was not on day 4: nobody had declared anything then. Before, a
    rename that came first carried nothing until new's next event, and one that came later
    dated the declaration back to day 3."""
    ingest(*completed(1, 1, [dataset("src")], [dataset("old", schema=schema("id"))]))
    kind = SubjectKind.objects.create(name="customer")
    old_id = DatasetField.objects.get(dataset__name="old", name="id")
    steps = [
        lambda: ingest(renamed_to("new", "old", 3)),
        lambda: catalog_actions.update_field(
            old_id,
            {"pii_category": PiiCategory.IDENTIFIER, "subject_kind": kind},
            catalog_actions.Actor(name="stella"),
        ),
    ]
    for step in steps if rename_first else reversed(steps):
        step()
    assert declared("new") == ("identifier", "declared")
    assert holding_customers() == {"new": "direct"}
    assert holding_customers(t(4)) == {}


def test_a_declaration_does_not_flow_back_into_what_the_name_was_before():
    """b became c on day 3; a (id declared) became b on day 5; b is written on day 6. c is
    another table: a's declaration reaches b, never c."""
    ingest(*completed(1, 1, [dataset("src")], [dataset("a", schema=schema("id"))]))
    ingest(*completed(2, 1, [dataset("src")], [dataset("b", schema=schema("id"))], job="etl.b"))
    customer_id_in("a")
    ingest(renamed_to("c", "b", 3))
    ingest(renamed_to("b", "a", 5))
    ingest(*completed(3, 6, [dataset("src")], [dataset("b", schema=schema("id"))], job="etl.b"))
    assert declared("c") == ("", "declared")
    assert holding_customers() == {"b": "direct"}


@pytest.mark.parametrize("rename_last", [False, True])
def test_what_is_declared_of_a_name_made_again_stays_with_that_table(rename_last):
    """old.id identifies customers (day 1); old became new on day 3; "old" was made again on
    day 4 and its id declared an employee's on day 4 at 5, and again today. new.id keeps
    the customer declaration in either arrival order; the employee's never reach it."""
    ingest(*completed(1, 1, [dataset("src")], [dataset("old", schema=schema("id"))]))
    customer_id_in("old")
    employee = SubjectKind.objects.create(name="employee")

    def made_again() -> None:
        ingest(*completed(2, 4, [dataset("src")], [dataset("old", schema=schema("id"))]))
        catalog_actions.update_field(
            DatasetField.objects.get(dataset__name="old", name="id"),
            {"pii_category": PiiCategory.IDENTIFIER, "subject_kind": employee},
            catalog_actions.Actor(name="stella"),
            at=t(4, 5),
        )

    steps = [lambda: ingest(renamed_to("new", "old", 3)), made_again]
    for step in reversed(steps) if rename_last else steps:
        step()
    catalog_actions.update_field(
        DatasetField.objects.get(dataset__name="old", name="id"),
        {"pii_category": PiiCategory.EMAIL, "subject_kind": None},
        catalog_actions.Actor(name="stella"),
    )
    new_id = DatasetField.objects.select_related("subject_kind").get(dataset__name="new", name="id")
    assert (new_id.pii_category, new_id.subject_kind.name) == ("identifier", "customer")


@pytest.mark.parametrize("made_again_first", [False, True])
def test_a_column_the_new_name_gains_later_takes_the_declaration_in_either_order(made_again_first):
    """old.id identifies customers (day 1); old became new on day 3, new holding only x;
    "old" was made again on day 4; new gained id on day 5. Before, new.id took the
    declaration only if day 5 came before day 4: a name made again hid its rename."""
    ingest(*completed(1, 1, [dataset("src")], [dataset("old", schema=schema("id"))]))
    customer_id_in("old")
    change = {
        "lifecycleStateChange": "RENAME",
        "previousIdentifier": {"namespace": PG, "name": "old"},
    }
    ingest(dataset_event(at(3), dataset("new", schema=schema("x"), lifecycleStateChange=change)))
    steps = [
        lambda: ingest(*completed(2, 4, [dataset("src")], [dataset("old", schema=schema("id"))])),
        lambda: ingest(
            *completed(3, 5, [dataset("src")], [dataset("new", schema=schema("x", "id"))], "etl.n")
        ),
    ]
    for step in steps if made_again_first else reversed(steps):
        step()
    assert declared("new") == ("identifier", "declared")
