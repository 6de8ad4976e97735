"""Reading OpenLineage event files: JSON (one event or a list), NDJSON, each optionally gzipped."""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ingest.events import EventError, loads


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
