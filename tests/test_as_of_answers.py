"""As of a past instant, every answer shows what was true then: what the app showed at
that moment, and what the catalog's own history says."""

from __future__ import annotations

from urllib.parse import quote, urlencode

import pytest
import time_machine
from django.utils.dateparse import parse_datetime

from catalog import actions as catalog_actions
from catalog.models import DatasetField, SubjectKind
from ingest.events import parse_event
from ingest.normalizer import normalize
from tests.graph_builders import node_store_written
from tests.ingest_builders import PG, at, columns, dataset, run_event, run_id, schema

pytestmark = pytest.mark.django_db

JOB = "job:spark:etl.orders"
ORDERS = "shop.public.orders"
ORDERS_ID = f"dataset:{PG}:{ORDERS}"
STEWARD = catalog_actions.Actor(name="sam-steward")
PATH = "/warehouse/raw/orders"


def _latest_run(api, viewer, as_of: str | None = None) -> tuple[str, str]:
    params = {"nodeId": JOB, "depth": 1} | ({"asOf": as_of} if as_of else {})
    body = api(viewer).get(f"/api/v1/lineage?{urlencode(params)}").json()
    (node,) = [n for n in body["graph"] if n["id"] == JOB]
    run = node["data"]["latestRun"]
    return run["id"], run["state"]


def test_a_jobs_latest_run_as_of_an_instant_is_the_one_shown_then(api, viewer):
    # Two runs overlap: the first to start is the first to finish.
    reads, writes = [dataset("a")], [dataset("c")]
    events = [
        run_event("START", run_id(1), at(1, 1), inputs=reads),
        run_event("START", run_id(2), at(1, 2), inputs=reads),
        run_event("COMPLETE", run_id(1), at(1, 3), inputs=reads, outputs=writes),
        run_event("COMPLETE", run_id(2), at(1, 4), inputs=reads, outputs=writes),
    ]
    shown_then = {}
    seen_at = (at(1, 1, 30), at(1, 2, 30), at(1, 3, 30), at(1, 4, 30))
    for event, seen in zip(events, seen_at, strict=True):
        normalize([parse_event(event)])  # each arrives on time
        shown_then[seen] = _latest_run(api, viewer)
    assert shown_then[at(1, 3, 30)] == (run_id(1), "COMPLETED")
    assert {seen: _latest_run(api, viewer, seen) for seen in shown_then} == shown_then


def _load_orders(n: int, *names: str) -> None:
    """Day ``n``: a job copies raw.orders' columns ``names`` into orders, whose schema is
    those columns."""
    copied = columns({name: [("raw.orders", name)] for name in names})
    raw = dataset("raw.orders", schema=schema("id", "customer_id"))
    out = dataset(ORDERS, schema=schema(*names), columnLineage=copied)
    normalize(
        [
            parse_event(
                run_event("COMPLETE", run_id(n), at(n), job="load", inputs=[raw], outputs=[out])
            )
        ]
    )


def test_a_field_that_left_the_schema_and_came_back_was_absent_in_between(api, viewer, compliance):
    _load_orders(1, "id", "customer_id")
    _load_orders(2, "id")  # customer_id left the schema
    _load_orders(3, "id", "customer_id")  # and came back
    customer = SubjectKind.objects.create(name="customer")
    for field in DatasetField.objects.filter(name="customer_id"):
        catalog_actions.update_field(
            field, {"subject_kind": customer}, STEWARD, at=parse_datetime(at(1))
        )
    node_store_written()
    gap, after = at(2, 12), at(3, 12)
    for as_of, present in ((gap, ["id"]), (after, ["customer_id", "id"])):
        catalog = api(viewer).get(
            f"/api/v1/namespaces/{quote(PG, safe='')}/datasets/{ORDERS}", {"asOf": as_of}
        )
        assert sorted(f["name"] for f in catalog.json()["fields"]) == present
        lineage = api(viewer).get("/api/v1/lineage", {"nodeId": ORDERS_ID, "asOf": as_of})
        (node,) = [n for n in lineage.json()["graph"] if n["id"] == ORDERS_ID]
        assert sorted(f["name"] for f in node["data"]["fields"]) == present, as_of
        by_column = api(viewer).get(
            "/api/v1/column-lineage", {"nodeId": ORDERS_ID, "asOf": as_of, "depth": 1}
        )
        shown = {n["id"] for n in by_column.json()["graph"]}
        assert (f"datasetField:{PG}:{ORDERS}:customer_id" in shown) == (as_of == after)
        search = api(compliance).post(
            "/api/v1/privacy/subject-search",
            {"subjectKind": "customer", "value": "4242", "asOf": as_of},
            format="json",
        )
        holding = {d["name"] for d in search.json()["datasets"]}
        assert (ORDERS in holding) == (as_of == after), as_of
        assert "raw.orders" in holding


def test_the_migration_finds_the_gaps_of_fields_stored_before_they_were_kept():
    import importlib

    from django.apps import apps as django_apps

    from catalog.models import FieldGap

    for day, names in enumerate((("id", "customer_id"), ("id",), ("id", "customer_id")), 1):
        _load_orders(day, *names)
    kept = list(FieldGap.objects.values_list("field__name", "removed_at", "returned_at"))
    assert kept == [("customer_id", parse_datetime(at(2)), parse_datetime(at(3)))]
    FieldGap.objects.all().delete()
    migration = importlib.import_module("ingest.migrations.0012_field_gaps")

    migration.field_gaps(django_apps, None)

    assert list(FieldGap.objects.values_list("field__name", "removed_at", "returned_at")) == kept


def _owners(api, viewer, node: str, path: str, as_of: str | None) -> tuple[list, list]:
    """A dataset's owners (as of an instant) in its lineage node data and in the catalog."""
    when = {"asOf": as_of} if as_of else {}
    lineage = api(viewer).get("/api/v1/lineage", {"nodeId": node, **when}).json()
    (shown,) = [n for n in lineage["graph"] if n["id"] == node]
    catalog = api(viewer).get(path, when).json()
    return [o["name"] for o in shown["data"]["owners"]], [o["name"] for o in catalog["owners"]]


@pytest.mark.parametrize(
    ("edits", "then"),
    [
        # Each name had its own owner.
        ((("raw.orders", ("team-sales",), 3), (PATH, ("team-lake",), 5)), ["team-sales"]),
        # The path's owners already held the table's, which were edited later.
        (
            (("raw.orders", ("team-sales",), 5), (PATH, ("team-lake", "team-sales"), 3)),
            ["team-lake", "team-sales"],
        ),
    ],
)
def test_the_owners_of_two_merged_datasets_read_the_same_as_of_any_instant(
    api, viewer, django_capture_on_commit_callbacks, edits, then
):
    from django.utils import timezone

    from catalog.models import Dataset

    hive, path = "hive://metastore:9083", PATH
    for n, (name, ns) in enumerate((("raw.orders", hive), (path, "file")), 1):
        sent = dataset(name, ns, schema=schema("id"))
        normalize([parse_event(run_event("COMPLETE", run_id(n), at(n), outputs=[sent]))])
    for name, teams, day in edits:
        catalog_actions.update_dataset(
            Dataset.objects.get(name=name),
            {"owners": [catalog_actions.OwnerSpec(team) for team in teams]},
            STEWARD,
            at=parse_datetime(at(day)),
        )
    # Spark names the path with the metastore's name as a symlink: one table, merged.
    link = {"identifiers": [{"namespace": hive, "name": "raw.orders", "type": "TABLE"}]}
    sent = dataset(path, "file", symlinks=link, schema=schema("id"))
    with django_capture_on_commit_callbacks(execute=True):
        normalize([parse_event(run_event("COMPLETE", run_id(8), at(8), outputs=[sent]))])
    assert Dataset.objects.count() == 1
    node, url = f"dataset:file:{path}", f"/api/v1/namespaces/file/datasets/{quote(path, safe='')}"
    merged = timezone.now().isoformat().replace("+00:00", "Z")
    instants = (at(4), at(20), merged, None)
    answers = {when: _owners(api, viewer, node, url, when) for when in instants}
    assert all(lineage == catalog for lineage, catalog in answers.values()), answers
    assert answers[None][0] == answers[merged][0] == ["team-lake", "team-sales"]
    assert answers[at(4)][0] == then


def test_what_a_merge_kept_reads_the_same_as_of_any_instant_after_it():
    """Both names of one table declared its column, the survivor first: the merge keeps the
    survivor's declaration (and fills its empty attributes from the twin's), and an answer
    as of an instant after the merge reads what the table shows, not the twin's later edit."""
    from datetime import timedelta

    from django.utils import timezone

    from catalog.flags import field_flags, flags_as_of
    from catalog.models import Dataset, PiiCategory, RetentionPolicy
    from catalog.queries import dataset_state_as_of
    from ingest.normalizer import merge_datasets
    from privacy.queries import Identifier, search_subject
    from tests.factories import dataset as make_dataset

    customer = SubjectKind.objects.create(name="customer")
    employee = SubjectKind.objects.create(name="employee")
    policy = RetentionPolicy.objects.create(name="hr-2y", duration=timedelta(days=730))
    start = parse_datetime(at(1))
    survivor = make_dataset(namespace="pg://w", name="people", fields=("pid",), at=start)
    twin = make_dataset(namespace="pg://w", name="people_copy", fields=("pid",), at=start)
    mine, theirs = survivor.fields.get(), twin.fields.get()
    catalog_actions.update_field(
        mine,
        {"pii_category": PiiCategory.IDENTIFIER, "subject_kind": customer},
        STEWARD,
        at=parse_datetime(at(2)),
    )
    catalog_actions.update_field(
        theirs,
        {"pii_category": PiiCategory.NAME, "subject_kind": employee},
        STEWARD,
        at=parse_datetime(at(3)),
    )
    catalog_actions.update_dataset(
        survivor, {"description": "people"}, STEWARD, at=parse_datetime(at(2))
    )
    catalog_actions.update_field(mine, {"tags": ["key"]}, STEWARD, at=parse_datetime(at(2)))
    catalog_actions.update_field(theirs, {"tags": ["hr"]}, STEWARD, at=parse_datetime(at(3)))
    catalog_actions.update_dataset(
        twin,
        {"description": "a copy", "retention_policy": policy},
        STEWARD,
        at=parse_datetime(at(3)),
    )
    merge_datasets(twin.pk, survivor.pk)
    after = timezone.now()
    mine = DatasetField.objects.select_related("subject_kind").get(pk=mine.pk)
    now = field_flags([mine])[mine.pk]
    then = flags_as_of([mine.pk], after)[mine.pk]
    assert (
        (now.pii, now.subject_kind)
        == (then.pii, then.subject_kind)
        == (PiiCategory.IDENTIFIER, "customer")
    )
    found = search_subject(customer, [Identifier(0)], as_of=after)
    assert [hit.name for hit in found.datasets] == ["people"]
    state = dataset_state_as_of(Dataset.objects.get(pk=survivor.pk), after)
    assert (state.description, state.retention_policy) == ("people", "hr-2y")
    # The merged field holds both names' tags, and so it did as of any instant after.
    assert sorted(t.name for t in mine.tags.all()) == ["hr", "key"]
    assert [f.tags for f in state.fields] == [["hr", "key"]]


def test_a_fields_tags_as_of_an_instant_are_the_ones_it_had_then(api, viewer, steward):
    _load_orders(1, "id", "customer_id")
    url = f"/api/v1/namespaces/{quote(PG, safe='')}/datasets/{ORDERS}"
    with time_machine.travel(parse_datetime(at(2))):
        edit = api(steward).patch(
            f"{url}/fields/id", {"tags": ["key", "gold"], "sensitivity": "internal"}, format="json"
        )
    assert edit.status_code == 200, edit.content
    assert edit.json()["tags"] == ["gold", "key"]
    with time_machine.travel(parse_datetime(at(3))):
        api(steward).patch(f"{url}/fields/id", {"tags": ["key"]}, format="json")
    node_store_written()
    for as_of, tags, sensitivity in (
        (at(1, 12), [], None),
        (at(2, 12), ["gold", "key"], "internal"),
        (None, ["key"], "internal"),
    ):
        params = {"asOf": as_of} if as_of else {}
        catalog = api(viewer).get(url, params).json()
        (field,) = [f for f in catalog["fields"] if f["name"] == "id"]
        assert (field["tags"], field["sensitivity"]) == (tags, sensitivity), as_of
        lineage = api(viewer).get("/api/v1/lineage", {"nodeId": ORDERS_ID, **params}).json()
        (node,) = [n for n in lineage["graph"] if n["id"] == ORDERS_ID]
        (field,) = [f for f in node["data"]["fields"] if f["name"] == "id"]
        assert field["tags"] == tags, as_of
    history = api(viewer).get(f"{url}/history").json()
    assert [
        (c["field"], c["attribute"], c["old"], c["new"])
        for c in history["changes"]
        if c["attribute"] == "tags"
    ] == [("id", "tags", ["gold", "key"], ["key"]), ("id", "tags", [], ["gold", "key"])]


def test_a_description_and_owners_sent_late_read_as_of_their_time_as_if_sent_in_order(
    api, viewer, django_capture_on_commit_callbacks
):
    """A producer's documentation and ownership of days 1, 3 and 2 arrive in that order,
    then a steward describes the table: as of day 2, the description and owners are day 2's;
    the history says what arrival in time order would have."""
    from catalog.models import Dataset

    said = {1: ("Orders", "team-a"), 3: ("Orders in euros", "team-c"), 2: ("Raw orders", "team-b")}
    for day, (description, owner) in said.items():
        sent = dataset(
            ORDERS,
            documentation={"description": description},
            ownership={"owners": [{"name": owner, "type": "MAINTAINER"}]},
        )
        with django_capture_on_commit_callbacks(execute=True):
            normalize([parse_event(run_event("COMPLETE", run_id(day), at(day), outputs=[sent]))])
    orders = Dataset.objects.get(name=ORDERS)
    catalog_actions.update_dataset(orders, {"description": "Curated orders"}, STEWARD)
    url = f"/api/v1/namespaces/{quote(PG, safe='')}/datasets/{ORDERS}"

    def shown(when: str | None) -> tuple[str, list[str], str, list[str]]:
        params = {"asOf": when} if when else {}
        body = api(viewer).get(url, params).json()
        lineage = api(viewer).get("/api/v1/lineage", {"nodeId": ORDERS_ID, **params}).json()
        (node,) = [n for n in lineage["graph"] if n["id"] == ORDERS_ID]
        return (
            body["description"],
            [o["name"] for o in body["owners"]],
            node["data"]["description"],
            [o["name"] for o in node["data"]["owners"]],
        )

    for day, when, (description, owner) in (
        (1, at(1, 12), said[1]),
        (2, at(2, 12), said[2]),
        (3, at(3, 12), said[3]),
    ):
        assert shown(when) == (description, [owner], description, [owner]), day
    assert shown(None) == ("Curated orders", ["team-c"], "Curated orders", ["team-c"])
    history = [
        (r.attribute, r.at.day, r.old, r.new, r.source)
        for r in orders.changes.filter(attribute__in=["description", "owners"]).order_by("at", "id")
    ]
    team = [{"name": f"team-{t}", "type": "MAINTAINER"} for t in "abc"]
    assert history == [
        ("description", 1, "", "Orders", "lineage"),
        ("owners", 1, [], [team[0]], "lineage"),
        ("description", 2, "Orders", "Raw orders", "lineage"),
        ("owners", 2, [team[0]], [team[1]], "lineage"),
        ("description", 3, "Raw orders", "Orders in euros", "lineage"),
        ("owners", 3, [team[1]], [team[2]], "lineage"),
        ("description", history[-1][1], "Orders in euros", "Curated orders", "steward"),
    ]


def test_descriptions_sent_at_one_instant_read_the_same_in_any_arrival_order(api, viewer):
    """Two facets of the same instant and a later one: the description as of any instant is
    the same whatever order they arrive in (of one instant's, the last by event key wins)."""
    from itertools import permutations

    from django.db import transaction

    sent = [
        run_event("COMPLETE", run_id(n), when, outputs=[dataset(ORDERS, documentation=doc)])
        for n, when, doc in (
            (1, at(2), {"description": "A"}),
            (2, at(2), {"description": "B"}),
            (3, at(3), {"description": "C"}),
        )
    ]
    url = f"/api/v1/namespaces/{quote(PG, safe='')}/datasets/{ORDERS}"
    instants = (at(1, 12), at(2), at(2, 12), at(3, 12), None)
    answers = set()
    for order in permutations(sent):
        with transaction.atomic():
            normalize(
                [parse_event(run_event("COMPLETE", run_id(9), at(1), outputs=[dataset(ORDERS)]))]
            )
            for event in order:
                normalize([parse_event(event)])
            answers.add(
                tuple(
                    api(viewer).get(url, {"asOf": when} if when else {}).json()["description"]
                    for when in instants
                )
            )
            transaction.set_rollback(True)
    assert len(answers) == 1, answers
    ((before, *_),) = answers
    assert before is None and next(iter(answers))[3:] == ("C", "C")
