"""Writes the node store's base: every dataset's and job's lineage data in the host's
document file (graph/docfile.py), which every server process of the host maps.

A pass reads the change log's revision, then writes the file for it:

- a **full pass** renders every dataset and job (about 30 s at 100,000 datasets). It
  runs at deploy (``render_node_documents``; ``generate_lineage`` runs one after a
  load), when the host has no file of this release, and when the change log can no
  longer say what changed since the file (a reset, a renamed owner or tag, pruned
  history, or more changed nodes than a process reads);
- otherwise a pass renders only the nodes changed since the file was written, and takes
  every other node's document from it. Celery beat runs one every
  ``GRAPH_DOCUMENTS_INTERVAL`` seconds once more than ``REWRITE_AFTER`` nodes changed, so
  the overlay each process renders for itself (graph/nodecache.py) stays small.

The new file replaces the old at once; processes map it at their next look at the
change log. Nothing is stored in the database.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zstandard
from django.conf import settings
from django.db import connection

from catalog.models import Dataset
from graph import directory, docfile
from graph import revision as rev
from graph.details import info_json
from graph.models import Job
from graph.nodecache import DATASET, JOB, SYNC_LIMIT, Entry, node_changes
from graph.nodedata import render_datasets, render_jobs

log = logging.getLogger(__name__)

# The scheduled pass writes the file again once more nodes than this changed since it.
REWRITE_AFTER = 2_000
BATCH = 1_000


@dataclass(frozen=True, slots=True)
class PassResult:
    full: bool = False
    revision: int = 0
    # Documents rendered by this pass, and those taken unchanged from the file before.
    datasets: int = 0
    jobs: int = 0
    copied: int = 0
    seconds: float = 0.0
    # Why nothing was written, when nothing was.
    skipped: str = ""


def render_documents(full: bool = False, batch: int = BATCH, at_least: int = 1) -> PassResult:
    """Write the host's document file for the current revision: render every node with
    ``full`` (or when the file before cannot be used), else only those changed since the
    file, when at least ``at_least`` did."""
    if connection.vendor != "postgresql":
        return PassResult(skipped="node documents are shared only on PostgreSQL")
    if not settings.GRAPH_SHARED_NODE_DATA:
        return PassResult(skipped="GRAPH_SHARED_NODE_DATA is off")
    started = time.perf_counter()
    path = docfile.file_path()
    # The file is the host's own: one pass at a time on each host.
    with docfile.locked(path, wait=False) as held:
        if not held:
            return PassResult(skipped="another pass is running")
        current = rev.current()
        previous = None if full else docfile.readable(path)
        changed = None
        if previous is not None:
            # Past the most a process reads of the change log, it renders everything again.
            changed = node_changes(previous.revision, current, SYNC_LIMIT)
        if previous is not None and changed is not None:
            if len(changed) < at_least:
                return PassResult(
                    revision=previous.revision.value,
                    skipped=f"{len(changed):,} node{'' if len(changed) == 1 else 's'} changed since the file was written",
                )
        else:
            previous = changed = None
        try:
            counts = _write(path, current, previous, changed or {}, batch)
        except docfile.CorruptFile as exc:
            log.error("node document file before not used: %s", exc)
            previous = None
            counts = _write(path, current, None, {}, batch)
        docfile.current()  # this process, too, maps the new file now
        seconds = time.perf_counter() - started
        result = PassResult(previous is None, current.value, *counts, seconds=round(seconds, 3))
        log.info(
            "node document file at revision %d: %d dataset and %d job documents rendered, "
            "%d taken from the file before, in %.1f s",
            current.value,
            result.datasets,
            result.jobs,
            result.copied,
            seconds,
        )
        return result


def _write(
    path: Path,
    current: rev.Revision,
    previous: docfile.DocFile | None,
    changed: dict[tuple[str, int], int],
    batch: int,
) -> tuple[int, int, int]:
    """Write the file for ``current`` to ``path`` (replaced at once, never seen
    half-written); gives (datasets rendered, jobs rendered, documents copied)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".writing-", dir=path.parent))
    try:
        sections: dict[str, np.ndarray | Path] = {}
        rendered = {DATASET: 0, JOB: 0}
        copied = 0
        for kind, model, render in (
            (DATASET, Dataset, render_datasets),
            (JOB, Job, render_jobs),
        ):
            all_pks = list(model.objects.order_by("pk").values_list("pk", flat=True))
            files = {column: scratch / f"{kind}.{column}" for column in docfile.COLUMNS}
            written: list[int] = []
            sizes: dict[str, list[int]] = {column: [] for column in docfile.COLUMNS}
            handles = {column: open(file, "wb") for column, file in files.items()}  # noqa: SIM115
            # The file before's dictionaries, so its documents are copied as they are; a full
            # pass trains new ones on its first batch.
            dictionaries = (
                {}
                if previous is None
                else {c: previous.dictionaries[(kind, c)] for c in docfile.COLUMNS}
            )
            packers = None
            try:
                for start in range(0, len(all_pks), batch):
                    chunk = all_pks[start : start + batch]
                    documents = _copied(previous, kind, chunk, changed)
                    copied += len(documents)
                    fresh = _columns(render([pk for pk in chunk if pk not in documents]))
                    rendered[kind] += len(fresh)
                    if packers is None:
                        if not dictionaries:
                            dictionaries = _trained(fresh)
                        packers = {c: docfile.compressor(d) for c, d in dictionaries.items()}
                    documents.update(_packed(fresh, packers))
                    for pk in sorted(documents):
                        written.append(pk)
                        for column, text in zip(docfile.COLUMNS, documents[pk], strict=True):
                            handles[column].write(text)
                            sizes[column].append(len(text))
            finally:
                for handle in handles.values():
                    handle.close()
            sections[f"{kind}.pks"] = np.asarray(written, dtype=np.int64)
            for column in docfile.COLUMNS:
                offsets = np.zeros(len(written) + 1, dtype=np.int64)
                np.cumsum(sizes[column], out=offsets[1:])
                sections[f"{kind}.{column}.at"] = offsets
                sections[f"{kind}.{column}"] = files[column]
                dictionary = np.frombuffer(dictionaries.get(column, b""), dtype=np.uint8)
                sections[docfile.DICTIONARY.format(kind=kind, column=column)] = dictionary
        # The node directory, read now (at ``current`` or later), is part of the base.
        arrays, meta = directory.build().arrays()
        sections.update(arrays)
        target = scratch / "file"
        with open(target, "wb") as out:
            docfile.assemble(out, current, sections, {"directory": meta, "kinds": [DATASET, JOB]})
            out.flush()
            os.fsync(out.fileno())
        os.replace(target, path)
        docfile.sweep(path, ".docs")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return rendered[DATASET], rendered[JOB], copied


Columns = tuple[bytes, ...]


def _copied(
    previous: docfile.DocFile | None,
    kind: str,
    pks: list[int],
    changed: dict[tuple[str, int], int],
) -> dict[int, Columns]:
    """Every column of the documents of ``previous`` for these nodes that did not change
    since it was written."""
    unchanged = [pk for pk in pks if (kind, pk) not in changed]  # all changed after it
    held = None if previous is None else previous.held(kind, unchanged)
    if previous is None or held is None:
        return {}
    part, found, at = held
    columns = []
    for column in docfile.COLUMNS:
        previous.slices(part, at, column)  # damaged bytes are not carried on (CorruptFile)
        columns.append(previous.slices(part, at, column, packed=True))
    return dict(zip(found, zip(*columns, strict=True), strict=True))


def _trained(documents: dict[int, Columns]) -> dict[str, bytes]:
    """A dictionary for each column, trained on these documents."""
    texts = list(zip(*documents.values(), strict=True)) or [() for _ in docfile.COLUMNS]
    return {c: docfile.train(list(t)) for c, t in zip(docfile.COLUMNS, texts, strict=True)}


def _packed(
    documents: dict[int, Columns], packers: dict[str, zstandard.ZstdCompressor]
) -> dict[int, Columns]:
    """The documents with their columns compressed (an empty text stays empty)."""
    pack = [packers[column].compress for column in docfile.COLUMNS]
    return {
        pk: tuple(p(text) if text else text for p, text in zip(pack, texts, strict=True))
        for pk, texts in documents.items()
    }


def _columns(entries: dict[int, Entry]) -> dict[int, Columns]:
    """Every column (graph.docfile.COLUMNS) of freshly rendered documents."""
    return {pk: (e.data.encode(), info_json(e.info).encode()) for pk, e in entries.items()}
