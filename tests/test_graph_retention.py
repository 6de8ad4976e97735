"""Lineage retention: old run detail is compacted into summaries; edges and time travel stay."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from graph import queries, revision, tasks
from graph.models import (
    Direction,
    GraphChange,
    GraphRevisionLog,
    Run,
    RunState,
    TableEdge,
)
from graph.resolve import resolve_node_id
from graph.retention import COMPACTED, compact_lineage
from tests.graph_builders import T0, T1, T3, LineageBuilder

pytestmark = pytest.mark.django_db


@pytest.fixture
def history():
    g = LineageBuilder()
    g.chain("a", "b", "c")
    g.dataset("old_input")
    g.edge("job_0", "old_input", Direction.INPUT, at=T0, until=T1)
    old = g.run("job_0", RunState.FAILED, T0)
    old.facets = {"spark.logicalPlan": {"plan": "x" * 5000}, "nominalTime": {"start": "t"}}
    old.error_stack = "Traceback\n" + "frame\n" * 1000
    old.save()
    recent = g.run("job_1", RunState.COMPLETED, T3)
    recent.facets = {"spark.logicalPlan": {"plan": "y" * 100}}
    recent.save()
    return g, old, recent


def test_it_compacts_old_run_facets_into_a_summary(history):
    _, old, recent = history
    result = compact_lineage(timedelta(days=30), now=T3 + timedelta(days=1))
    assert result.runs_compacted == 1
    assert result.bytes_after < result.bytes_before / 5
    old.refresh_from_db()
    summary = old.facets[COMPACTED]
    assert summary["facets"] == ["nominalTime", "spark.logicalPlan"]
    assert summary["sizes"]["spark.logicalPlan"] > 5000
    assert len(old.error_stack) == 2000 and old.error_message == "boom"
    assert old.state == RunState.FAILED and old.started_at == T0
    recent.refresh_from_db()
    assert recent.facets == {"spark.logicalPlan": {"plan": "y" * 100}}


def test_compaction_is_idempotent_and_keeps_time_travel(history):
    g, _, _ = history
    edges_before = list(TableEdge.objects.values_list("pk", "valid_from", "valid_to"))
    compact_lineage(timedelta(days=30), now=T3 + timedelta(days=1))
    again = compact_lineage(timedelta(days=30), now=T3 + timedelta(days=1))
    assert again.runs_compacted == 0
    assert list(TableEdge.objects.values_list("pk", "valid_from", "valid_to")) == edges_before
    then = queries.lineage(resolve_node_id(g.id("b")), depth=1, direction="upstream", as_of=T0)
    assert {n.name for n in then.nodes} == {"b", "job_0", "a", "old_input"}


def test_the_task_round_trips_its_arguments_through_json(history, settings):
    args = json.loads(json.dumps({"older_than_days": 30}))
    with time_machine.travel(T3 + timedelta(days=1), tick=False):
        result = tasks.compact_lineage_detail.apply(kwargs=args).get()
    assert result["runs_compacted"] == 1
    assert json.loads(json.dumps(result)) == result
    assert "graph-compact-lineage-detail" in settings.CELERY_BEAT_SCHEDULE


@pytest.mark.django_db(transaction=True)
def test_it_prunes_old_change_log_rows_but_keeps_the_newest(history):
    assert GraphChange.objects.exists()
    # Change-log rows carry the database's clock: prune everything logged before tomorrow.
    tomorrow = timezone.now() + timedelta(days=1)
    result = compact_lineage(timedelta(days=30), now=tomorrow, change_log_days=0)
    assert result.change_log_rows_pruned > 0
    # The current revision stays resolvable, so warm processes keep refreshing by delta.
    assert GraphRevisionLog.objects.filter(revision=revision.current().value).exists()


def test_only_runs_with_facets_are_touched(history):
    g, _, _ = history
    bare = Run.objects.create(
        run_uuid="00000000-0000-0000-0000-000000000001", job=g.jobs["job_1"], created_at=T0
    )
    compact_lineage(timedelta(days=1), now=T3)
    bare.refresh_from_db()
    assert bare.facets == {}
