"""Node documents rendered ahead of requests.

A lineage answer splices in each node's pre-rendered ``data`` (graph/nodedata.py):
from the process's node cache, else from the documents shared in
``graph_nodedoc``, else rendered from the catalog — two queries and a few
milliseconds, paid by whichever request shows the node first. On PostgreSQL
this module renders the documents before anyone asks:

- a **full pass** renders every dataset and job, then records the revision it
  started from in ``graph_nodedoc_pass``. A server process that starts later
  reads the change log from there and trusts the document of every node that
  has not changed since (graph/nodecache.py), however much else changed;
- a **follow-up pass** renders the nodes changed since the last pass whose
  documents are older than their last change; once more than ``ADVANCE_AFTER``
  nodes changed, it then stamps every document with its revision and records
  that, so processes never read a long change log at start.

``generate_lineage`` runs a full pass once it has loaded; Celery beat runs
:func:`render_documents` every ``GRAPH_DOCUMENTS_INTERVAL`` seconds, which
makes a full pass of it when the change log can no longer say what changed
since the last one (a reset, a renamed owner or tag, pruned history, or more
changed nodes than a process reads).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from catalog.models import Dataset
from catalog.pgsql import bound_cursor
from graph import revision as rev
from graph.models import Job, NodeDocumentPass
from graph.nodecache import DATASET, JOB, SYNC_LIMIT, Entry, node_changes, write_documents
from graph.nodedata import render_datasets, render_jobs

log = logging.getLogger(__name__)

# Once more nodes than this changed since the last pass, a follow-up pass moves the pass's
# revision on (every process starting up reads the changes since it); past FULL_PASS_AFTER
# (the most a process reads: graph.nodecache.SYNC_LIMIT), it renders everything again.
ADVANCE_AFTER = 2_000
FULL_PASS_AFTER = SYNC_LIMIT
BATCH = 1_000
# pg_try_advisory_lock key: one pass at a time across workers.
LOCK_KEY = 7_305_611_001


@dataclass(frozen=True, slots=True)
class PassResult:
    full: bool = False
    revision: int = 0
    datasets: int = 0
    jobs: int = 0
    seconds: float = 0.0
    # Why nothing was rendered, when nothing was.
    skipped: str = ""


def render_documents(full: bool = False, batch: int = BATCH) -> PassResult:
    """Render the documents that are missing or older than their node's last change
    (everything, with ``full`` or when the change log cannot tell)."""
    if connection.vendor != "postgresql":
        return PassResult(skipped="node documents are shared only on PostgreSQL")
    if not settings.GRAPH_SHARED_NODE_DATA:
        return PassResult(skipped="GRAPH_SHARED_NODE_DATA is off")
    started = time.perf_counter()
    with _pass_lock() as held:
        if not held:
            return PassResult(skipped="another pass is running")
        current = rev.current()
        last = NodeDocumentPass.objects.filter(pk=1, code=rev.code_digest()).first()
        changes = None if full or last is None else _changes_since(last, current)
        if changes is None:
            datasets = _render(DATASET, _all_pks(Dataset), render_datasets, current, batch)
            jobs = _render(JOB, _all_pks(Job), render_jobs, current, batch)
            with connection.cursor() as cursor:
                # Planned on fresh statistics, every request's document lookup stays an
                # index probe per node.
                cursor.execute("ANALYZE graph_nodedoc")
            seconds = time.perf_counter() - started
            NodeDocumentPass.objects.update_or_create(
                pk=1,
                defaults={
                    "revision": current.value,
                    "token": current.token,
                    "finished_at": timezone.now(),
                    "datasets": datasets,
                    "jobs": jobs,
                    "seconds": round(seconds, 3),
                    "code": rev.code_digest(),
                },
            )
            log.info(
                "rendered %d dataset and %d job documents at revision %d in %.1f s",
                datasets,
                jobs,
                current.value,
                seconds,
            )
            return PassResult(True, current.value, datasets, jobs, seconds)
        datasets = _render(DATASET, _stale(DATASET, changes), render_datasets, current, batch)
        jobs = _render(JOB, _stale(JOB, changes), render_jobs, current, batch)
        if last is not None and len(changes) > ADVANCE_AFTER:
            _advance(last, current)
        return PassResult(False, current.value, datasets, jobs, time.perf_counter() - started)


def _advance(last: NodeDocumentPass, current: rev.Revision) -> None:
    """Every node changed up to ``current`` now has a document as new as its change, and
    every other document is valid from the last pass on, so all of them are valid at
    ``current``: say so, and processes starting later read the change log from there.
    (A node changed after ``current`` keeps its later change in the log, so a document
    stamped here is still judged against it.)"""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE graph_nodedoc SET revision = %s "
                "WHERE revision >= %s AND revision < %s AND code = %s",
                [current.value, last.revision, current.value, rev.code_digest()],
            )
        NodeDocumentPass.objects.filter(pk=1).update(
            revision=current.value, token=current.token, finished_at=timezone.now()
        )


@contextmanager
def _pass_lock() -> Iterator[bool]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [LOCK_KEY])
        held = bool(cursor.fetchone()[0])
    try:
        yield held
    finally:
        if held:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])


def _changes_since(
    last: NodeDocumentPass, current: rev.Revision
) -> dict[tuple[str, int], int] | None:
    """Each node changed since the last pass, with the revision of its last change; None
    when a full pass is due."""
    return node_changes(rev.Revision(last.revision, last.token), current, FULL_PASS_AFTER)


def _all_pks(model: type[Dataset] | type[Job]) -> list[int]:
    return list(model.objects.order_by("pk").values_list("pk", flat=True))


def _stale(kind: str, changes: dict[tuple[str, int], int]) -> list[int]:
    """Nodes of ``kind`` whose document is missing or older than their last change."""
    changed = {obj: at for (k, obj), at in changes.items() if k == kind}
    if not changed:
        return []
    with bound_cursor() as cursor:
        cursor.execute(
            "SELECT obj_id, revision FROM graph_nodedoc "
            "WHERE kind = %s AND obj_id = ANY(%s) AND code = %s",
            [kind, sorted(changed), rev.code_digest()],
        )
        held = dict(cursor.fetchall())
    return sorted(pk for pk, at in changed.items() if held.get(pk, -1) < at)


def _render(
    kind: str,
    pks: list[int],
    render: Callable[[list[int]], dict[int, Entry]],
    current: rev.Revision,
    batch: int,
) -> int:
    """Render ``pks`` in batches and store their documents stamped with ``current`` (read
    before any of them was loaded); gives how many were stored."""
    stored = 0
    for start in range(0, len(pks), batch):
        rendered = render(pks[start : start + batch])
        write_documents({(kind, pk): (current.value, entry) for pk, entry in rendered.items()})
        stored += len(rendered)
    return stored
