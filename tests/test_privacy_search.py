"""Subject search over a shop with known truth: relations, evidence, identifiers and as-of."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import time_machine

from catalog.models import SubjectKind
from privacy.queries import Identifier, dataset_links, search_subject
from tests.privacy_builders import (
    CLEAN,
    CRM_DUMP,
    CUSTOMERS,
    EXPORT,
    FEATURES,
    LTV,
    NOW,
    ORDERS,
    PAYROLL,
    REVENUE,
    SEGMENTS,
    build_shop,
    relations,
)

URL = "/api/v1/privacy/subject-search"

NOW_TRUTH = {
    CUSTOMERS: "direct",
    ORDERS: "direct",
    CLEAN: "derived",
    SEGMENTS: "derived",
    CRM_DUMP: "derived",
    REVENUE: "aggregate",
    FEATURES: "aggregate",
}
AS_OF_TRUTH = {
    "2023-06-01": {},
    "2024-02-01": {
        CUSTOMERS: "direct",
        CLEAN: "derived",
        EXPORT: "derived",
        REVENUE: "aggregate",
        FEATURES: "aggregate",
    },
    "2024-04-01": {
        CUSTOMERS: "direct",
        ORDERS: "direct",
        CLEAN: "derived",
        EXPORT: "derived",
        LTV: "derived",
        REVENUE: "aggregate",
        FEATURES: "aggregate",
    },
    "2024-07-01": {
        CUSTOMERS: "direct",
        ORDERS: "direct",
        CLEAN: "derived",
        EXPORT: "derived",
        REVENUE: "aggregate",
        FEATURES: "aggregate",
    },
    "2024-09-15": {
        CUSTOMERS: "direct",
        ORDERS: "direct",
        CLEAN: "derived",
        REVENUE: "aggregate",
        FEATURES: "aggregate",
    },
    "2024-10-02": NOW_TRUTH,
}


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def shop(db):
    with time_machine.travel(NOW, tick=False):
        yield build_shop()


@pytest.fixture
def officer(api, compliance):
    return api(compliance)


def _search(client, **body):
    response = client.post(URL, {"subjectKind": "customer", **body}, format="json")
    assert response.status_code == 200, response.json()
    return response.json()


def _by_name(body):
    return {d["name"]: d for d in [*body["datasets"], *body["aggregates"]]}


def test_it_finds_every_relation_exactly_now(shop, officer):
    body = _search(officer, value="4242")
    assert relations(body) == NOW_TRUTH
    assert all(d["relation"] != "aggregate" for d in body["datasets"])
    assert all(d["relation"] == "aggregate" for d in body["aggregates"])
    assert body["counts"] == {"direct": 2, "derived": 3, "aggregate": 2}


@pytest.mark.parametrize("as_of", sorted(AS_OF_TRUTH))
def test_it_answers_as_of_a_past_instant(shop, officer, as_of):
    body = _search(officer, value="4242", asOf=f"{as_of}T00:00:00Z")
    assert relations(body) == AS_OF_TRUTH[as_of]
    assert body["asOf"] == f"{as_of}T00:00:00Z"


def test_it_follows_a_renamed_identifier(shop, officer):
    clean = _by_name(_search(officer, value="4242"))[CLEAN]
    fields = {f["name"]: f for f in clean["fields"]}
    assert fields["cust_key"]["relation"] == "derived"
    assert fields["cust_key"]["masked"] is False
    assert fields["cust_key"]["from"].endswith(f"{CUSTOMERS}:customer_id")
    assert fields["cust_key"]["job"] == "job:spark://etl:stage_customers"
    assert "country" not in fields  # not derived from an identifier
    evidence = clean["evidence"]
    assert evidence["seed"] == f"datasetField:postgres://shop-db:5432:{CUSTOMERS}:customer_id"
    assert [s["to"] for s in evidence["steps"]] == [f"datasetField:s3://acme-lake:{CLEAN}:cust_key"]


def test_it_keeps_a_masked_hash_of_an_email_as_personal_data(shop, officer):
    segments = _by_name(_search(officer, value="4242"))[SEGMENTS]
    assert segments["relation"] == "derived"
    assert segments["fields"][0]["name"] == "email_hash"
    assert segments["fields"][0]["masked"] is True
    steps = segments["evidence"]["steps"]
    assert [
        (s["job"], s["transformation"]["subtype"], s["transformation"]["masking"]) for s in steps
    ] == [
        ("job:spark://etl:stage_customers", "TRANSFORMATION", True),
        ("job:spark://etl:build_segments", "IDENTITY", False),
    ]
    assert segments["evidence"]["seed"].endswith(f"{CUSTOMERS}:email")
    assert steps[1]["validFrom"] == "2024-10-01T00:00:00Z"
    assert steps[1]["validTo"] is None


def test_it_lists_aggregates_apart_with_their_path(shop, officer):
    found = _by_name(_search(officer, value="4242"))
    revenue = found[REVENUE]
    assert [
        (s["to"].rsplit(":", 1)[-1], s["transformation"]["subtype"])
        for s in revenue["evidence"]["steps"]
    ] == [("cust_key", "IDENTITY"), ("customer_count", "AGGREGATION")]
    assert {f["name"]: f["relation"] for f in revenue["fields"]} == {"customer_count": "aggregate"}
    features = found[FEATURES]
    assert [s["job"] for s in features["evidence"]["steps"]] == [
        "job:spark://etl:stage_customers",
        "job:spark://etl:revenue_report",
        "job:spark://etl:features",
    ]


def test_it_reports_owners_retention_and_personal_fields(shop, officer):
    found = _by_name(_search(officer, value="4242"))
    orders = found[ORDERS]
    assert orders["owners"] == [
        {"name": "ada-finance", "type": "TECHNICAL_OWNER"},
        {"name": "team-sales", "type": "DATA_OWNER"},
    ]
    assert orders["retentionPolicy"] == {
        "name": "sales-10y",
        "durationDays": 3650,
        "action": "anonymise",
        "legalBasis": "tax law",
    }
    customers = found[CUSTOMERS]
    assert customers["personalFields"] == [
        {"name": "customer_id", "pii": "identifier"},
        {"name": "email", "pii": "email"},
        {"name": "name", "pii": "name"},
    ]
    assert [f["name"] for f in customers["fields"]] == ["customer_id", "email"]
    assert customers["evidence"] == {
        "seed": f"datasetField:postgres://shop-db:5432:{CUSTOMERS}:customer_id",
        "steps": [],
        "note": None,
    }
    assert customers["scannable"] is False
    assert customers["notScannableReason"] == "no physical location known"
    assert found[CLEAN]["location"] == f"s3://acme-lake/{CLEAN}"


def test_it_explains_a_flag_set_by_propagation(shop, officer):
    dump = _by_name(_search(officer, value="4242"))[CRM_DUMP]
    assert dump["relation"] == "derived"
    assert dump["evidence"] == {"seed": None, "steps": [], "note": "subject flag propagated"}


def test_it_maps_several_identifiers_to_their_fields(shop, officer):
    body = _search(
        officer,
        identifiers=[
            {"kind": "identifier", "value": "4242"},
            {"kind": "email", "value": "Ada@Example.com"},
        ],
    )
    assert [i["seedFields"] for i in body["identifiers"]] == [
        [
            f"datasetField:postgres://shop-db:5432:{CUSTOMERS}:customer_id",
            f"datasetField:postgres://shop-db:5432:{ORDERS}:customer_id",
        ],
        [f"datasetField:postgres://shop-db:5432:{CUSTOMERS}:email"],
    ]
    assert relations(body) == NOW_TRUTH
    found = _by_name(body)
    fields = {f["name"]: f["identifiers"] for f in found[CLEAN]["fields"]}
    assert fields == {"cust_key": [0], "email_sha": [1]}
    assert {f["name"]: f["identifiers"] for f in found[CUSTOMERS]["fields"]} == {
        "customer_id": [0],
        "email": [1],
    }


def test_it_limits_an_identifier_to_its_kind(shop, officer):
    body = _search(officer, identifiers=[{"kind": "email", "value": "ada@example.com"}])
    assert relations(body) == {CUSTOMERS: "direct", CLEAN: "derived", SEGMENTS: "derived"}


def test_it_limits_an_identifier_to_a_field(shop, officer):
    node = f"datasetField:postgres://shop-db:5432:{ORDERS}:customer_id"
    by_node = _search(officer, identifiers=[{"field": node, "value": "4242"}])
    assert relations(by_node) == {ORDERS: "direct", REVENUE: "aggregate"}
    revenue = _by_name(by_node)[REVENUE]
    assert revenue["fields"] == []
    assert revenue["evidence"]["seed"] == node
    assert [
        (s["to"], s["transformation"]["type"], s["transformation"]["subtype"])
        for s in revenue["evidence"]["steps"]
    ] == [(f"dataset:s3://acme-lake:{REVENUE}", "INDIRECT", "JOIN")]
    by_name = _search(officer, identifiers=[{"field": "customer_id", "value": "4242"}])
    # crm_dump.cust_no is listed by its flag, propagated from customers.customer_id: it
    # holds that field's values under another name.
    assert set(relations(by_name)) == {CUSTOMERS, ORDERS, CLEAN, REVENUE, FEATURES, CRM_DUMP}
    (cust_no,) = _by_name(by_name)[CRM_DUMP]["fields"]
    assert (cust_no["name"], cust_no["identifiers"]) == ("cust_no", [0])
    # The same field, however its id spells the namespace and the table.
    spelled = f"datasetField:postgresql://Shop-DB:5432:{ORDERS.upper()}:customer_id"
    again = _search(officer, identifiers=[{"field": spelled, "value": "4242"}])
    assert relations(again) == relations(by_node)


def test_it_says_when_an_identifier_matches_no_field(shop, officer):
    body = _search(officer, identifiers=[{"kind": "phone", "value": "+33 1 23"}])
    assert body["identifiers"][0]["matched"] is False
    assert body["datasets"] == [] and body["aggregates"] == []


def test_it_keeps_subject_kinds_apart(shop, officer):
    response = officer.post(URL, {"subjectKind": "employee", "value": "7"}, format="json")
    assert relations(response.json()) == {"hr.public.employees": "direct", PAYROLL: "derived"}


def test_it_survives_a_lineage_cycle(shop):
    from graph.models import ColumnEdge

    # segments.email_hash feeds customers_clean.email_sha back: a cycle.
    ColumnEdge.objects.create(
        job=shop.jobs["build_segments"],
        source_field=shop.f(SEGMENTS, "email_hash"),
        target_dataset=shop.datasets[CLEAN],
        target_field=shop.f(CLEAN, "email_sha"),
        transformation_type="DIRECT",
        transformation_subtype="IDENTITY",
        valid_from=datetime(2024, 1, 1, tzinfo=UTC),
    )
    with time_machine.travel(NOW, tick=False):
        result = search_subject(SubjectKind.objects.get(name="customer"), [Identifier(0)])
    assert {h.name for h in result.datasets} == {CUSTOMERS, ORDERS, CLEAN, SEGMENTS, CRM_DUMP}


def test_it_limits_the_traversal_depth(shop):
    kind = SubjectKind.objects.get(name="customer")
    with time_machine.travel(NOW, tick=False):
        near = search_subject(kind, [Identifier(0, kind="email")], depth=1)
        far = search_subject(kind, [Identifier(0, kind="email")], depth=None)
    assert {h.name for h in near.datasets} == {CUSTOMERS, CLEAN}
    assert {h.name for h in far.datasets} == {CUSTOMERS, CLEAN, SEGMENTS}


def test_it_links_found_datasets_for_ordering(shop):
    with time_machine.travel(NOW, tick=False):
        result = search_subject(SubjectKind.objects.get(name="customer"), [Identifier(0)])
    names = {h.id: h.name for h in result.all_hits}
    links = {
        (names[link.source_id], names[link.target_id], link.job) for link in dataset_links(result)
    }
    assert links == {
        (CUSTOMERS, CLEAN, "job:spark://etl:stage_customers"),
        (CLEAN, SEGMENTS, "job:spark://etl:build_segments"),
        (CLEAN, REVENUE, "job:spark://etl:revenue_report"),
        (ORDERS, REVENUE, "job:spark://etl:revenue_report"),
        (REVENUE, FEATURES, "job:spark://etl:features"),
    }


def test_it_pages_long_answers_nearest_first(shop, officer):
    first = _search(officer, value="4242", limit=2)
    assert first["page"] == {
        "offset": 0,
        "limit": 2,
        "datasetsTotal": 5,
        "aggregatesTotal": 2,
        "complete": False,
    }
    assert first["counts"] == {"direct": 2, "derived": 3, "aggregate": 2}
    assert [d["relation"] for d in first["datasets"]] == ["direct", "direct"]
    rest = _search(officer, value="4242", limit=2, offset=2)
    last = _search(officer, value="4242", limit=2, offset=4)
    seen = [d["name"] for d in [*first["datasets"], *rest["datasets"], *last["datasets"]]]
    assert sorted(seen) == sorted(n for n, r in NOW_TRUTH.items() if r != "aggregate")
    distances = [d["distance"] for d in [*rest["datasets"], *last["datasets"]]]
    assert distances == sorted(distances)
    assert [d["name"] for d in first["aggregates"]] == [REVENUE, FEATURES]  # nearest first
    assert last["aggregates"] == []


@pytest.mark.parametrize(("extra", "field"), [({"limit": 0}, "limit"), ({"offset": -1}, "offset")])
def test_it_rejects_a_bad_page(shop, officer, extra, field):
    response = officer.post(URL, {"subjectKind": "customer", "value": "1", **extra}, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == field


@pytest.mark.parametrize("as_of", [None, datetime(2024, 4, 1, tzinfo=UTC)])
@pytest.mark.parametrize("depth", [None, 1, 2])
def test_two_levels_classify_fields_as_four_do(shop, as_of, depth):
    """On a graph where no stronger path to a field is longer than a weaker one (with a
    depth, two levels may otherwise reach more: graph.traverse.ranked_field_reach)."""
    import numpy as np

    from graph import snapshot, traverse
    from graph.snapshot import TimeFilter

    seeds = [
        shop.f(CUSTOMERS, "customer_id"),
        shop.f(CUSTOMERS, "email"),
        shop.f(ORDERS, "customer_id"),
    ]
    ids = np.asarray([f.id for f in seeds])
    datasets = np.asarray([f.dataset_id for f in seeds])
    snap = snapshot.columns()
    engine = traverse.ranked_field_reach(snap, ids, datasets, TimeFilter.at(as_of), depth)
    ours = traverse.ranked_field_reach(
        snap, ids, datasets, TimeFilter.at(as_of), depth, levels=(2, 0)
    )
    assert ours.masked.size == ours.field.size

    def classes(reach):
        holds = reach.strength >= 2
        return dict(zip(reach.field.tolist(), holds.tolist(), strict=True)), sorted(
            reach.ds_only.tolist()
        )

    assert classes(ours) == classes(engine)


@pytest.mark.django_db
@pytest.mark.parametrize("clear_path", [True, False])
def test_a_copy_is_masked_when_every_path_masks_and_scanned_for_digests_when_one_does(
    clear_path,
):
    """t1.c is a hash of t0.c one step away; with ``clear_path`` a plain copy also reaches it
    through t2.c, two steps away. It then holds the values themselves, as its propagated flag
    says: the search does not call it masked. Its rows may still hold the hash, so the
    erasure plan's scan matches the digests too; t2.c, reached in clear only, is matched by
    value."""
    from catalog.models import PiiCategory
    from privacy import erasure
    from tests.test_propagation import World, at

    world = World(3)
    world.declare(0, PiiCategory.IDENTIFIER, at(0))
    world.open(0, 1, "TRANSFORMATION", True, at(1), None)
    world.open(0, 2, "IDENTITY", False, at(1), None)
    if clear_path:
        world.open(2, 1, "IDENTITY", False, at(1), None)
    assert world.flag(1)[3] is not clear_path
    found = search_subject(world.kind, [Identifier(0)])
    hits = {h.name: h for h in found.datasets}
    (copy,) = hits["t1"].fields
    assert copy.masked is not clear_path
    steps = {s["name"]: s for s in erasure.plan_steps(found, dataset_links(found))}
    assert [c["masked"] for c in steps["t1"]["keyColumns"]] == [True]
    assert [c["masked"] for c in steps["t2"]["keyColumns"]] == [False]


@pytest.mark.django_db
def test_a_copy_a_hash_reaches_by_a_longer_path_is_scanned_for_digests():
    """t1.c is a plain copy of t0.c one step away, and a hash of it through t2.c, two steps
    away: the nearest path is clear, but its rows may hold the hash."""
    from catalog.models import PiiCategory
    from privacy import erasure
    from tests.test_propagation import World, at

    world = World(3)
    world.declare(0, PiiCategory.IDENTIFIER, at(0))
    world.open(0, 1, "IDENTITY", False, at(1), None)
    world.open(0, 2, "IDENTITY", False, at(1), None)
    world.open(2, 1, "TRANSFORMATION", True, at(1), None)
    found = search_subject(world.kind, [Identifier(0)])
    (copy,) = {h.name: h for h in found.datasets}["t1"].fields
    assert copy.masked is False
    steps = {s["name"]: s for s in erasure.plan_steps(found, dataset_links(found))}
    assert [c["masked"] for c in steps["t1"]["keyColumns"]] == [True]


@pytest.mark.django_db
def test_a_depth_limited_search_leaves_out_copies_beyond_it():
    """t1.c is a hash of t0.c and t2.c a copy of t1.c: one job from t0, t2 is two. Its
    flag came by propagation, which knows no distance; a search one job deep stops at t1."""
    from catalog.models import PiiCategory
    from tests.test_propagation import World, at

    world = World(3)
    world.declare(0, PiiCategory.IDENTIFIER, at(0))
    world.open(0, 1, "TRANSFORMATION", True, at(1), None)
    world.open(1, 2, "IDENTITY", False, at(1), None)
    near = search_subject(world.kind, [Identifier(0)], depth=1)
    assert {h.name: h.distance for h in near.datasets} == {"t0": 0, "t1": 1}
    far = search_subject(world.kind, [Identifier(0)])
    assert {h.name: h.distance for h in far.datasets} == {"t0": 0, "t1": 1, "t2": 2}


@pytest.mark.django_db
@pytest.mark.parametrize("depth", [None, 2, 10])
def test_a_field_declared_in_a_hidden_dataset_is_followed_to_its_copies_and_aggregates(depth):
    """t0 is hidden (a scratch table), so it is not listed; but t1.c, a hash of its column,
    and t2, a count of t1.c, are: with their paths, masked as the path says, and the
    erasure plan matches the digests."""
    from catalog.models import PiiCategory
    from privacy import erasure
    from tests.test_propagation import World, at

    world = World(3)
    world.declare(0, PiiCategory.IDENTIFIER, at(0))
    world.open(0, 1, "TRANSFORMATION", True, at(1), None)
    world.open(1, 2, "AGGREGATION", False, at(1), None)
    hidden = world.fields[0].dataset
    hidden.is_hidden = True
    hidden.save()
    found = search_subject(world.kind, [Identifier(0)], depth=depth)
    assert [(h.name, h.relation, h.distance) for h in found.datasets] == [("t1", "derived", 1)]
    assert [(h.name, h.relation, h.distance) for h in found.aggregates] == [("t2", "aggregate", 2)]
    copy = found.datasets[0]
    assert (copy.fields[0].masked, copy.fields[0].hashed) == (True, True)
    assert [(s.source, s.target) for s in copy.evidence.steps] == [
        ("datasetField:pg://w:t0:c", "datasetField:pg://w:t1:c")
    ]
    steps = {s["name"]: s for s in erasure.plan_steps(found, dataset_links(found))}
    assert [c["masked"] for c in steps["t1"]["keyColumns"]] == [True]
    assert "t0" not in steps


@pytest.mark.django_db
def test_an_identifier_naming_a_field_matches_copies_of_that_field_only():
    """The identifier names field c; the only declared field is a, copied to t1.c: t1.c
    holds values of a, not of c, so the identifier finds nothing."""
    from catalog.models import PiiCategory
    from tests.test_propagation import World, at

    world = World(2)
    world.fields[0].name = "a"
    world.fields[0].save()
    world.declare(0, PiiCategory.IDENTIFIER, at(0))
    world.open(0, 1, "IDENTITY", False, at(1), None)
    assert world.flag(1)[1] == "customer"
    for as_of in (None, at(5)):
        found = search_subject(world.kind, [Identifier(0, field="c")], as_of=as_of)
        assert (found.datasets, found.aggregates) == ([], [])
        found = search_subject(world.kind, [Identifier(0, field="a")], as_of=as_of)
        assert [h.name for h in found.datasets] == ["t0", "t1"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("id_path", "email_path", "masked"),
    [
        (("TRANSFORMATION", True), ("AGGREGATION", False), True),
        (("IDENTITY", False), ("AGGREGATION", True), False),
    ],
)
def test_what_another_identifier_only_aggregates_into_a_copy_says_nothing_of_its_values(
    id_path: tuple[str, bool], email_path: tuple[str, bool], masked: bool
):
    """t2.c is a hash (or a copy) of t0.c, the customer id, and a count of t1.c, their email
    (or of its hash): masked and hashed by its own path only, whether the search names the
    email too or not."""
    from catalog import actions as catalog_actions
    from catalog.models import PiiCategory
    from tests.test_propagation import STEWARD, World, at

    world = World(3)
    world.declare(0, PiiCategory.IDENTIFIER, at(0))
    changes = {"pii_category": PiiCategory.EMAIL, "subject_kind": world.kind}
    catalog_actions.update_field(world.fields[1], changes, STEWARD, at=at(0))
    world.open(0, 2, id_path[0], id_path[1], at(1), None)
    world.open(1, 2, email_path[0], email_path[1], at(1), None)
    for identifiers in (
        [Identifier(0, kind="identifier")],
        [Identifier(0, kind="identifier"), Identifier(1, kind="email")],
    ):
        found = search_subject(world.kind, identifiers)
        (copy,) = {h.name: h for h in found.datasets}["t2"].fields
        assert (copy.masked, copy.hashed) == (masked, masked)


def test_a_search_reads_one_lineage_revision(shop, revision_reads):
    """Everything one search lists (the datasets it excludes, each identifier's reach) is
    of one state of the lineage: the revision is read once."""
    kind = SubjectKind.objects.get(name="customer")
    with time_machine.travel(NOW, tick=False):
        found = search_subject(kind, [Identifier(0), Identifier(1, kind="email")])
    assert found.all_hits and len(revision_reads) == 1


@pytest.mark.django_db
def test_a_copy_is_not_listed_for_what_another_subject_kinds_source_holds():
    """t2.c copies the customer id of t0 and an employee's email of t1: a search for a
    customer's email finds nothing (the email is an employee's), now or as of then."""
    from catalog import actions as catalog_actions
    from catalog.models import PiiCategory
    from tests.test_propagation import STEWARD, World, at

    world = World(3)
    employee, _ = SubjectKind.objects.get_or_create(name="employee")
    world.declare(0, PiiCategory.IDENTIFIER, at(0))
    changes = {"pii_category": PiiCategory.EMAIL, "subject_kind": employee}
    catalog_actions.update_field(world.fields[1], changes, STEWARD, at=at(0))
    world.open(0, 2, "IDENTITY", False, at(1), None)
    world.open(1, 2, "TRANSFORMATION", False, at(1), None)
    for as_of in (None, at(5)):
        found = search_subject(world.kind, [Identifier(0, kind="email")], as_of=as_of)
        assert found.all_hits == [], as_of
