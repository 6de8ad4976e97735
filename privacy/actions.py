"""Writes of the privacy app: audited searches, erasure plans, and Spark runs.

Every function that touches a subject's identifier values is marked with
``sensitive_variables`` so Django's error reports never show them, and no
message, log line or stored row carries them (only keyed hashes).
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import DatabaseError, connection, transaction
from django.db.models import Q
from django.utils import timezone
from django.views.decorators.debug import sensitive_variables

from catalog import actions as catalog_actions
from catalog.auth import PRODUCER
from catalog.models import SubjectKind
from graph.nodeids import FIELD_PREFIX, MalformedNodeId, UnknownNodeId
from graph.resolve import resolve_node_id
from lineage_site import dispatch
from ops import metrics
from privacy import erasure
from privacy.models import (
    AuditAction,
    AuditEntry,
    AuditOutcome,
    AuditValueHash,
    ErasurePlan,
    PlanState,
    PrivacyRun,
    RunKind,
    RunState,
)
from privacy.queries import (
    DatasetHit,
    Identifier,
    SubjectSearch,
    as_json_safe,
    dataset_links,
    scan_findings,
    search_subject,
)
from privacy.sealing import SealError, normalise, seal, unseal, value_hash

log = logging.getLogger(__name__)

ERASURE_JOB_USER = "privacy-erasure"
# Tests replace this to capture the erasure job's OpenLineage events.
lineage_transport_factory: Callable[[], Any] | None = None


class PrivacyError(Exception):
    """A request that cannot be carried out; the message is safe to show (no values)."""

    def __init__(self, message: str, field: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.field = field
        self.status = status


def _field(restriction: str | None) -> str | None:
    """A field restriction given as a node id, as the catalog names that field (canonical,
    under its dataset's name rather than an alias); a field name, or an id that names no
    known field, as given."""
    if restriction is None or not restriction.startswith(FIELD_PREFIX):
        return restriction
    try:
        return str(resolve_node_id(restriction))
    except (MalformedNodeId, UnknownNodeId):
        return restriction


@dataclass(frozen=True)
class SubjectRequest:
    """A subject kind and its identifiers; ``values`` are normalised and never printed."""

    subject_kind: SubjectKind
    identifiers: list[Identifier]
    values: list[str] = field(repr=False)
    as_of: datetime | None = None

    @classmethod
    @sensitive_variables()
    def build(
        cls,
        subject_kind: SubjectKind,
        raw: list[tuple[str | None, str | None, str]],
        as_of: datetime | None = None,
    ) -> SubjectRequest:
        """Return a request from (kind, field, value) triples, values normalised by kind."""
        identifiers = [Identifier(i, kind, _field(fld)) for i, (kind, fld, _) in enumerate(raw)]
        values: list[str] = [normalise(value, kind) for kind, _, value in raw]
        return cls(subject_kind, identifiers, values, as_of)

    @sensitive_variables()
    def hashes(self) -> list[dict[str, Any]]:
        """Return what the audit keeps of each identifier: its kind, field and keyed hash."""
        return [
            {
                "index": ident.index,
                "kind": ident.kind,
                "field": ident.field,
                "hash": value_hash(self.subject_kind.name, value),
            }
            for ident, value in zip(self.identifiers, self.values, strict=True)
        ]

    def describe(self) -> list[dict[str, Any]]:
        return [{"index": i.index, "kind": i.kind, "field": i.field} for i in self.identifiers]


def _actor_name(user: Any) -> str:
    return str(user.get_username()) if user is not None and user.is_authenticated else "anonymous"


def log_audit(
    user: Any,
    action: str,
    *,
    actor_name: str = "",
    outcome: str = AuditOutcome.OK,
    subject_kind: str = "",
    hashes: list[dict[str, Any]] | None = None,
    as_of: datetime | None = None,
    result_count: int | None = None,
    reference: UUID | None = None,
    detail: dict[str, Any] | None = None,
) -> AuditEntry:
    """Append one audit entry (and its indexed hashes)."""
    with transaction.atomic():
        entry = AuditEntry.objects.create(
            actor=user if user is not None and user.is_authenticated else None,
            actor_name=actor_name or _actor_name(user),
            action=action,
            outcome=outcome,
            subject_kind=subject_kind,
            value_hashes=hashes or [],
            as_of=as_of,
            result_count=result_count,
            reference=reference,
            detail=detail or {},
        )
        AuditValueHash.objects.bulk_create(
            AuditValueHash(entry=entry, digest=h["hash"]) for h in hashes or []
        )
    return entry


def log_denied(user: Any, action: str, path: str) -> AuditEntry:
    """Audit a refused attempt (the body is not read, so no hash is kept)."""
    return log_audit(user, action, outcome=AuditOutcome.DENIED, detail={"path": path})


def do_subject_search(
    user: Any,
    request: SubjectRequest,
    *,
    limit: int | None = None,
    offset: int = 0,
    depth: int | None = None,
) -> tuple[SubjectSearch, AuditEntry]:
    """Search for the subject's datasets (one page of them) and audit the search."""
    search = search_subject(
        request.subject_kind,
        request.identifiers,
        request.as_of,
        depth,
        limit=limit,
        offset=offset,
    )
    search.scan = scan_findings(request.subject_kind.name, [h["hash"] for h in request.hashes()])
    totals = search.totals
    entry = log_audit(
        user,
        AuditAction.SEARCH,
        subject_kind=request.subject_kind.name,
        hashes=request.hashes(),
        as_of=request.as_of,
        result_count=totals["direct"] + totals["derived"],
        detail={"identifiers": request.describe(), "counts": totals, "offset": offset},
    )
    return search, entry


def _target(hit: DatasetHit) -> dict[str, Any]:
    storage = erasure.storage_target(hit)
    columns = erasure.key_columns(hit)
    runnable = storage.scannable and bool(columns)
    reason = storage.reason or ("" if columns else "no column holds the identifiers")
    return {
        "key": hit.node_id,
        "namespace": hit.namespace,
        "name": hit.name,
        "relation": hit.relation,
        "location": storage.location or None,
        "format": storage.format or None,
        "columns": columns,
        "runnable": runnable,
        "reason": reason,
        "owners": hit.owners,
    }


def _not_runnable(targets: list[dict[str, Any]], status: str) -> dict[str, Any]:
    return {
        t["key"]: {"status": status, "reason": t["reason"]} for t in targets if not t["runnable"]
    }


def _enqueue(run: PrivacyRun) -> None:
    run_id = str(run.id)
    transaction.on_commit(lambda: _start(run_id))


def _start(run_id: str) -> None:
    """Queue a run; without a broker, run it on a background thread so its page can poll.

    ``PRIVACY_RUNS_INLINE`` (tests) runs it synchronously instead.
    """
    if settings.CELERY_TASK_ALWAYS_EAGER and not getattr(settings, "PRIVACY_RUNS_INLINE", False):
        threading.Thread(target=_run_in_thread, args=(run_id,), daemon=True).start()
    else:
        dispatch.send("privacy.run_job", [run_id])


def _run_in_thread(run_id: str) -> None:
    try:
        dispatch.send("privacy.run_job", [run_id])
    finally:
        connection.close()


def request_scan(user: Any, request: SubjectRequest) -> PrivacyRun:
    """Queue a Spark scan of the subject's candidate datasets; audited.

    The candidates are found by the task (a subject reaching thousands of
    datasets takes a while to list), so the request returns at once.
    """
    with transaction.atomic():
        run = PrivacyRun.objects.create(
            kind=RunKind.SCAN,
            subject_kind=request.subject_kind.name,
            value_hashes=request.hashes(),
            as_of=request.as_of,
            created_by=user,
            created_by_name=_actor_name(user),
            sealed=seal(request.values),
        )
        log_audit(
            user,
            AuditAction.SCAN,
            outcome=AuditOutcome.REQUESTED,
            subject_kind=request.subject_kind.name,
            hashes=run.value_hashes,
            as_of=request.as_of,
            reference=run.id,
        )
        _enqueue(run)
    return run


def _scan_targets(run: PrivacyRun) -> list[dict[str, Any]]:
    """Find and keep a scan's candidate datasets (every dataset holding the subject's rows)."""
    kind = SubjectKind.objects.get(name=run.subject_kind)
    identifiers = [Identifier(h["index"], h["kind"], h["field"]) for h in run.value_hashes]
    search = search_subject(kind, identifiers, run.as_of)
    targets = [_target(hit) for hit in search.datasets]
    run.targets = targets
    run.results = _not_runnable(targets, "not_scannable")
    run.progress_total = sum(1 for t in targets if t["runnable"])
    PrivacyRun.objects.filter(pk=run.pk).update(
        targets=run.targets, results=run.results, progress_total=run.progress_total
    )
    return targets


def create_erasure_plan(user: Any, request: SubjectRequest) -> ErasurePlan:
    """Make the ordered erasure plan for the subject (lineage as of now); audited.

    Without a broker it is computed here and returned ready. With one, the
    plan is returned ``building`` and a task computes it: a subject reaching
    tens of thousands of datasets takes seconds, too long to hold a request.
    """
    if settings.CELERY_TASK_ALWAYS_EAGER:
        steps, owners, summary = _plan_contents(request.subject_kind, request.identifiers)
    with transaction.atomic():
        plan = ErasurePlan.objects.create(
            created_by=user,
            created_by_name=_actor_name(user),
            subject_kind=request.subject_kind.name,
            value_hashes=request.hashes(),
            identifiers=request.describe(),
        )
        if settings.CELERY_TASK_ALWAYS_EAGER:
            _fill_plan(plan, steps, owners, summary)
        else:
            plan.state = PlanState.BUILDING
            plan.save(update_fields=["state"])
            plan_id = str(plan.id)
            transaction.on_commit(lambda: _enqueue_plan(plan_id))
        log_audit(
            user,
            AuditAction.ERASURE_PLAN,
            subject_kind=plan.subject_kind,
            hashes=plan.value_hashes,
            result_count=len(plan.steps) if plan.is_ready else None,
            reference=plan.id,
        )
    return plan


def build_erasure_plan(plan_id: str) -> ErasurePlan | None:
    """Compute the steps of a plan left ``building`` (the task's work); a failure is kept."""
    plan = ErasurePlan.objects.filter(pk=plan_id, state=PlanState.BUILDING).first()
    if plan is None:
        return None
    try:
        kind = SubjectKind.objects.get(name=plan.subject_kind)
        identifiers = [Identifier(h["index"], h["kind"], h["field"]) for h in plan.value_hashes]
        steps, owners, summary = _plan_contents(kind, identifiers)
    except Exception as exc:
        log.exception("erasure plan %s could not be built", plan_id)
        ErasurePlan.objects.filter(pk=plan.pk).update(
            state=PlanState.FAILED, error=f"{type(exc).__name__}: {exc}"[:2000]
        )
        plan.refresh_from_db()
        return plan
    with transaction.atomic():
        _fill_plan(plan, steps, owners, summary)
    return plan


def _plan_contents(
    kind: SubjectKind, identifiers: list[Identifier]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    search = search_subject(kind, identifiers, None)
    steps = erasure.plan_steps(search, dataset_links(search))
    owners = erasure.owners_to_notify(steps)
    summary = {
        "steps": len(steps),
        "byOperation": {
            op: sum(1 for s in steps if s["operation"] == op)
            for op in (erasure.DELETE, erasure.ANONYMISE, erasure.RECOMPUTE)
        },
        "byExecution": {
            ex: sum(1 for s in steps if s["execution"] == ex)
            for ex in (erasure.SPARK, erasure.SPARK_DRY_RUN, erasure.MANUAL)
        },
    }
    return steps, owners, summary


def _fill_plan(
    plan: ErasurePlan,
    steps: list[dict[str, Any]],
    owners: list[dict[str, Any]],
    summary: dict[str, Any],
) -> None:
    plan.steps = as_json_safe(steps)
    plan.owners = owners
    plan.summary = summary
    plan.state = PlanState.READY
    plan.error = ""
    plan.save(update_fields=["steps", "owners", "summary", "state", "error"])


def _enqueue_plan(plan_id: str) -> None:
    dispatch.send("privacy.build_plan", [plan_id])


def require_ready(plan: ErasurePlan) -> None:
    """Refuse to export or run a plan whose steps are not computed (yet)."""
    if plan.state == PlanState.BUILDING:
        raise PrivacyError("The plan is still being built; try again shortly", "state", status=409)
    if plan.state == PlanState.FAILED:
        raise PrivacyError(f"The plan could not be built: {plan.error}", "state", status=409)


def log_export(user: Any, plan: ErasurePlan, fmt: str) -> None:
    log_audit(
        user,
        AuditAction.EXPORT,
        subject_kind=plan.subject_kind,
        hashes=plan.value_hashes,
        result_count=len(plan.steps),
        reference=plan.id,
        detail={"format": fmt},
    )


def _same_identifiers(plan: ErasurePlan, request: SubjectRequest) -> bool:
    def key(items: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
        return sorted((str(h["kind"]), str(h["field"]), h["hash"]) for h in items)

    return request.subject_kind.name == plan.subject_kind and key(request.hashes()) == key(
        plan.value_hashes
    )


def request_erasure_run(
    user: Any,
    plan: ErasurePlan,
    request: SubjectRequest,
    apply: bool,
    lineage_url: str = "",
) -> PrivacyRun:
    """Queue a dry run (count) or an apply (erase) of the plan's Spark steps; audited.

    The identifiers must be given again and match the plan's; apply needs a
    finished dry run of the same plan first.
    """
    require_ready(plan)
    if not _same_identifiers(plan, request):
        log_audit(
            user,
            AuditAction.ERASURE_APPLY if apply else AuditAction.ERASURE_DRY_RUN,
            outcome=AuditOutcome.REFUSED,
            subject_kind=plan.subject_kind,
            hashes=request.hashes(),
            detail={"plan": str(plan.id)},
        )
        raise PrivacyError(
            "The identifiers do not match this erasure plan", "identifiers", status=422
        )
    if apply and not plan.runs.filter(kind=RunKind.DRY_RUN, state=RunState.DONE).exists():
        raise PrivacyError("Run a dry run of this plan before applying it", "apply", status=409)
    wanted = (erasure.SPARK,) if apply else (erasure.SPARK, erasure.SPARK_DRY_RUN)
    targets = []
    for step in plan.steps:
        if step["operation"] == erasure.RECOMPUTE:
            continue
        runnable = step["execution"] in wanted and bool(step["keyColumns"])
        reason = "" if runnable else "; ".join(step["notes"][1:]) or "erased by the owners"
        targets.append(
            {
                "key": step["nodeId"],
                "namespace": step["namespace"],
                "name": step["name"],
                "relation": step["relation"],
                "order": step["order"],
                "location": step["location"],
                "format": step["format"],
                "operation": step["operation"],
                "anonymiseColumns": step["anonymiseColumns"],
                "columns": step["keyColumns"],
                "runnable": runnable,
                "reason": reason,
                "owners": step["owners"],
            }
        )
    kind = RunKind.APPLY if apply else RunKind.DRY_RUN
    with transaction.atomic():
        run = PrivacyRun.objects.create(
            kind=kind,
            plan=plan,
            subject_kind=plan.subject_kind,
            value_hashes=plan.value_hashes,
            created_by=user,
            created_by_name=_actor_name(user),
            progress_total=sum(1 for t in targets if t["runnable"]),
            targets=targets,
            results=_not_runnable(targets, "manual"),
            sealed=seal(request.values),
            lineage_url=lineage_url,
        )
        log_audit(
            user,
            AuditAction.ERASURE_APPLY if apply else AuditAction.ERASURE_DRY_RUN,
            outcome=AuditOutcome.REQUESTED,
            subject_kind=plan.subject_kind,
            hashes=plan.value_hashes,
            result_count=run.progress_total,
            reference=run.id,
            detail={"plan": str(plan.id)},
        )
        _enqueue(run)
    return run


# -- running a Spark job -----------------------------------------------------------------------


def _claim(run_id: str) -> PrivacyRun | None:
    """Move a pending run to running; None when another worker has it or it is finished."""
    now = timezone.now()
    claimed = PrivacyRun.objects.filter(pk=run_id, state=RunState.PENDING).update(
        state=RunState.RUNNING, started_at=now, heartbeat_at=now
    )
    return PrivacyRun.objects.get(pk=run_id) if claimed else None


@contextmanager
def _heartbeat(run_id: str) -> Iterator[None]:
    """Tell the sweep the run's worker is alive: its heartbeat renewed every
    PRIVACY_RUN_HEARTBEAT_SECONDS from a thread of its own (a Spark stage can run for long
    without a progress report) until the block ends."""
    stop = threading.Event()

    def beat() -> None:
        try:
            while not stop.wait(settings.PRIVACY_RUN_HEARTBEAT_SECONDS):
                try:
                    PrivacyRun.objects.filter(pk=run_id, state=RunState.RUNNING).update(
                        heartbeat_at=timezone.now()
                    )
                except DatabaseError as exc:  # tried again at the next beat
                    log.warning("privacy run %s: heartbeat missed: %s", run_id, exc)
        finally:
            connection.close()

    thread = threading.Thread(target=beat, name=f"privacy-heartbeat-{run_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


WORKER_STOPPED = "Its worker stopped"


def current_run(run: PrivacyRun) -> PrivacyRun:
    """``run`` as its page shows it: failed if its worker stopped (the sweep needs a beat
    scheduler, which the embedded set-up has not)."""
    if run.state == RunState.RUNNING and abandon_stale_runs(run):
        run.refresh_from_db()
    return run


def abandon_stale_runs(run: PrivacyRun | None = None) -> int:
    """Fail the running runs (or ``run``) not heard from for PRIVACY_RUN_STALE_SECONDS: their
    worker was killed or its host lost, and no other worker takes over a run it cannot tell
    is abandoned. Their sealed values are emptied; the audit and the metrics record the
    failure. Returns how many."""
    cutoff = timezone.now() - timedelta(seconds=settings.PRIVACY_RUN_STALE_SECONDS)
    # A run claimed by a worker of a release before heartbeats has none: judged by its start.
    stale = PrivacyRun.objects.filter(state=RunState.RUNNING).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, started_at__lt=cutoff)
    )
    if run is not None:
        stale = stale.filter(pk=run.pk)
    failed = 0
    for found in stale:
        heard = found.heartbeat_at or found.started_at
        assert heard is not None
        kind = "scan" if found.kind == RunKind.SCAN else "erasure"
        message = (
            f"{WORKER_STOPPED}: nothing heard from it since {heard:%Y-%m-%d %H:%M:%S} UTC. "
            f"Start the {kind} again."
        )
        # Only if no heartbeat came meanwhile: a live worker keeps its run.
        failed += _finish(
            found,
            RunState.FAILED,
            dict(found.results),
            message,
            by="sweep",
            heartbeat_at=found.heartbeat_at,
        )
    return failed


def _job_plan(run: PrivacyRun, runnable: list[dict[str, Any]], data_dir: Path) -> dict[str, Any]:
    datasets = [
        {
            "key": t["key"],
            "location": t["location"],
            "format": t["format"],
            "columns": t["columns"],
            **(
                {"operation": t["operation"], "anonymiseColumns": t["anonymiseColumns"]}
                if run.kind != RunKind.SCAN
                else {}
            ),
        }
        for t in runnable
    ]
    plan: dict[str, Any] = {
        "version": 1,
        "kind": "scan" if run.kind == RunKind.SCAN else "erasure",
        "runId": str(run.id),
        "datasets": datasets,
    }
    if run.kind != RunKind.SCAN:
        plan["apply"] = run.kind == RunKind.APPLY
        plan["lineage"] = {
            "url": run.lineage_url or None,
            "jobNamespace": "lineage-explorer",
            "jobName": "privacy_erasure",
            "spoolPath": str(data_dir / "privacy-lineage-spool.ndjson"),
        }
    return plan


def _job_token() -> tuple[Any, str]:
    """Return a fresh producer token for the erasure job's own lineage events."""
    user, created = User.objects.get_or_create(username=ERASURE_JOB_USER)
    if created:
        user.set_unusable_password()
        user.save()
        user.groups.add(Group.objects.get(name=PRODUCER))
    return catalog_actions.issue_token(user, name="erasure run")


@sensitive_variables()
def run_privacy_job(run_id: str) -> None:
    """Run one queued scan, dry run or apply on Spark; the seal is emptied however it ends."""
    run = _claim(run_id)
    if run is None:
        return
    results: dict[str, Any] = dict(run.results)
    values: list[str] = []
    token = None
    try:
        with _heartbeat(run_id):
            values = unseal(run.sealed)
            if run.kind == RunKind.SCAN and not run.targets:
                _scan_targets(run)
                results = dict(run.results)
            runnable = [t for t in run.targets if t["runnable"]]
            data_dir = Path(settings.DATA_DIR)
            data_dir.mkdir(parents=True, exist_ok=True)

            def progress(done: int, total: int, result: dict[str, Any]) -> None:
                results[result["key"]] = result
                PrivacyRun.objects.filter(pk=run_id, state=RunState.RUNNING).update(
                    progress_done=done, results=results
                )

            api_key = None
            if run.kind == RunKind.APPLY and run.lineage_url and lineage_transport_factory is None:
                token, api_key = _job_token()
            with tempfile.TemporaryDirectory(prefix="privacy-run-") as work:
                plan_path = Path(work) / "plan.json"
                result_path = Path(work) / "result.json"
                plan_path.write_text(
                    json.dumps(_job_plan(run, runnable, data_dir)), encoding="utf-8"
                )
                if runnable:
                    _execute(run, plan_path, result_path, values, progress, api_key)
                    outcome = json.loads(result_path.read_text(encoding="utf-8"))
                    for result in outcome["datasets"]:
                        results[result["key"]] = result
            failed = [k for k, r in results.items() if r.get("status") == "error"]
        _finish(run, RunState.FAILED if failed else RunState.DONE, results, "")
    except SealError as exc:
        _finish(run, RunState.FAILED, results, str(exc))
    except Exception as exc:  # the run is marked failed; the message is scrubbed of values
        from pipelines.privacy.common import describe_error

        log.warning("privacy run %s failed: %s", run_id, type(exc).__name__)
        _finish(run, RunState.FAILED, results, describe_error(exc, values))
    finally:
        PrivacyRun.objects.filter(pk=run_id).update(sealed="")
        if token is not None:
            catalog_actions.revoke_token(token)


@sensitive_variables()
def _execute(
    run: PrivacyRun,
    plan_path: Path,
    result_path: Path,
    values: list[str],
    progress: Callable[[int, int, dict[str, Any]], None],
    api_key: str | None,
) -> None:
    """Run the Spark job in this process on the plan file, writing the result file."""
    from pipelines.privacy.common import load_plan, write_result
    from pipelines.spark import get_spark

    spark = get_spark(f"privacy-{run.kind}", master=settings.SPARK_MASTER)
    if run.kind == RunKind.SCAN:
        from pipelines.privacy.scan import run_scan

        write_result(result_path, run_scan(spark, load_plan(plan_path, "scan"), values, progress))
        return
    from pipelines.privacy.erase import run_erasure

    transport = lineage_transport_factory() if lineage_transport_factory else None
    result = run_erasure(
        spark,
        load_plan(plan_path, "erasure"),
        values,
        progress,
        api_key=api_key,
        lineage_transport=transport,
    )
    write_result(result_path, result)


def _finish(
    run: PrivacyRun,
    state: str,
    results: dict[str, Any],
    error: str,
    by: str = "worker",
    **unless_changed: Any,
) -> bool:
    """End a running run (once: False when it had ended, or ``unless_changed`` no longer
    holds), then count it and audit it."""
    changes: dict[str, Any] = {
        "state": state,
        "finished_at": timezone.now(),
        "results": results,
        "error": error,
        "sealed": "",
    }
    if state == RunState.DONE:
        changes["progress_done"] = run.progress_total
    ended = PrivacyRun.objects.filter(pk=run.pk, state=RunState.RUNNING, **unless_changed)
    if not ended.update(**changes):
        # The sweep gave the run up while its worker was still at it: the worker's real
        # outcome replaces the sweep's guess (and is audited too); anything else stands.
        swept = PrivacyRun.objects.filter(
            pk=run.pk, state=RunState.FAILED, error__startswith=WORKER_STOPPED
        )
        if by != "worker" or not swept.update(**changes):
            log.warning("privacy run %s had ended already: its %s is not recorded", run.pk, state)
            return False
    metrics.SPARK_JOBS.labels(run.kind, state).inc()
    if run.started_at is not None:
        ran = (changes["finished_at"] - run.started_at).total_seconds()
        metrics.SPARK_SECONDS.labels(run.kind).observe(max(ran, 0.0))
    action = {
        RunKind.SCAN: AuditAction.SCAN,
        RunKind.DRY_RUN: AuditAction.ERASURE_DRY_RUN,
        RunKind.APPLY: AuditAction.ERASURE_APPLY,
    }[RunKind(run.kind)]
    found = sum(
        int(r.get("rowsFound") or r.get("rowsMatched") or 0)
        for r in results.values()
        if isinstance(r, dict)
    )
    log_audit(
        run.created_by,
        action,
        actor_name=run.created_by_name,
        outcome=AuditOutcome.OK if state == RunState.DONE else AuditOutcome.FAILED,
        subject_kind=run.subject_kind,
        hashes=run.value_hashes,
        as_of=run.as_of,
        result_count=found,
        reference=run.id,
        detail={"by": by, "error": error} if error else {"by": by},
    )
    return True
