"""Writes for SQL query logs: accept an upload, process it into lineage, record reads and problems.

A log is stored (or, for the command, read in place), then processed by one
task: records are streamed, parsed (ingest.sql), and their OpenLineage
events go through the same outbox and normaliser as any producer's, so SQL
lineage lands exactly like OpenLineage lineage. Re-processing a log is
harmless: run ids are stable, the outbox stores each event once, and reads
are counted per upload. So a log that read a table with ``*`` before the
catalog knew its columns is processed again, once it does, by a scheduled
task (``retake_logs``): lineage may arrive in any order.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q
from django.db.models.functions import Coalesce, Least
from django.utils import timezone

from catalog import naming
from catalog.models import (
    NEWEST_VERSION_FIRST,
    PERSONAL_DATA,
    Dataset,
    DatasetField,
    DatasetVersion,
)
from catalog.pgsql import fetch_prepared
from catalog.queries import field_existed_sql
from ingest import actions
from ingest.events import ParsedEvent
from ingest.models import (
    DatasetRead,
    SqlLogColumnsUnknown,
    SqlLogFormat,
    SqlLogProblem,
    SqlLogState,
    SqlLogUpload,
)
from ingest.sql import guards
from ingest.sql.dialects import UnknownDialectError, resolve_dialect
from ingest.sql.events import HIDDEN_FACET, ReadRecord
from ingest.sql.folding import DEFAULT_FOLD_PATTERNS
from ingest.sql.parser import DEFAULT_SCRATCH_PATTERNS, SqlLineageParser
from ingest.sql.pipeline import Problem, SqlLogProcessor
from ingest.sql.readers import FORMATS, LogFormatError, read_log
from lineage_site import dispatch

logger = logging.getLogger(__name__)

EVENT_SOURCE = "sql-log"
DEFAULT_MAX_UPLOAD_BYTES = 2 * 1024**3
MAX_STORED_PROBLEMS = 10_000
_EVENT_BATCH = 5000
_PROGRESS_EVERY_SECONDS = 1.0
_STALE_AFTER = timedelta(hours=1)


class SqlLogInputError(ValueError):
    """A request to ingest a log that cannot be accepted; ``field`` names the culprit."""

    def __init__(self, message: str, field: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.status = status


def max_upload_bytes() -> int:
    return int(getattr(settings, "SQL_LOG_MAX_UPLOAD_BYTES", DEFAULT_MAX_UPLOAD_BYTES))


def upload_dir() -> Path:
    return Path(settings.DATA_DIR) / "sql_logs"


def check_options(namespace: str, dialect: str, fmt: str) -> str:
    """Validate the options of a log; return the canonical dialect name."""
    if not namespace.strip():
        raise SqlLogInputError("namespace is required", "namespace")
    if len(namespace) > 1024:
        raise SqlLogInputError("namespace is longer than 1024 characters", "namespace")
    if fmt not in FORMATS:
        raise SqlLogInputError(f"format must be one of {', '.join(FORMATS)}", "format")
    try:
        return resolve_dialect(dialect).name
    except UnknownDialectError as exc:
        raise SqlLogInputError(str(exc), "dialect") from exc


def create_upload(
    *,
    namespace: str,
    dialect: str,
    fmt: str,
    stream: IO[bytes] | None = None,
    path: Path | None = None,
    original_name: str = "",
    database: str = "",
    schema: str = "",
    user: Any = None,
    source: str = "upload",
    enqueue: bool = True,
) -> SqlLogUpload:
    """Accept a log (a stream to store, or a path to read in place) and queue its processing."""
    canonical = check_options(namespace, dialect, fmt)
    if stream is not None:
        target = _store(stream)
        size = target.stat().st_size
    elif path is not None:
        if not path.is_file():
            raise SqlLogInputError(f"no such file: {path}", "path")
        target, size = path, path.stat().st_size
    else:
        raise SqlLogInputError("a file is required", "file")
    with transaction.atomic():
        upload = SqlLogUpload.objects.create(
            namespace=namespace.strip(),
            dialect=canonical,
            format=SqlLogFormat(fmt),
            default_database=database.strip(),
            default_schema=schema.strip(),
            path=str(target),
            original_name=(original_name or target.name)[:512],
            size_bytes=size,
            source=source[:16],
            uploaded_by=user if getattr(user, "is_authenticated", False) else None,
        )
        if enqueue:
            upload_id = upload.pk
            transaction.on_commit(lambda: _enqueue(upload_id))
    return upload


def _store(stream: IO[bytes]) -> Path:
    """Copy an uploaded stream to the upload folder, refusing more than the limit."""
    folder = upload_dir()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{uuid.uuid4().hex}.log"
    limit = max_upload_bytes()
    written = 0
    try:
        with target.open("wb") as out:
            while chunk := stream.read(1024 * 1024):
                written += len(chunk)
                if written > limit:
                    raise SqlLogInputError(
                        f"the log is larger than the {limit:,}-byte limit", "file", 413
                    )
                out.write(chunk)
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    if written == 0:
        target.unlink(missing_ok=True)
        raise SqlLogInputError("the log is empty", "file")
    return target


def _enqueue(upload_id: int) -> None:
    try:
        dispatch.send("ingest.tasks.process_sql_log", [upload_id])
    except Exception:  # broker errors vary by transport; the upload waits, visibly pending
        logger.warning("could not queue SQL log %s", upload_id, exc_info=True)


def parser_options() -> dict[str, Any]:
    """Parser knobs from settings (SQL_LOG_*), each with the parser's own default."""
    return {
        "fold_patterns": tuple(getattr(settings, "SQL_LOG_FOLD_PATTERNS", DEFAULT_FOLD_PATTERNS)),
        "scratch_patterns": tuple(
            getattr(settings, "SQL_LOG_SCRATCH_PATTERNS", DEFAULT_SCRATCH_PATTERNS)
        ),
        "max_statement_chars": int(
            getattr(settings, "SQL_LOG_MAX_STATEMENT_CHARS", guards.DEFAULT_MAX_STATEMENT_CHARS)
        ),
        "max_nesting": int(getattr(settings, "SQL_LOG_MAX_NESTING", guards.DEFAULT_MAX_NESTING)),
    }


def catalog_columns(
    namespace: str, at: datetime, since: datetime
) -> Callable[[str], Sequence[str] | None]:
    """A schema provider: the columns of a dataset in ``namespace``, from the catalog (both
    names as any channel spells them: canonical).

    They are the columns it had at ``at`` (when the log was uploaded: a log taken again
    later does not read columns added since), else its current columns, else, for a table
    that has none now but lost them at ``since`` or later (dropped, or renamed away,
    perhaps by the very log that read it), the columns it had last: those that left it
    together, last. A table that lost them before is one the log cannot have read.

    Columns are in the table's order (a positional ``INSERT`` maps by it): the newest, or,
    for the columns it had at ``at`` when its schema changed since, the order then.
    """

    moment, earliest = (connection.ops.adapt_datetimefield_value(t) for t in (at, since))
    # Plain rows: compiling the queryset cost more than running it (a query per table read).
    query = (
        "SELECT f.name, f.removed_at IS NULL, "
        f"CASE WHEN {field_existed_sql('f')} THEN 1 ELSE 0 END, "
        "CASE WHEN f.removed_at >= %s AND f.removed_at = (SELECT max(o.removed_at) "
        "FROM catalog_datasetfield o WHERE o.dataset_id = f.dataset_id) THEN 1 ELSE 0 END, "
        "d.id, CASE WHEN EXISTS (SELECT 1 FROM catalog_datasetversion v "
        "WHERE v.dataset_id = d.id AND v.created_at > %s) THEN 1 ELSE 0 END "
        "FROM catalog_datasetfield f JOIN catalog_dataset d ON d.id = f.dataset_id "
        "JOIN catalog_namespace n ON n.id = d.namespace_id "
        "WHERE n.name = %s AND d.name = %s ORDER BY f.ordinal, f.id"
    )

    def columns(name: str) -> Sequence[str] | None:
        params = [*[moment] * 4, earliest, moment, *naming.canonical(namespace, name)]
        found = fetch_prepared(query, params)
        then = [column for column, _, existed, *_ in found if existed]
        if then and found[0][5]:
            then = _in_order_then(found[0][4], at, then)
        current = [column for column, now, *_ in found if now]
        last = [column for column, _, _, last, *_ in found if last]
        return then or current or last or None

    return columns


def _in_order_then(dataset_id: int, at: datetime, names: list[str]) -> list[str]:
    """``names`` in the order of the dataset's schema version in force at ``at``; those it
    does not list keep their places after the ones it does."""
    listed = (
        DatasetVersion.objects.filter(dataset_id=dataset_id, created_at__lte=at)
        .order_by(*NEWEST_VERSION_FIRST)
        .values_list("fields", flat=True)
        .first()
    )
    place = {field.get("name"): i for i, field in enumerate(listed or ())}
    return sorted(names, key=lambda n: place.get(n, len(place)))


def columns_lost_since(upload: SqlLogUpload) -> datetime:
    """From when a table that lost its columns may have lost them after this log read it:
    its earliest record's time once a pass has read them all, else its upload's."""
    first = upload.first_record_at
    return upload.created_at if first is None else min(first, upload.created_at)


def claim(upload_id: int, now: datetime | None = None) -> bool:
    """Take an upload for processing: pending (or left processing by a dead worker)."""
    now = now or timezone.now()
    stale = Q(state=SqlLogState.PROCESSING, started_at__lt=now - _STALE_AFTER)
    return bool(
        SqlLogUpload.objects.filter(Q(state=SqlLogState.PENDING) | stale, pk=upload_id).update(
            state=SqlLogState.PROCESSING, started_at=now, error=""
        )
    )


def process_upload(
    upload_id: int, progress: Callable[[int], None] | None = None, force: bool = False
) -> SqlLogUpload | None:
    """Turn a claimed upload into lineage; returns it finished (done or failed).

    ``progress`` is called with the number of bytes read since its last call.
    Returns None when the upload is not there or someone else holds it.
    """
    if force:
        SqlLogUpload.objects.filter(pk=upload_id).update(state=SqlLogState.PENDING, started_at=None)
    if not claim(upload_id):
        return SqlLogUpload.objects.filter(pk=upload_id).first()
    upload = SqlLogUpload.objects.get(pk=upload_id)
    _forget_previous_results(upload)
    run = _Run(upload, progress)
    try:
        run.process()
    except (LogFormatError, OSError) as exc:
        run.fail(str(exc))
    except Exception as exc:
        logger.exception("SQL log %s failed", upload_id)
        run.fail(f"unexpected error: {exc}")
    else:
        run.finish()
    upload.refresh_from_db()
    return upload


def _forget_previous_results(upload: SqlLogUpload) -> None:
    """A re-processed upload keeps only its latest problems and read counts."""
    SqlLogProblem.objects.filter(upload=upload).delete()
    DatasetRead.objects.filter(upload=upload).delete()
    SqlLogColumnsUnknown.objects.filter(upload=upload).delete()


def retake_logs() -> list[int]:
    """Queue again the logs that read a table before the catalog knew its columns, now that
    it does: the column lineage through it is taken again (run ids are stable and the
    outbox stores each event once, so only what changed lands). Returns the logs queued.

    A log whose file is gone, or changed since it was read, cannot be read again: it says
    so among its problems.
    """
    # What catalog_columns answers with: current columns, or columns lost since the log's
    # first record (those it had when uploaded are among them).
    fields = DatasetField.objects.filter(
        dataset__namespace__name=OuterRef("namespace"), dataset__name=OuterRef("name")
    )
    since = Least(
        Coalesce(OuterRef("upload__first_record_at"), OuterRef("upload__created_at")),
        OuterRef("upload__created_at"),
    )
    known = fields.filter(Q(removed_at__isnull=True) | Q(removed_at__gte=since))
    # A log read before passes noted its first record (migration 0016) is taken once more
    # if the table had columns at all: that pass notes it, and the next decides as above.
    unnoted = Q(upload__first_record_at__isnull=True) & Exists(fields)
    ready = SqlLogColumnsUnknown.objects.filter(
        Q(Exists(known)) | unnoted, upload__state=SqlLogState.DONE
    )
    queued = []
    for upload_id in sorted(set(ready.values_list("upload_id", flat=True))):
        with transaction.atomic():
            upload = (
                SqlLogUpload.objects.select_for_update()
                .filter(pk=upload_id, state=SqlLogState.DONE)
                .first()
            )
            if upload is None:
                continue
            problem = _unreadable_again(upload)
            if problem:
                SqlLogColumnsUnknown.objects.filter(upload=upload).delete()
                SqlLogProblem.objects.create(
                    upload=upload,
                    line=0,
                    field="file",
                    message="the catalog now knows the columns of tables this log read "
                    f"before it did, but {problem}: its column lineage through them cannot "
                    "be taken again",
                )
                continue
            SqlLogUpload.objects.filter(pk=upload_id).update(
                state=SqlLogState.PENDING, started_at=None
            )
            transaction.on_commit(partial(_enqueue, upload_id))
        queued.append(upload_id)
    return queued


def _unreadable_again(upload: SqlLogUpload) -> str:
    """Why the log cannot be read again as it was ("" when it can): a log read in place
    may have been removed, or rotated and written anew."""
    try:
        stat = Path(upload.path).stat()
    except OSError:
        return "the log is gone"
    read = upload.finished_at.timestamp() if upload.finished_at else None
    if stat.st_size != upload.size_bytes or (read is not None and stat.st_mtime > read):
        return "the log changed since it was read"
    return ""


class _Run:
    """The state of processing one upload."""

    def __init__(self, upload: SqlLogUpload, progress: Callable[[int], None] | None) -> None:
        self.upload = upload
        self.progress = progress
        self.processor = SqlLogProcessor(
            upload.namespace,
            upload.dialect,
            database=upload.default_database or None,
            schema=upload.default_schema or None,
            parser=SqlLineageParser(
                upload.dialect,
                schema_provider=catalog_columns(
                    upload.namespace, upload.created_at, columns_lost_since(upload)
                ),
                **parser_options(),
            ),
            default_time=upload.created_at,
        )
        self.events: list[ParsedEvent] = []
        self.hidden: set[str] = set()
        self.columns_unknown: set[tuple[str, str]] = set()
        self.problems: list[SqlLogProblem] = []
        self.stored_problems = 0
        self.reads: dict[tuple[str, str, str, str, Any], list[Any]] = {}
        self.bytes_read = 0
        self.rejected = 0
        self._last_report = time.monotonic()
        self._reported_bytes = 0

    def process(self) -> None:
        with Path(self.upload.path).open("rb") as stream:
            for processed in self.processor.process(
                read_log(stream, self.upload.format, received=self.upload.created_at)
            ):
                if processed.parsed:
                    self.events.extend(processed.parsed)
                    self._note_hidden(processed.parsed)
                for read in processed.reads:
                    self._count_read(read)
                for problem in processed.problems:
                    self._add_problem(problem)
                self.columns_unknown |= processed.columns_unknown
                if len(self.events) >= _EVENT_BATCH:
                    self._flush_events()
                if time.monotonic() - self._last_report >= _PROGRESS_EVERY_SECONDS:
                    self._report(stream.tell())
            self._flush_events()
            self._flush_problems()
            self._flush_reads()
            self._report(stream.tell())
        SqlLogColumnsUnknown.objects.bulk_create(
            SqlLogColumnsUnknown(upload=self.upload, namespace=ns, name=name)
            for ns, name in sorted({naming.canonical(*key) for key in self.columns_unknown})
        )

    def _note_hidden(self, events: Iterable[ParsedEvent]) -> None:
        for event in events:
            for dataset in event.datasets:
                if HIDDEN_FACET in dataset.facets:
                    self.hidden.add(dataset.name)

    def _flush_events(self) -> None:
        if not self.events:
            return
        report = actions.ingest_event_dicts(
            self.events, source=EVENT_SOURCE, batch_size=_EVENT_BATCH
        )
        for rejected in report.rejected:
            self.rejected += 1
            self._add_problem(Problem(0, f"event rejected: {rejected.error}", rejected.field or ""))
        self.events = []
        if self.hidden:
            # Temporary / scratch tables lineage could not follow through: hide them, but
            # for those that hold personal data (compliance answers leave hidden ones out).
            Dataset.objects.filter(
                namespace__name=naming.canonical_namespace(self.upload.namespace),
                name__in=[naming.canonical(self.upload.namespace, n)[1] for n in self.hidden],
                is_hidden=False,
            ).exclude(
                pk__in=DatasetField.objects.filter(PERSONAL_DATA).values("dataset_id")
            ).update(is_hidden=True)
        self._flush_problems()

    def _add_problem(self, problem: Problem) -> None:
        if self.stored_problems + len(self.problems) >= MAX_STORED_PROBLEMS:
            return
        self.problems.append(
            SqlLogProblem(
                upload=self.upload,
                line=problem.line,
                statement=problem.statement,
                field=problem.field[:64],
                message=problem.message[:2000],
                excerpt=problem.excerpt[:500],
            )
        )

    def _flush_problems(self) -> None:
        if self.problems:
            SqlLogProblem.objects.bulk_create(self.problems, batch_size=500)
            self.stored_problems += len(self.problems)
            self.problems = []

    def _count_read(self, read: ReadRecord) -> None:
        day = read.at.date()
        for dataset in read.datasets:
            namespace, name = naming.canonical(*dataset)
            key = (namespace, name, read.user[:255], read.fingerprint, day)
            found = self.reads.get(key)
            if found is None:
                self.reads[key] = [1, read.at, read.at]
            else:
                found[0] += 1
                found[1] = min(found[1], read.at)
                found[2] = max(found[2], read.at)
        if len(self.reads) >= 20_000:
            self._flush_reads()

    def _flush_reads(self) -> None:
        if not self.reads:
            return
        rows = []
        for (namespace, name, reader, fingerprint, day), (count, first, last) in self.reads.items():
            rows.append(
                DatasetRead(
                    upload=self.upload,
                    namespace=namespace,
                    name=name,
                    reader=reader,
                    fingerprint=fingerprint,
                    day=day,
                    count=count,
                    first_at=first,
                    last_at=last,
                )
            )
        keys = ["upload", "namespace", "name", "reader", "fingerprint", "day"]
        existing = {
            tuple(getattr(r, k) if k != "upload" else r.upload_id for k in keys): r
            for r in DatasetRead.objects.filter(
                upload=self.upload, name__in={row.name for row in rows}
            )
        }
        fresh: list[DatasetRead] = []
        changed: list[DatasetRead] = []
        for row in rows:
            key = (self.upload.pk, row.namespace, row.name, row.reader, row.fingerprint, row.day)
            old = existing.get(key)
            if old is None:
                fresh.append(row)
            else:
                old.count += row.count
                old.first_at = min(old.first_at, row.first_at)
                old.last_at = max(old.last_at, row.last_at)
                changed.append(old)
        with transaction.atomic():
            DatasetRead.objects.bulk_create(fresh, batch_size=500)
            DatasetRead.objects.bulk_update(
                changed, ["count", "first_at", "last_at"], batch_size=500
            )
        self.reads = {}

    def _report(self, position: int) -> None:
        if self.progress is not None and position > self._reported_bytes:
            self.progress(position - self._reported_bytes)
        self._reported_bytes = max(self._reported_bytes, position)
        self._last_report = time.monotonic()
        stats = self.processor.stats
        SqlLogUpload.objects.filter(pk=self.upload.pk).update(
            bytes_read=position,
            records=stats.records,
            statements=stats.statements,
            events=stats.events,
            reads=stats.reads,
            skipped_failed=stats.skipped_failed,
            line_errors=stats.line_errors,
            parse_errors=stats.parse_errors + self.rejected,
            cache_hits=stats.cache_hits,
        )

    def finish(self) -> None:
        SqlLogUpload.objects.filter(pk=self.upload.pk).update(
            state=SqlLogState.DONE,
            finished_at=timezone.now(),
            first_record_at=self.processor.earliest,
        )

    def fail(self, message: str) -> None:
        SqlLogUpload.objects.filter(pk=self.upload.pk).update(
            state=SqlLogState.FAILED, finished_at=timezone.now(), error=message[:4000]
        )


__all__ = [
    "EVENT_SOURCE",
    "SqlLogInputError",
    "catalog_columns",
    "check_options",
    "create_upload",
    "parser_options",
    "process_upload",
    "retake_logs",
]
