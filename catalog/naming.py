"""Canonical dataset names: one table is one name, whichever channel or person named it.

OpenLineage's naming spec gives each platform a namespace form and a name
form (``openlineage.client.naming.dataset``). Channels still disagree on case
and spelling: a Snowflake producer sends ``raw_db.sales.orders`` while
Snowflake itself (and a query log read with its dialect) calls the table
``RAW_DB.SALES.ORDERS``. ``canonical`` gives the one name every part of the
app stores and looks up:

- the namespace's scheme and authority are lower-cased for known platforms
  (hosts and account identifiers are case-insensitive; ``postgresql://`` is
  ``postgres://`` and ``s3a://`` or ``s3n://`` is ``s3://``, as the spec
  writes them); a PostgreSQL or Redshift namespace without a port names the
  platform's default one (``postgres://db`` is ``postgres://db:5432``), as
  OpenLineage's own JDBC extractors fill it in;
- Snowflake folds unquoted identifiers to upper case; PostgreSQL and Redshift
  to lower case. A quoted identifier keeps its case (not on Redshift, which
  folds it too by default), and its quotes while it needs them
  (``RAW_DB.SALES."MixedCase"``), so canonical names are canonical again;
  ``"ORDERS"`` is ``ORDERS``;
- BigQuery names are ``project.dataset.table`` (legacy ``project:dataset.table``
  and backquotes are rewritten);
- file and object-store paths are normalised (``//``, ``.`` and ``..``
  segments, a trailing ``/``; object keys have no leading ``/``).

Where a name has the platform's number of parts, the result is assembled by
the platform's naming class (``Postgres(...).get_name()`` and so on), so the
form is OpenLineage's own. An unknown platform keeps names as sent.

It is applied where names enter (``ingest.events``, so both OpenLineage events
and the SQL-log path; ``catalog_import``) and where users name a dataset (node
ids, URLs, search).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from openlineage.client.naming import dataset as naming


@dataclass(frozen=True)
class _Rule:
    fold: Callable[[str], str] | None  # None: identifiers keep their case
    assemble: Callable[[list[str]], str] | None  # the naming class, given the name's parts
    parts: int
    quotes_keep_case: bool = True


def _postgres(parts: list[str]) -> str:
    return naming.Postgres("h", "p", *parts).get_name()


def _redshift(parts: list[str]) -> str:
    return naming.Redshift("c", "r", "p", *parts).get_name()


def _snowflake(parts: list[str]) -> str:
    return naming.Snowflake("o", "a", *parts).get_name()


def _bigquery(parts: list[str]) -> str:
    return naming.BigQuery(*parts).get_name()


_TABLES: dict[str, _Rule] = {
    "snowflake": _Rule(str.upper, _snowflake, 3),
    "postgres": _Rule(str.lower, _postgres, 3),
    # Redshift folds quoted identifiers too, unless enable_case_sensitive_identifier is set.
    "redshift": _Rule(str.lower, _redshift, 3, quotes_keep_case=False),
    "bigquery": _Rule(None, _bigquery, 3),
}
_SCHEMES = {"postgresql": "postgres", "s3a": "s3", "s3n": "s3"}
# The port a namespace names when its producer left it out (the spec's namespace forms
# hold one: ``postgres://{host}:{port}``, ``redshift://{cluster}.{region}:{port}``).
_DEFAULT_PORTS = {"postgres": "5432", "redshift": "5439"}
_OBJECT_STORES = {"s3", "gs", "gcs", "abfss", "wasbs", "dbfs"}
PATH_PLATFORMS = frozenset({"file", "hdfs", *_OBJECT_STORES})  # datasets named by a path
_KNOWN = {*_TABLES, *PATH_PLATFORMS}
_PART = re.compile(r'"((?:[^"]|"")*)"|([^."]*)')


def platform(namespace: str) -> str:
    """The platform a namespace names (``postgres://db:5432`` → postgres), or ''."""
    scheme = namespace.split("://", 1)[0] if "://" in namespace else namespace.split(":", 1)[0]
    scheme = scheme.lower()[:64] if scheme.isascii() else ""
    return _SCHEMES.get(scheme, scheme)


# Worked out once per name and process: without it canonicalising took 4.7 % of a load's
# time, and loads ran at 0.88 of the speed (benchmarks/README.md).
@lru_cache(maxsize=65_536)
def canonical(namespace: str, name: str) -> tuple[str, str]:
    """The canonical ``(namespace, name)`` of a dataset (unchanged on an unknown platform)."""
    kind = platform(namespace)
    if kind not in _KNOWN:
        return namespace, name
    namespace = _namespace(namespace, kind)
    rule = _TABLES.get(kind)
    if rule is None:
        return namespace, _path(name, kind)
    if kind == "bigquery":
        name = name.replace("`", "").replace(":", ".", 1)
    split = _split(name)
    if split is None:
        return namespace, name
    parts = [_identifier(text, quoted, rule) for text, quoted in split]
    if rule.assemble is not None and len(parts) == rule.parts and all(p.strip() for p in parts):
        return namespace, rule.assemble(parts)
    return namespace, ".".join(parts)


def canonical_namespace(namespace: str) -> str:
    """The canonical form of a namespace (unchanged on an unknown platform)."""
    kind = platform(namespace)
    return _namespace(namespace, kind) if kind in _KNOWN else namespace


def _namespace(namespace: str, kind: str) -> str:
    if "://" not in namespace:
        return kind if namespace.lower() == kind else namespace
    _, rest = namespace.split("://", 1)
    # The authority ends at the path, the query or the fragment.
    cut = next((i for i, c in enumerate(rest) if c in "/?#"), len(rest))
    authority, path = rest[:cut].lower(), rest[cut:]
    port = _DEFAULT_PORTS.get(kind)
    if port:
        # The hosts are all after the last '@' (user info), comma-separated as libpq takes
        # them (``postgres://a,b:5433``); each without a port names the default one. An IPv6
        # host is bracketed.
        user, at, hosts = authority.rpartition("@")
        named = [
            h if not h or ":" in h.rpartition("]")[2] else f"{h}:{port}" for h in hosts.split(",")
        ]
        authority = user + at + ",".join(named)
    return f"{kind}://{authority}{path}".rstrip("/") or namespace


def _path(name: str, kind: str) -> str:
    if not name or "://" in name:
        return name
    path = posixpath.normpath(name)
    if path.startswith("//"):  # normpath keeps a leading '//'
        path = path[1:]
    if kind in _OBJECT_STORES:
        return path.lstrip("/") or name
    return path


def _split(name: str) -> list[tuple[str, bool]] | None:
    """The dot-separated parts of a name, quoted ones unquoted (None if quotes do not close)."""
    parts: list[tuple[str, bool]] = []
    pos = 0
    while True:
        m = _PART.match(name, pos)
        if m is None:
            return None
        if m.group(1) is not None:
            parts.append((m.group(1).replace('""', '"'), True))
        else:
            parts.append((m.group(2), False))
        pos = m.end()
        if pos == len(name):
            return parts
        if name[pos] != ".":
            return None
        pos += 1


def quote(text: str, fold: Callable[[str], str]) -> str:
    """A quoted identifier's text as a name part: bare when folding would not change it."""
    if fold(text) == text and "." not in text and '"' not in text:
        return text
    return '"' + text.replace('"', '""') + '"'


def _identifier(text: str, quoted: bool, rule: _Rule) -> str:
    if rule.fold is None:
        return text
    if not quoted or not rule.quotes_keep_case:
        return rule.fold(text)
    return quote(text, rule.fold)
