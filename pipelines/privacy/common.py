"""Shared pieces of the privacy jobs: plan and result files, reading datasets, matching values.

A plan file names the datasets and the columns to match, never the values:
those arrive in memory (``values`` argument) or, on the command line, as a
JSON array on stdin. Result files hold counts only. Error messages that leave
a job are scrubbed of the values.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

PLAN_VERSION = 1
FORMATS = ("parquet", "csv", "json")
_DIGESTS = ("md5", "sha1", "sha224", "sha256", "sha384", "sha512")
_INTEGER = re.compile(r"[+-]?\d+")
_REDACTED = "[redacted]"


class PlanError(ValueError):
    """The plan file is not one these jobs understand."""


def load_plan(path: str | os.PathLike[str], kind: str) -> dict[str, Any]:
    """Return the plan in ``path``, checking its version and kind."""
    plan = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(plan, dict) or plan.get("version") != PLAN_VERSION:
        raise PlanError(f"plan version must be {PLAN_VERSION}")
    if plan.get("kind") != kind:
        raise PlanError(f"plan kind must be {kind!r}, got {plan.get('kind')!r}")
    if not isinstance(plan.get("datasets"), list):
        raise PlanError("plan has no datasets list")
    return plan


def write_result(path: str | os.PathLike[str], result: dict[str, Any]) -> None:
    """Write the result file whole or not at all (temporary file, then rename)."""
    target = Path(path)
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(result, out, indent=2, sort_keys=True)
    os.replace(temp, target)


def read_values(stream: TextIO) -> list[str]:
    """Return the identifier values sent as a JSON array of strings (stdin)."""
    values = json.loads(stream.read() or "[]")
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise PlanError("stdin must hold a JSON array of strings")
    return values


def match_forms(values: Sequence[str], masked: bool, case_insensitive: bool) -> list[str]:
    """Return the strings a column may hold for these values.

    A masked column holds a pseudonym: the common hex digests of the value
    (and of its lower-case form) are matched as well as the value itself.
    """
    bases: set[str] = set()
    for value in values:
        bases.add(value.lower() if case_insensitive else value)
        if masked:
            bases.add(value.lower())
    forms = set(bases)
    if masked:
        for base in bases:
            for name in _DIGESTS:
                forms.add(hashlib.new(name, base.encode()).hexdigest())
    return sorted(forms)


def scrub(message: str, values: Sequence[str], limit: int = 400) -> str:
    """Return ``message`` with every identifier value and pseudonym replaced, shortened."""
    secrets = set(match_forms(values, masked=True, case_insensitive=False))
    secrets.update(v for v in values)
    cleaned = message
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        cleaned = re.sub(re.escape(secret), _REDACTED, cleaned, flags=re.IGNORECASE)
    first = cleaned.strip().splitlines()[0] if cleaned.strip() else ""
    return first[:limit]


def describe_error(error: BaseException, values: Sequence[str]) -> str:
    """Return a one-line, scrubbed description of an exception for a result file."""
    return scrub(f"{type(error).__name__}: {error}", values)


@contextmanager
def quiet_loggers(*names: str) -> Iterator[None]:
    """Raise Python loggers to ERROR for a block (plan-walking code may log expressions)."""
    saved = {name: logging.getLogger(name).level for name in names}
    for name in names:
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def local_path(location: str) -> str | None:
    """Return the local file-system path of a location, or None for remote storage."""
    if location.startswith("/"):
        return os.path.normpath(location)
    parts = urlsplit(location)
    if parts.scheme == "file" and parts.netloc in ("", "localhost"):
        return os.path.normpath(parts.path)
    return None


def detect_format(location: str, declared: str | None) -> str:
    """Return parquet, csv or json: the declared format, else what the files look like."""
    if declared and declared != "auto":
        if declared not in FORMATS:
            raise PlanError(f"unsupported format {declared!r}")
        return declared
    path = local_path(location)
    if path is None:
        return "parquet"
    candidates: list[str] = []
    if os.path.isfile(path):
        candidates = [path]
    else:
        for _root, dirs, files in os.walk(path):
            dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
            candidates.extend(f for f in files if not f.startswith((".", "_")))
            if candidates:
                break
    for name in candidates:
        lowered = name.lower()
        for suffix, fmt in (
            (".parquet", "parquet"),
            (".csv", "csv"),
            (".json", "json"),
            (".jsonl", "json"),
            (".ndjson", "json"),
        ):
            if lowered.endswith(suffix) or f"{suffix}." in lowered:
                return fmt
    return "parquet"


def reader(spark: Any, fmt: str) -> Any:
    """Return a DataFrameReader for the format (CSV with a header row, all columns strings)."""
    read = spark.read.format(fmt)
    if fmt == "csv":
        read = read.option("header", "true")
    return read


def writer_options(fmt: str) -> dict[str, str]:
    return {"header": "true"} if fmt == "csv" else {}


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def resolve_column(schema: Any, name: str) -> tuple[str, Any] | None:
    """Return (column expression, data type) for a top-level or dotted nested field."""
    from pyspark.sql.types import StructType

    for struct_field in schema.fields:
        if struct_field.name == name:
            return _quoted(name), struct_field.dataType
    current: Any = schema
    path: list[str] = []
    for part in name.split("."):
        if not isinstance(current, StructType):
            return None
        found = next((f for f in current.fields if f.name == part), None)
        if found is None:
            return None
        path.append(_quoted(part))
        current = found.dataType
    return ".".join(path), current


def column_condition(
    schema: Any, spec: dict[str, Any], values: Sequence[str]
) -> tuple[Any | None, str]:
    """Return (condition, note): when the column holds one of its identifiers' values.

    The comparison keeps the column's type, so Spark pushes it down to the
    files (Parquet statistics) as it would a hand-written filter.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    resolved = resolve_column(schema, spec["name"])
    if resolved is None:
        return None, f"column {spec['name']} not found"
    expression, data_type = resolved
    picked = [values[i] for i in spec.get("identifiers", []) if 0 <= i < len(values)]
    if not picked:
        return None, f"column {spec['name']}: no identifier maps to it"
    masked = bool(spec.get("masked"))
    insensitive = bool(spec.get("caseInsensitive"))
    forms = match_forms(picked, masked, insensitive)
    column = F.col(expression)
    if isinstance(data_type, T.ByteType | T.ShortType | T.IntegerType | T.LongType):
        numbers = sorted({int(f) for f in forms if _INTEGER.fullmatch(f)})
        if not numbers:
            return None, f"column {spec['name']}: integer column, identifier is not a number"
        return column.isin(numbers), ""
    if isinstance(data_type, T.DecimalType | T.FloatType | T.DoubleType):
        parsed: list[Any] = []
        for form in forms:
            try:
                number = Decimal(form)
            except InvalidOperation:
                continue
            parsed.append(number if isinstance(data_type, T.DecimalType) else float(number))
        if not parsed:
            return None, f"column {spec['name']}: numeric column, identifier is not a number"
        return column.isin(parsed), ""
    if isinstance(data_type, T.StringType):
        if insensitive or masked:
            return F.lower(column).isin(sorted({f.lower() for f in forms})), ""
        return column.isin(forms), ""
    if isinstance(data_type, T.BinaryType):
        hexes = sorted({f.lower() for f in forms if re.fullmatch(r"[0-9a-fA-F]+", f)})
        return F.lower(F.hex(column)).isin(hexes), ""
    return None, f"column {spec['name']}: type {data_type.simpleString()} is not matched"


def row_condition(
    schema: Any, columns: Sequence[dict[str, Any]], values: Sequence[str]
) -> tuple[Any | None, list[str]]:
    """Return (condition, notes): a row matches when any mapped column does.

    The condition is null where the columns are null; as a filter that drops
    the row, as Spark pushes it to the files. Negate it only through
    ``matches_not``.
    """
    condition = None
    notes: list[str] = []
    for spec in columns:
        part, note = column_condition(schema, spec, values)
        if note:
            notes.append(note)
        if part is not None:
            condition = part if condition is None else (condition | part)
    return condition, notes


def matches_not(condition: Any) -> Any:
    """Return the rows a condition does not match, rows with null keys included."""
    from pyspark.sql import functions as F

    return ~F.coalesce(condition, F.lit(False))


def print_progress(done: int, total: int, key: str) -> None:
    """Report progress on stdout (command-line runs): counts and dataset keys only."""
    sys.stdout.write(f"progress {done}/{total} {key}\n")
    sys.stdout.flush()
