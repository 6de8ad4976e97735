"""Reading OpenLineage event files: JSON (one event or a list), NDJSON, each optionally gzipped."""

from __future__ import annotations

import gzip
import heapq
import io
import json
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from catalog.params import instant_from_iso
from ingest.events import EventError, loads

# Events sorted in memory at a time by ``in_event_time_order`` (about 3 KB each).
SORT_CHUNK = 50_000


@dataclass
class FileItem:
    """One event read from a file (``value``), or why a line could not be read (``error``)."""

    path: str
    line: int
    value: Any = None
    error: str = ""


def open_text(path: Path) -> IO[str]:
    """The file as text, gunzipped when it starts with the gzip magic bytes."""
    with path.open("rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="strict")
    return path.open(encoding="utf-8", errors="strict")


def read_events(path: Path) -> Iterator[FileItem]:
    """Events of one file, streamed for NDJSON; a JSON document may hold one event or a list.

    The format is told by content: a first line that is a complete JSON
    object means NDJSON, anything else is read as one JSON document.
    """
    name = str(path)
    try:
        with open_text(path) as handle:
            first = handle.readline()
            if _is_object_line(first):
                yield from _ndjson(name, first, handle)
                return
            text = first + handle.read()
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile) as exc:
        yield FileItem(name, 0, error=f"cannot read: {exc}")
        return
    try:
        document = loads(text)
    except EventError as exc:
        yield FileItem(name, 1, error=f"not JSON: {exc}")
        return
    items = document if isinstance(document, list) else [document]
    for index, value in enumerate(items, 1):
        yield FileItem(name, index, value=value)


def _is_object_line(line: str) -> bool:
    stripped = line.strip()
    if not stripped.startswith("{"):
        return False
    try:
        return isinstance(json.loads(stripped), dict)
    except ValueError:
        return False


def _ndjson(name: str, first: str, handle: IO[str]) -> Iterator[FileItem]:
    number = 0
    lines = iter(handle)
    current: str | None = first
    while current is not None:
        number += 1
        text = current.strip()
        if text:
            try:
                yield FileItem(name, number, value=loads(text))
            except EventError as exc:
                yield FileItem(name, number, error=f"not JSON: {exc}")
        try:
            current = next(lines)
        except (StopIteration, UnicodeDecodeError, EOFError, gzip.BadGzipFile) as exc:
            if not isinstance(exc, StopIteration):
                yield FileItem(name, number + 1, error=f"cannot read: {exc}")
            current = None


def _time_key(item: FileItem) -> str | None:
    """The item's eventTime as sortable UTC text; None when it has none that parses."""
    value = item.value
    text = value.get("eventTime") if isinstance(value, dict) else None
    if not isinstance(text, str):
        return None
    try:
        return instant_from_iso(text).strftime("%Y-%m-%dT%H:%M:%S.%f")
    except ValueError:
        return None


def in_event_time_order(
    items: Iterable[FileItem], chunk: int = SORT_CHUNK, spill: Path | None = None
) -> Iterator[FileItem]:
    """The items by eventTime (ties in the order read), in bounded memory: ``chunk`` items
    are sorted at a time and spilled to files in ``spill`` (default: the system's temporary
    folder), which are then merged. Unreadable items, and events without a valid eventTime
    (their parser says what is wrong), come first, as read."""
    with tempfile.TemporaryDirectory(prefix="event-sort-", dir=spill) as folder:
        runs: list[Path] = []
        held: list[tuple[str, int, FileItem]] = []
        for number, item in enumerate(items):
            key = None if item.error else _time_key(item)
            if key is None:
                yield item
                continue
            held.append((key, number, item))
            if len(held) >= chunk:
                runs.append(_spill(held, Path(folder) / f"run-{len(runs)}.ndjson"))
                held = []
        held.sort(key=lambda entry: entry[:2])
        if not runs:
            yield from (item for _, _, item in held)
            return
        merged = heapq.merge(
            *(_read_run(path) for path in runs),
            iter(held),
            key=lambda entry: (entry[0], entry[1]),
        )
        yield from (item for _, _, item in merged)


def _spill(held: list[tuple[str, int, FileItem]], path: Path) -> Path:
    held.sort(key=lambda entry: entry[:2])
    with path.open("w", encoding="utf-8") as handle:
        for key, number, item in held:
            handle.write(json.dumps([key, number, item.path, item.line, item.value]) + "\n")
    return path


def _read_run(path: Path) -> Iterator[tuple[str, int, FileItem]]:
    with path.open(encoding="utf-8") as handle:
        for text in handle:
            key, number, name, line, value = json.loads(text)
            yield key, number, FileItem(name, line, value=value)
