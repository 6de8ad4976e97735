"""Taints (at-risk datasets, jobs to re-run in order) and the column-level reach used by
the privacy subject search (strongest path, weakest transformation, evidence, as-of)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest

from graph import queries, snapshot, traverse
from graph.models import Direction, Taint, TransformationSubtype, TransformationType
from graph.queries import FieldReach
from graph.snapshot import STRENGTH_AGGREGATION as AGGREGATION
from graph.snapshot import STRENGTH_IDENTITY as IDENTITY
from graph.snapshot import STRENGTH_INDIRECT as INDIRECT
from graph.snapshot import STRENGTH_TRANSFORMATION as TRANSFORMATION
from graph.snapshot import TimeFilter
from graph.taint import TaintError, clear_taint, mark_tainted
from tests.graph_builders import T0, T1, T2, T3, LineageBuilder

pytestmark = pytest.mark.django_db


@pytest.fixture
def diamond():
    """src → j_a → a → j_c → c, and src → j_b → b → j_c (c reads a and b); c → j_d → d."""
    g = LineageBuilder()
    g.datasets("src", "a", "b", "c", "d", "other")
    g.job("j_a", reads=["src"], writes=["a"])
    g.job("j_b", reads=["src"], writes=["b"])
    g.job("j_c", reads=["a", "b"], writes=["c"])
    g.job("j_d", reads=["c"], writes=["d"])
    g.job("j_other", reads=["other"], writes=["d"])
    return g


def active() -> list[Taint]:
    return list(Taint.objects.filter(cleared_at__isnull=True))


def names(impact):
    return [d.dataset.name for d in impact.datasets]


def test_a_taint_puts_everything_downstream_at_risk(diamond, engineer):
    taint = mark_tainted(diamond.ds["src"], reason="bad load", actor=engineer)
    impact = queries.taint_impact(active())
    assert names(impact) == ["src", "a", "b", "c", "d"]
    assert {d.dataset.name: d.distance for d in impact.datasets}["c"] == 2
    assert all(d.taints == (taint.pk,) for d in impact.datasets)
    order = [j.job.name for j in impact.jobs_to_rerun]
    # Each job after every job feeding it at-risk data.
    assert order.index("j_a") < order.index("j_c") and order.index("j_b") < order.index("j_c")
    assert order.index("j_c") < order.index("j_d")
    assert "j_other" not in order
    assert [j.order for j in impact.jobs_to_rerun] == [1, 2, 3, 4]


def test_clearing_a_taint_clears_the_risk(diamond, engineer):
    taint = mark_tainted(diamond.ds["src"], reason="bad load", actor=engineer)
    mark_tainted(diamond.ds["other"], reason="late", actor=engineer)
    assert "a" in names(queries.taint_impact(active()))
    cleared = clear_taint(taint, actor=engineer)
    assert cleared.cleared_by == engineer and cleared.cleared_at is not None
    assert names(queries.taint_impact(active())) == ["other", "d"]
    again = clear_taint(cleared)
    assert again.cleared_at == cleared.cleared_at


def test_a_windowed_taint_follows_edges_valid_since_the_window(diamond, engineer):
    # j_c stopped reading b at T2; a taint on b from T1 still reaches c (it read b then),
    # a taint on b from T3 does not.
    diamond.close("j_c", "b", Direction.INPUT, T2)
    early = mark_tainted(diamond.ds["b"], reason="x", window_start=T1, window_end=T2)
    late = mark_tainted(diamond.ds["b"], reason="x", window_start=T3)
    assert "c" in names(queries.taint_impact([early]))
    assert names(queries.taint_impact([late])) == ["b"]
    now = mark_tainted(diamond.ds["b"], reason="x")
    assert names(queries.taint_impact([now])) == ["b"]


def test_cycles_in_the_rerun_order_are_flagged(engineer):
    g = LineageBuilder()
    g.datasets("x", "y")
    g.job("xy", reads=["x"], writes=["y"])
    g.job("yx", reads=["y"], writes=["x"])
    mark_tainted(g.ds["x"], reason="loop")
    impact = queries.taint_impact(active())
    assert {j.job.name for j in impact.jobs_to_rerun} == {"xy", "yx"}
    assert all(j.in_cycle for j in impact.jobs_to_rerun)


def test_taint_input_is_validated(diamond):
    with pytest.raises(TaintError) as info:
        mark_tainted(diamond.ds["a"], reason="  ")
    assert info.value.field == "reason"
    with pytest.raises(TaintError) as info:
        mark_tainted(diamond.ds["a"], reason="x", window_start=T2, window_end=T1)
    assert info.value.field == "windowEnd"
    with pytest.raises(TaintError) as info:
        mark_tainted(diamond.ds["a"], reason="x", window_end=T1)
    assert info.value.field == "windowStart"


def test_taint_impact_caps_large_answers(engineer):
    g = LineageBuilder()
    g.dataset("hub")
    for i in range(12):
        g.dataset(f"o{i}")
        g.job(f"r{i}", reads=["hub"], writes=[f"o{i}"])
    mark_tainted(g.ds["hub"], reason="x")
    impact = queries.taint_impact(active(), max_nodes=5)
    assert impact.truncated and len(impact.datasets) == 5 and impact.cut.datasets == 8
    assert len(impact.jobs_to_rerun) == 5 and impact.cut.jobs == 7


# --- column reach for subject search -----------------------------------------------------


@pytest.fixture
def subject():
    """crm.customers.id → (identity) clean.customer_id → (masked hash) mart.customer_hash
    crm.customers.email → (aggregation) report.emails_per_day
    clean.customer_id → (join, indirect) orders_enriched.total
    clean.customer_id → dataset-level filter on audit (no target field)
    renamed: until T2, legacy.cust read crm.customers.id by identity."""
    g = LineageBuilder()
    g.dataset("crm.customers", fields=("id", "email"))
    g.dataset("clean.customers", fields=("customer_id",))
    g.dataset("mart.profiles", fields=("customer_hash",))
    g.dataset("report.daily", fields=("emails_per_day",))
    g.dataset("orders.enriched", fields=("total",))
    g.dataset("audit", fields=("n",))
    g.dataset("legacy.cust", fields=("cust",))
    g.job("clean", reads=["crm.customers"], writes=["clean.customers"])
    g.column("clean", "crm.customers.id", "clean.customers.customer_id")
    g.job("mart", reads=["clean.customers"], writes=["mart.profiles"])
    edge = g.column(
        "mart",
        ("clean.customers.customer_id", TransformationSubtype.TRANSFORMATION),
        "mart.profiles.customer_hash",
    )
    edge.masking = True
    edge.save()
    g.job("report", reads=["crm.customers"], writes=["report.daily"])
    g.column(
        "report",
        ("crm.customers.email", TransformationSubtype.AGGREGATION),
        "report.daily.emails_per_day",
    )
    g.job("enrich", reads=["clean.customers"], writes=["orders.enriched"])
    g.column(
        "enrich",
        ("clean.customers.customer_id", TransformationSubtype.JOIN, TransformationType.INDIRECT),
        "orders.enriched.total",
    )
    g.job("audit", reads=["clean.customers"], writes=["audit"])
    g.column(
        "audit",
        ("clean.customers.customer_id", TransformationSubtype.FILTER, TransformationType.INDIRECT),
        "audit.",
    )
    g.job("legacy", reads=["crm.customers"], writes=["legacy.cust"], at=T0, until=T2)
    g.column("legacy", "crm.customers.id", "legacy.cust.cust", at=T0, until=T2)
    return g


class Reach(NamedTuple):
    ranked: dict[int, tuple[int, int, int]]  # field pk: (strength, distance, dataset pk)
    evidence: FieldReach


def reach_of(g, *fields, as_of=None, max_depth=None) -> Reach:
    """The privacy search's reach downstream of these seed fields."""
    seeds = sorted((g.field(f) for f in fields), key=lambda f: f.pk)
    snap = snapshot.columns()
    a = traverse.ranked_field_reach(
        snap,
        np.asarray([f.pk for f in seeds], dtype=np.int64),
        np.asarray([f.dataset_id for f in seeds], dtype=np.int64),
        TimeFilter.at(as_of),
        max_depth,
    )
    rows = zip(
        a.field.tolist(), a.strength.tolist(), a.dist.tolist(), a.dataset.tolist(), strict=True
    )
    return Reach({f: (s, d, ds) for f, s, d, ds in rows}, FieldReach(snap, a))


def test_reach_ranks_each_field_by_its_weakest_transformation(subject):
    reach = reach_of(subject, "crm.customers.id", "crm.customers.email")
    expect = {
        "crm.customers.id": (IDENTITY, 0),
        "crm.customers.email": (IDENTITY, 0),
        "clean.customers.customer_id": (IDENTITY, 1),
        "mart.profiles.customer_hash": (TRANSFORMATION, 2),
        "report.daily.emails_per_day": (AGGREGATION, 1),
        "orders.enriched.total": (INDIRECT, 2),
    }
    assert {subject.field(f).pk for f in expect} == set(reach.ranked)
    for spec, strength_distance in expect.items():
        assert reach.ranked[subject.field(spec).pk][:2] == strength_distance, spec
    profiles = subject.ds["mart.profiles"].pk
    assert max(s for s, _, ds in reach.ranked.values() if ds == profiles) == TRANSFORMATION
    # The audit table depends on the email as a whole (a filter): reached as a dataset only.
    audit = subject.ds["audit"].pk
    assert audit not in {ds for _, _, ds in reach.ranked.values()}
    assert reach.evidence.dataset_path(audit)


def test_reach_gives_the_evidence_path_field_by_field(subject):
    reach = reach_of(subject, "crm.customers.id").evidence
    path = reach.path(subject.field("mart.profiles.customer_hash").pk)
    assert [s.field_id for s in path] == [
        subject.field("crm.customers.id").pk,
        subject.field("clean.customers.customer_id").pk,
        subject.field("mart.profiles.customer_hash").pk,
    ]
    assert [s.job_id for s in path] == [None, subject.jobs["clean"].pk, subject.jobs["mart"].pk]
    assert path[2].transformation_subtype == "TRANSFORMATION" and path[2].masking
    assert path[1].transformation_type == "DIRECT"
    audit = reach.dataset_path(subject.ds["audit"].pk)
    assert audit[-1].field_id is None and audit[-1].transformation_subtype == "FILTER"
    assert reach.path(subject.field("legacy.cust.cust").pk) == ()


def test_reach_prefers_a_strong_path_over_a_short_weak_one():
    g = LineageBuilder()
    g.dataset("s", fields=("k",))
    g.dataset("m", fields=("k",))
    g.dataset("t", fields=("k",))
    g.job("weak", reads=["s"], writes=["t"])
    g.column("weak", ("s.k", TransformationSubtype.AGGREGATION), "t.k")
    g.job("copy1", reads=["s"], writes=["m"])
    g.column("copy1", "s.k", "m.k")
    g.job("copy2", reads=["m"], writes=["t"])
    g.column("copy2", "m.k", "t.k")
    reach = reach_of(g, "s.k")
    target = g.field("t.k").pk
    assert reach.ranked[target][:2] == (IDENTITY, 2)
    assert [s.job_id for s in reach.evidence.path(target)][1:] == [
        g.jobs["copy1"].pk,
        g.jobs["copy2"].pk,
    ]


def test_reach_honours_as_of_and_depth(subject):
    legacy = subject.field("legacy.cust.cust").pk
    assert legacy in reach_of(subject, "crm.customers.id", as_of=T1).ranked
    assert legacy not in reach_of(subject, "crm.customers.id", as_of=T3).ranked
    shallow = reach_of(subject, "crm.customers.id", max_depth=1).ranked
    assert subject.field("mart.profiles.customer_hash").pk not in shallow
    assert subject.field("clean.customers.customer_id").pk in shallow


def test_reach_of_nothing_is_empty():
    assert reach_of(LineageBuilder()).ranked == {}
