"""Fold date-suffixed tables (``events_20260101``) into one dataset (``events_*``)."""

from __future__ import annotations

import re
from collections.abc import Iterable

# A table name ending in a date: _YYYYMMDD, _YYYYMM, _YYYY_MM_DD.
DEFAULT_FOLD_PATTERNS: tuple[str, ...] = (r"_(\d{8}|\d{6}|\d{4}_\d{2}_\d{2})$",)


class DateSuffixFolder:
    """Replaces the first capture group of the first matching pattern with ``*``.

    Patterns apply to the last part of a dotted table name; a pattern without
    a group has its whole match replaced.
    """

    __slots__ = ("_in_text", "_patterns")

    def __init__(self, patterns: Iterable[str] = DEFAULT_FOLD_PATTERNS) -> None:
        self._patterns = tuple(re.compile(p) for p in patterns)
        # The same patterns anchored at word ends, for folding inside SQL text.
        self._in_text = tuple(
            re.compile(_unanchor(p.pattern) + r"(?![\w$])") for p in self._patterns
        )

    @property
    def enabled(self) -> bool:
        return bool(self._patterns)

    @property
    def patterns(self) -> tuple[str, ...]:
        return tuple(p.pattern for p in self._patterns)

    def fold(self, name: str) -> str:
        """Return ``name`` with a date suffix of its last part folded to ``*``."""
        head, dot, last = name.rpartition(".")
        for pattern in self._patterns:
            m = pattern.search(last)
            if m is None:
                continue
            start, end = (m.start(1), m.end(1)) if pattern.groups else (m.start(), m.end())
            return f"{head}{dot}{last[:start]}*{last[end:]}"
        return name

    def fold_text(self, text: str) -> str:
        """Fold every date-suffixed word in SQL text (used by the fingerprint)."""
        for pattern in self._in_text:
            text = pattern.sub(_star_group, text)
        return text


def _unanchor(pattern: str) -> str:
    return pattern[:-1] if pattern.endswith("$") and not pattern.endswith("\\$") else pattern


def _star_group(m: re.Match[str]) -> str:
    if m.re.groups:
        whole = m.group(0)
        offset = m.start(0)
        return whole[: m.start(1) - offset] + "*" + whole[m.end(1) - offset :]
    return "*"
