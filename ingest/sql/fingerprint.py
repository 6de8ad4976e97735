"""Literal-insensitive fingerprints of SQL text.

Scheduled statements differ only in literals (dates, ids, IN-lists) and
whitespace; they share a fingerprint, so a log of millions of lines parses
only its few thousand distinct statements. Normalisation is a handful of
C-level regular-expression passes, never a parse.

The normalisation must never make two statements with different lineage
look alike. It only touches literals, comments, whitespace, the length of
IN-lists and of VALUES row lists, and (for dialects whose unquoted
identifiers are case-insensitive) case outside quoted identifiers. (Runs of
whitespace inside a quoted identifier are collapsed too: ``"a  b"`` and
``"a b"`` share a fingerprint, a price paid for speed.)
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache

from ingest.sql.dialects import DialectSpec

_NUMBER = r"(?<![\w$.])(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(?![\w$])"
_COMMENTS = r"--[^\n]*|/\*.*?\*/"
_DOLLAR = r"\$(?P<tag>[A-Za-z_]*)\$.*?\$(?P=tag)\$"


@lru_cache(maxsize=16)
def _token_pattern(backslash_escapes: bool, double_quoted_strings: bool) -> re.Pattern[str]:
    sq = (
        r"'(?:[^'\\]|''|\\.)*'" if backslash_escapes else r"[eE]'(?:[^'\\]|''|\\.)*'|'(?:[^']|'')*'"
    )
    dq = r'"(?:[^"\\]|""|\\.)*"'
    literal = f"{sq}|{dq}" if double_quoted_strings else sq
    # Quoted identifiers are matched (and kept) so literal rules never look inside them.
    identifiers = r"`(?:[^`]|``)*`" + ("" if double_quoted_strings else r'|"(?:[^"]|"")*"')
    # The lookahead lets the regex engine skip, in C, every position where
    # no literal, quoted identifier or comment can start.
    return re.compile(
        r"(?=['\"`$0-9.\-/eE])"
        rf"(?:(?P<lit>{literal}|{_DOLLAR}|{_NUMBER})|(?P<ident>{identifiers})"
        rf"|(?P<comment>{_COMMENTS}))",
        re.S,
    )


_IN_LIST = re.compile(r"(?i)\bin\s*\(\s*\?(?:\s*,\s*\?)*\s*\)")
_VALUES_ROWS = re.compile(r"(?i)\bvalues\s*(\([^()]*\))(?:\s*,\s*\([^()]*\))+")
_QUOTED_IDENT = re.compile(r'`(?:[^`]|``)*`|"(?:[^"]|"")*"')
# A string literal right after AS is an alias in MySQL / BigQuery, not data.
_AS_ALIAS = re.compile(r"(?i)\bas\s*$")


def _uses_backslash_escapes(spec: DialectSpec) -> bool:
    return spec.name in {"mysql", "bigquery", "spark", "hive", "snowflake", "redshift"}


def redact(sql: str, spec: DialectSpec) -> str:
    """``sql`` with its literals as ``?`` and its comments as a space, as a job shows a logged
    statement: a literal may be personal data (``WHERE email = 'alice@example.com'``), and the
    job stands for every execution of the statement, whatever its literals."""
    return _literals_out(sql, spec).strip()


def normalize(sql: str, spec: DialectSpec) -> str:
    """Return ``sql`` with literals as ``?``, comments dropped, whitespace collapsed."""
    # Literals, identifiers and comments in one C-driven pass, then whitespace.
    text = " ".join(_literals_out(sql, spec).split()).rstrip(";").rstrip()
    if "(?" in text:
        # Cheap substring checks first: these regexes cost more than the rest.
        lowered = text.lower()
        if "in (?" in lowered or "in(?" in lowered:
            text = _IN_LIST.sub("in (?)", text)
        if "values" in lowered:
            text = _VALUES_ROWS.sub(r"values \1", text)
    if spec.case_insensitive:
        text = _fold_case(text)
    return text


def _literals_out(sql: str, spec: DialectSpec) -> str:
    """``sql`` with literals as ``?`` and comments as a space; quoted identifiers and string
    aliases kept."""
    pattern = _token_pattern(_uses_backslash_escapes(spec), spec.double_quoted_strings)

    def replace(m: re.Match[str]) -> str:
        kind = m.lastgroup
        if kind == "ident":
            return m.group(0)
        if kind == "comment":
            return " "
        text = m.group(0)
        start = m.start()
        if text[0] in "'\"" and _AS_ALIAS.search(sql, max(0, start - 8), start):
            return text
        return "?"

    return pattern.sub(replace, sql)


def _fold_case(text: str) -> str:
    if '"' not in text and "`" not in text:
        return text.lower()
    parts: list[str] = []
    pos = 0
    for m in _QUOTED_IDENT.finditer(text):
        parts.append(text[pos : m.start()].lower())
        parts.append(m.group(0))
        pos = m.end()
    parts.append(text[pos:].lower())
    return "".join(parts)


def digest(*parts: str) -> str:
    """Return a short stable hex digest of the given strings."""
    h = hashlib.blake2b(digest_size=12)
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


def fingerprint(sql: str, spec: DialectSpec) -> str:
    """Return the fingerprint of ``sql``: equal for statements differing only in literals."""
    return digest(spec.name, normalize(sql, spec))
