"""Table-level lineage of very large statements by scanning literal-free text.

Both parsers slow down badly on huge statements: sqlglot's qualification
and openlineage-sql are quadratic in the number of UNION branches (a
250 KB union took minutes in openlineage-sql). Past the size at which
column lineage is attempted, tables are found with regular expressions
over the normalised text (literals and comments already gone), which is
linear and cannot hang. It is a heuristic, used only where parsing would be
too slow to be worth it, and its results carry a warning.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

_NAME = r'(?:[\w$@-]+|"(?:[^"]|"")+"|`[^`]+`)(?:\s*\.\s*(?:[\w$-]+|"(?:[^"]|"")+"|`[^`]+`|\*))*'
_STOP = (
    r"(?:where|group|order|having|limit|join|inner|left|right|full|cross|natural|on|using|"
    r"union|intersect|except|minus|window|qualify|lateral|set|values|select|when|then|returning)"
)
_INPUT = re.compile(rf"(?i)\b(?:from|join|using)\s+(?:only\s+)?(?P<name>{_NAME})(?P<call>\s*\()?")
_MORE = re.compile(
    rf"(?i)\s*(?:(?:as\s+)?(?!{_STOP}\b)[\w\"`]+\s*)?,\s*(?P<name>{_NAME})(?P<call>\s*\()?"
)
_OUTPUTS = (
    re.compile(rf"(?i)^\s*insert\s+(?:overwrite\s+)?(?:into\s+)?(?:table\s+)?(?P<name>{_NAME})"),
    re.compile(
        rf"(?i)^\s*create\s+(?:or\s+replace\s+)?(?:[a-z_]+\s+)*?(?:table|view)\s+"
        rf"(?:if\s+not\s+exists\s+)?(?P<name>{_NAME})"
    ),
    re.compile(rf"(?i)^\s*merge\s+(?:into\s+)?(?P<name>{_NAME})"),
    re.compile(rf"(?i)^\s*update\s+(?:only\s+)?(?P<name>{_NAME})"),
    re.compile(rf"(?i)^\s*delete\s+from\s+(?:only\s+)?(?P<name>{_NAME})"),
)
_CTE = re.compile(
    r"(?i)(?:\bwith\s+(?:recursive\s+)?|,\s*)(?P<name>[\w\"`]+)\s*(?:\([^()]*\)\s*)?as\s*\("
)
_SET_OPERATIONS = re.compile(r"(?i)\b(?:union|intersect|except|minus)\b")


@dataclass(frozen=True, slots=True)
class ScannedTables:
    inputs: tuple[tuple[str, ...], ...]
    outputs: tuple[tuple[str, ...], ...]


def count_set_operations(normalized_sql: str) -> int:
    return len(_SET_OPERATIONS.findall(normalized_sql))


def scan_tables(normalized_sql: str, unquote: Callable[[str], str]) -> ScannedTables:
    """Return the table names (as name parts) a statement reads and writes."""
    text = normalized_sql
    ctes = {unquote(m["name"]) for m in _CTE.finditer(text)}
    outputs: list[tuple[str, ...]] = []
    for pattern in _OUTPUTS:
        m = pattern.match(text)
        if m is not None:
            outputs.append(_parts(m["name"], unquote))
            break
    inputs: list[tuple[str, ...]] = []
    for m in _INPUT.finditer(text):
        if m["call"]:
            continue  # a table function or a subquery alias list, not a table
        inputs.append(_parts(m["name"], unquote))
        position = m.end()
        while True:
            more = _MORE.match(text, position)
            if more is None or more["call"]:
                break
            inputs.append(_parts(more["name"], unquote))
            position = more.end()
    found = [p for p in inputs if not (len(p) == 1 and p[0] in ctes)]
    unique_inputs = tuple(
        dict.fromkeys(p for p in found if p not in outputs or _reads_target(text))
    )
    return ScannedTables(unique_inputs, tuple(dict.fromkeys(outputs)))


def _reads_target(text: str) -> bool:
    return re.match(r"(?i)^\s*(insert|create)\b", text) is not None


_PART = re.compile(r'"(?:[^"]|"")+"|`[^`]+`|[^.\s]+')


def _parts(name: str, unquote: Callable[[str], str]) -> tuple[str, ...]:
    parts: list[str] = []
    for part in _PART.findall(name):
        if part.startswith("`") and "." in part:
            # BigQuery quotes a whole path at once: `project.dataset.table`
            parts.extend(part[1:-1].split("."))
        else:
            parts.append(unquote(part))
    return tuple(parts)
