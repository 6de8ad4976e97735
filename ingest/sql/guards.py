"""Bounds on what the parser accepts, and a safe place to parse deep SQL.

sqlglot is a recursive-descent parser: in pure Python every level of
nesting costs a few dozen frames, so legitimately nested SQL can exceed the
interpreter's default recursion limit (1000); its mypyc-compiled build
(sqlglotc, 1.6x faster) recurses on the C stack instead, where absurd
nesting would crash the process rather than raise. Statements are
therefore bounded by length and by parenthesis depth before any parser sees
them, and statements that are deep but within bounds are parsed on a
dedicated thread with a large stack and a raised recursion limit, so a
RecursionError is the worst that can happen and it is reported as a parse
error, never a crash (tests/test_sql_parser.py runs the worst cases in a
child process to prove it).
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_MAX_STATEMENT_CHARS = 1_000_000
DEFAULT_MAX_NESTING = 256
# Above this depth a statement is parsed on the big-stack thread.
INLINE_NESTING = 24
_DEEP_STACK_BYTES = 512 * 1024 * 1024
_DEEP_RECURSION_LIMIT = 200_000

_PARENS = re.compile(r"[()]")
_DEEP_LOCK = threading.Lock()


class InputRejected(ValueError):
    """Raised for input outside the parser's bounds; the message is the reason."""


def nesting_depth(normalized_sql: str) -> int:
    """Return the maximum parenthesis depth of literal-free SQL text."""
    depth = deepest = 0
    for m in _PARENS.finditer(normalized_sql):
        if m.group(0) == "(":
            depth += 1
            if depth > deepest:
                deepest = depth
        elif depth:
            depth -= 1
    return deepest


def check_length(sql: str, max_chars: int) -> None:
    if len(sql) > max_chars:
        raise InputRejected(
            f"statement is {len(sql):,} characters long; the limit is {max_chars:,}"
        )


def check_depth(depth: int, max_depth: int) -> None:
    if depth > max_depth:
        raise InputRejected(f"statement nests {depth} levels deep; the limit is {max_depth}")


def run_deep(fn: Callable[[], T]) -> T:
    """Run ``fn`` on a thread with a large stack and recursion limit; return its result.

    Exceptions raised by ``fn`` are re-raised in the caller.
    """
    result: list[T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(fn())
        except BaseException as exc:  # re-raised in the calling thread
            error.append(exc)

    # Both settings are process-wide: hold a lock and restore them at once.
    with _DEEP_LOCK:
        old_stack = threading.stack_size()
        old_limit = sys.getrecursionlimit()
        # The limit is raised before the thread starts, so it runs under it from the start.
        sys.setrecursionlimit(max(old_limit, _DEEP_RECURSION_LIMIT))
        try:
            threading.stack_size(_DEEP_STACK_BYTES)
            try:
                thread = threading.Thread(target=target, name="sql-deep-parse", daemon=True)
                thread.start()
            finally:
                threading.stack_size(old_stack)
            thread.join()
        finally:
            sys.setrecursionlimit(old_limit)
    if error:
        raise error[0]
    return result[0]
