"""SQL text → statement lineage, with a fingerprint cache in front.

The design, chosen from measurements (see benchmarks/README.md):

* Every record is fingerprinted first (literal-normalised text, a few regex
  passes). Scheduled statements repeat with different literals, so most
  records are cache hits and cost only the fingerprint.
* A miss is split into statements with sqlglot's tokenizer and each
  statement goes through sqlglot with the catalog's schema (stars expanded,
  unqualified columns resolved), giving table and column lineage with
  OpenLineage transformation types.
* A statement sqlglot cannot parse, or one too large for a pure-Python
  parser to be worth it, falls back to openlineage-sql (Rust): table
  lineage and its simpler column lineage, with a warning.
* Length and nesting are bounded before any parser runs; deep statements
  are parsed on a big-stack thread (see guards.py).
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import openlineage_sql
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers
from sqlglot.tokenizer_core import Token, TokenType

import ingest.sql.guards as guards
from ingest.sql.dialects import DialectSpec, resolve_dialect
from ingest.sql.extract import (
    ScriptContext,
    StatementExtractor,
    Unsupported,
    location,
    quoted_part,
)
from ingest.sql.fingerprint import digest, normalize
from ingest.sql.folding import DEFAULT_FOLD_PATTERNS, DateSuffixFolder
from ingest.sql.model import (
    TRANSFORMATION,
    DatasetRef,
    Defaults,
    FieldRef,
    InputField,
    Lifecycle,
    ParsedRecord,
    StatementError,
    StatementKind,
    StatementLineage,
    TargetLineage,
)
from ingest.sql.session import LineageSession, compose
from ingest.sql.tablescan import count_set_operations, scan_tables

logging.getLogger("sqlglot").setLevel(logging.CRITICAL)
logger = logging.getLogger(__name__)

SchemaProvider = Callable[[str], "Sequence[str] | None"]

# Schemas and tables named like these are scratch space: followed through, then hidden.
DEFAULT_SCRATCH_PATTERNS: tuple[str, ...] = (
    r"(?i)(^|\.)(scratch|tmp)\.[^.]+$",
    r"(?i)(^|\.)(tmp|scratch)_[^.]*$",
    r"(?i)_(tmp|scratch)$",
)

# Beyond these, column lineage costs too much (sqlglot's qualification is
# quadratic in UNION branches) and tables are found by scanning the text.
DEFAULT_MAX_COLUMN_PASS_CHARS = 100_000
DEFAULT_MAX_COLUMN_PASS_SET_OPERATIONS = 200
# openlineage-sql is quadratic on long statements too: it only backs up small ones.
DEFAULT_MAX_FALLBACK_CHARS = 20_000
# Texts up to this length are remembered verbatim, to skip normalising exact repeats.
_EXACT_TEXT_MAX = 8_192

_UNLOAD = re.compile(r"(?is)^\s*unload\s*\(\s*'((?:[^']|'')*)'\s*\)\s*to\s*'([^']*)'")
_MYSQL_LOAD = re.compile(
    r"(?is)^\s*load\s+data\s+(?:low_priority\s+|concurrent\s+)?(?:local\s+)?infile\s+"
    r"'([^']*)'\s+(?:replace\s+|ignore\s+)?into\s+table\s+([\w`.\"]+)"
)
_RENAME_TABLE = re.compile(r"(?is)^\s*rename\s+table\s+(.+)$")
_RENAME_PAIR = re.compile(r"(?is)\s*([\w`.\"]+)\s+to\s+([\w`.\"]+)\s*")
_REPLACE_INTO = re.compile(r"(?is)^(\s*)replace(\s+(?:low_priority\s+|delayed\s+)?into\b)")
_SEARCH_PATH = re.compile(r"(?is)^\s*set\s+(?:session\s+|local\s+)?search_path\s*(?:to|=)\s*(.+)$")
_KIND_GUESS = (
    (re.compile(r"(?is)^\s*(with\b.*?\)\s*)?insert\s+overwrite\b"), StatementKind.INSERT_OVERWRITE),
    (re.compile(r"(?is)^\s*(with\b.*?\)\s*)?(insert|replace|upsert)\b"), StatementKind.INSERT),
    (re.compile(r"(?is)^\s*create\s+(or\s+replace\s+)?(\w+\s+)*view\b"), StatementKind.CREATE_VIEW),
    (re.compile(r"(?is)^\s*create\b.*\bas\b"), StatementKind.CTAS),
    (re.compile(r"(?is)^\s*merge\b"), StatementKind.MERGE),
    (re.compile(r"(?is)^\s*update\b"), StatementKind.UPDATE),
    (re.compile(r"(?is)^\s*delete\b"), StatementKind.DELETE),
    (re.compile(r"(?is)^\s*copy\b"), StatementKind.COPY),
    (re.compile(r"(?is)^\s*(with\b|select\b|\()"), StatementKind.SELECT),
    (re.compile(r"(?is)^\s*(create|drop|alter|truncate)\b"), StatementKind.DDL),
)


class _NotSpecial:
    """Marks a statement the regex handlers leave to sqlglot."""


_NOT_SPECIAL = _NotSpecial()


@dataclass(slots=True)
class _Cached:
    statements: tuple[StatementLineage, ...]
    errors: tuple[StatementError, ...]
    # The statements with the record's own temporary tables followed through, for a
    # record that touches no scratch table (those outlive it): the same every time.
    composed: tuple[StatementLineage, ...] | None = None
    touches_scratch: bool | None = None


class SqlLineageParser:
    """Parses SQL records (one statement or a script) into statement lineage.

    One instance serves a whole log: it holds the fingerprint cache and the
    catalog lookups. It is not thread-safe; use one per worker.
    """

    def __init__(
        self,
        dialect: str = "postgres",
        *,
        schema_provider: SchemaProvider | None = None,
        fold_patterns: Iterable[str] = DEFAULT_FOLD_PATTERNS,
        scratch_patterns: Iterable[str] = DEFAULT_SCRATCH_PATTERNS,
        max_statement_chars: int = guards.DEFAULT_MAX_STATEMENT_CHARS,
        max_nesting: int = guards.DEFAULT_MAX_NESTING,
        max_column_pass_chars: int = DEFAULT_MAX_COLUMN_PASS_CHARS,
        max_column_pass_set_operations: int = DEFAULT_MAX_COLUMN_PASS_SET_OPERATIONS,
        max_fallback_chars: int = DEFAULT_MAX_FALLBACK_CHARS,
        cache_size: int = 50_000,
    ) -> None:
        self.default_dialect = resolve_dialect(dialect)
        self._provider = schema_provider
        self.folder = DateSuffixFolder(fold_patterns)
        self._scratch = tuple(re.compile(p) for p in scratch_patterns)
        self.max_statement_chars = max_statement_chars
        self.max_nesting = max_nesting
        self.max_column_pass_chars = max_column_pass_chars
        self.max_column_pass_set_operations = max_column_pass_set_operations
        self.max_fallback_chars = max_fallback_chars
        self._cache: OrderedDict[tuple[str, str, str, str], _Cached] = OrderedDict()
        self._cache_size = cache_size
        self._columns: dict[DatasetRef, tuple[str, ...] | None] = {}
        self._fingerprints: dict[tuple[str, str], str] = {}
        self._dialects: dict[str, Dialect] = {}
        self.shared = LineageSession()
        self.hits = 0
        self.misses = 0

    # -- public --------------------------------------------------------------

    def parse(
        self,
        sql: str,
        *,
        dialect: str | None = None,
        database: str | None = None,
        schema: str | None = None,
        session: LineageSession | None = None,
    ) -> ParsedRecord:
        """Return the lineage of one record; bad SQL becomes errors, never exceptions.

        Raises UnknownDialectError for an unsupported dialect name.
        """
        spec = resolve_dialect(dialect) if dialect else self.default_dialect
        defaults = Defaults(database or None, schema or None)
        try:
            guards.check_length(sql, self.max_statement_chars)
        except guards.InputRejected as exc:
            return ParsedRecord("", (), (StatementError(0, str(exc), sql[:200]),))
        # Identical text (a dashboard refreshing) skips even the normalisation.
        exact = (spec.name, sql)
        fp = self._fingerprints.get(exact)
        normalized = None
        if fp is None:
            normalized = normalize(sql, spec)
            fp = digest(spec.name, normalized)
            if len(sql) <= _EXACT_TEXT_MAX:
                self._fingerprints[exact] = fp
                if len(self._fingerprints) > self._cache_size:
                    del self._fingerprints[next(iter(self._fingerprints))]
        key = (spec.name, defaults.database or "", defaults.schema or "", fp)
        cached = self._cache.get(key)
        hit = cached is not None
        if cached is None:
            self.misses += 1
            if normalized is None:
                normalized = normalize(sql, spec)
            cached = self._parse_uncached(sql, normalized, fp, spec, defaults)
            self._cache[key] = cached
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        else:
            self.hits += 1
        if session is None and not self._touches_scratch(cached):
            if cached.composed is None:
                cached.composed = self._compose(cached.statements, LineageSession())
            statements = cached.composed
        else:
            local = session if session is not None else LineageSession()
            statements = self._compose(cached.statements, local)
        return ParsedRecord(fp, statements, cached.errors, cached=hit)

    def _compose(
        self, statements: tuple[StatementLineage, ...], local: LineageSession
    ) -> tuple[StatementLineage, ...]:
        return tuple(compose(s, local, self.shared, self.is_scratch) for s in statements)

    def _touches_scratch(self, cached: _Cached) -> bool:
        if cached.touches_scratch is None:
            cached.touches_scratch = any(
                self.is_scratch(d) for s in cached.statements for d in (*s.inputs, *s.outputs)
            )
        return cached.touches_scratch

    def is_scratch(self, dataset: DatasetRef) -> bool:
        return not dataset.is_location and any(p.search(dataset.name) for p in self._scratch)

    def columns_of(self, dataset: DatasetRef) -> tuple[str, ...] | None:
        """Known columns of a dataset from the catalog (memoised for the parser's life)."""
        if dataset in self._columns:
            return self._columns[dataset]
        columns: tuple[str, ...] | None = None
        if self._provider is not None:
            found = self._provider(dataset.name)
            columns = tuple(found) if found else None
        self._columns[dataset] = columns
        return columns

    def clear(self) -> None:
        self._cache.clear()
        self._fingerprints.clear()
        self._columns.clear()

    # -- parsing a miss --------------------------------------------------------

    def _parse_uncached(
        self, sql: str, normalized: str, fp: str, spec: DialectSpec, defaults: Defaults
    ) -> _Cached:
        try:
            return self._parse_bounded(sql, normalized, fp, spec, defaults)
        except RecursionError:
            reason = "statement nests too deeply to parse"
        except Exception as exc:  # a parser bug must cost one record, never the log
            logger.exception("SQL lineage failed on a statement")
            reason = f"internal parser error: {_short(exc)}"
        return _Cached((), (StatementError(0, reason, sql[:200]),))

    def _parse_bounded(
        self, sql: str, normalized: str, fp: str, spec: DialectSpec, defaults: Defaults
    ) -> _Cached:
        try:
            depth = guards.nesting_depth(normalized)
            guards.check_depth(depth, self.max_nesting)
        except guards.InputRejected as exc:
            return _Cached((), (StatementError(0, str(exc), sql[:200]),))
        set_operations = count_set_operations(normalized)
        if len(sql) > self.max_column_pass_chars:
            reason = f"statement longer than {self.max_column_pass_chars:,} characters"
            return self._scan_script(normalized, fp, self._context(spec, defaults), reason)
        if set_operations > self.max_column_pass_set_operations:
            reason = f"{set_operations} set operations"
            return self._scan_script(normalized, fp, self._context(spec, defaults), reason)
        if depth + set_operations > guards.INLINE_NESTING:
            return guards.run_deep(lambda: self._parse_script(sql, fp, spec, defaults))
        try:
            return self._parse_script(sql, fp, spec, defaults)
        except RecursionError:
            return guards.run_deep(lambda: self._parse_script(sql, fp, spec, defaults))

    def _dialect(self, spec: DialectSpec) -> Dialect:
        found = self._dialects.get(spec.name)
        if found is None:
            found = Dialect.get_or_raise(spec.sqlglot)
            self._dialects[spec.name] = found
        return found

    def _context(self, spec: DialectSpec, defaults: Defaults) -> ScriptContext:
        return ScriptContext(
            spec=spec,
            dialect=self._dialect(spec),
            database=defaults.database,
            schema=defaults.schema,
            provider_columns=self.columns_of,
            folder=self.folder,
            is_scratch=self.is_scratch,
        )

    def _parse_script(self, sql: str, fp: str, spec: DialectSpec, defaults: Defaults) -> _Cached:
        ctx = self._context(spec, defaults)
        if len(sql) > self.max_column_pass_chars:
            return self._fallback_script(
                sql, fp, spec, ctx, "statement too large for column lineage"
            )
        dialect = ctx.dialect
        try:
            tokens = dialect.tokenize(sql)
        except SqlglotError as exc:
            return self._fallback_script(sql, fp, spec, ctx, f"tokenizer: {_short(exc)}")
        chunks = _split(tokens)
        statements: list[StatementLineage] = []
        errors: list[StatementError] = []
        single = len(chunks) == 1
        for index, chunk in enumerate(chunks):
            text = sql[chunk[0].start : chunk[-1].end + 1]
            normalized = normalize(text, spec)
            statement_fp = fp if single else digest(spec.name, normalized)
            job_key = digest(spec.name, self.folder.fold_text(normalized))
            result = self._parse_statement(text, chunk, ctx)
            if isinstance(result, StatementError):
                errors.append(replace(result, index=index))
                continue
            if result is None:
                continue
            statements.append(
                replace(result, index=index, fingerprint=statement_fp, job_key=job_key)
            )
        return _Cached(tuple(statements), tuple(errors))

    def _parse_statement(
        self, text: str, tokens: list[Token], ctx: ScriptContext
    ) -> StatementLineage | StatementError | None:
        try:
            special = self._special(text, ctx)
        except RecursionError:
            raise
        except Exception as exc:  # odd names in RENAME / LOAD DATA: let the fallback try
            return self._fallback(text, ctx, f"sqlglot: {_short(exc)}")
        if not isinstance(special, _NotSpecial):
            return special
        extractor = StatementExtractor(ctx)
        try:
            parsed = ctx.dialect.parser().parse(tokens, text)
        except RecursionError:
            raise
        except Exception as exc:  # sqlglot raises ParseError and, rarely, others
            return self._fallback(text, ctx, f"sqlglot: {_short(exc)}")
        expressions = [e for e in parsed if e is not None]
        if not expressions:
            return None
        statement = expressions[0]
        if isinstance(statement, exp.Use):
            _apply_use(normalize_identifiers(statement, dialect=ctx.dialect), ctx)
            return StatementLineage(StatementKind.OTHER, (), ())
        if isinstance(statement, exp.Command):
            return StatementLineage(StatementKind.OTHER, (), ())
        try:
            return extractor.extract(statement)
        except RecursionError:
            raise
        except Unsupported as exc:
            return self._fallback(text, ctx, str(exc))
        except Exception as exc:  # an unexpected shape: keep going with the fallback
            return self._fallback(text, ctx, f"sqlglot: {_short(exc)}")

    def _special(
        self, text: str, ctx: ScriptContext
    ) -> StatementLineage | StatementError | _NotSpecial | None:
        """Statements sqlglot keeps as opaque commands; _NOT_SPECIAL for the rest."""
        head = text.lstrip()[:12].lower()
        if head.startswith("unload"):
            m = _UNLOAD.match(text)
            if m is None:
                return self._fallback(text, ctx, "unrecognised UNLOAD")
            inner = m.group(1).replace("''", "'")
            found = self._parse_inner_query(inner, ctx)
            if isinstance(found, StatementError):
                return found
            target = location(m.group(2))
            fields = found.targets[0].fields if found.targets else {}
            return StatementLineage(
                StatementKind.UNLOAD,
                found.inputs,
                (target,),
                (
                    TargetLineage(
                        target, fields, found.targets[0].dataset_inputs if found.targets else ()
                    ),
                ),
                warnings=found.warnings,
            )
        if head.startswith("load"):
            m = _MYSQL_LOAD.match(text)
            if m is None:
                return _NOT_SPECIAL
            table = self._name(m.group(2), ctx)
            return StatementLineage(StatementKind.COPY, (location(m.group(1)),), (table,))
        if head.startswith("rename"):
            m = _RENAME_TABLE.match(text)
            pairs = [_RENAME_PAIR.fullmatch(p) for p in m.group(1).split(",")] if m else []
            if not pairs or any(p is None for p in pairs):
                return self._fallback(text, ctx, "unrecognised RENAME TABLE")
            first = pairs[0]
            assert first is not None
            return StatementLineage(
                StatementKind.DDL,
                (),
                (self._name(first.group(2), ctx),),
                lifecycle=Lifecycle.RENAME,
                previous_name=self._name(first.group(1), ctx),
            )
        if head.startswith("replace"):
            rewritten = _REPLACE_INTO.sub(r"\1INSERT\2", text, count=1)
            if rewritten != text:
                tokens = ctx.dialect.tokenize(rewritten)
                return self._parse_statement(rewritten, tokens, ctx)
            return _NOT_SPECIAL
        if head.startswith("set"):
            m = _SEARCH_PATH.match(text)
            if m is not None:
                for part in m.group(1).split(","):
                    name = part.strip().strip("'\"")
                    if name and name.lower() != "$user":
                        ctx.schema = name
                        break
                return StatementLineage(StatementKind.OTHER, (), ())
        return _NOT_SPECIAL

    def _parse_inner_query(self, sql: str, ctx: ScriptContext) -> StatementLineage | StatementError:
        try:
            parsed = [e for e in ctx.dialect.parse(sql) if e is not None]
        except RecursionError:
            raise
        except Exception as exc:
            return StatementError(0, f"inner query: {_short(exc)}", sql[:200])
        if len(parsed) != 1 or not isinstance(parsed[0], exp.Query):
            return StatementError(0, "inner query is not a SELECT", sql[:200])
        # Trace it as a CTAS into a placeholder to get its output columns.
        placeholder = exp.to_table("__unload__")
        extractor = StatementExtractor(ctx)
        found = extractor.extract(exp.Create(this=placeholder, kind="TABLE", expression=parsed[0]))
        probe = extractor.dataset(placeholder)
        if probe is not None:
            ctx.created.pop(probe, None)
        return replace(found, outputs=())

    def _name(self, raw: str, ctx: ScriptContext) -> DatasetRef:
        table = exp.to_table(
            raw.replace("`", '"') if ctx.spec.name != "mysql" else raw, dialect=ctx.dialect
        )
        return StatementExtractor(ctx).dataset(table) or DatasetRef(raw)

    # -- the text scan for very large statements ---------------------------------

    def _scan_script(self, normalized: str, fp: str, ctx: ScriptContext, reason: str) -> _Cached:
        pieces = [p.strip() for p in normalized.split(";") if p.strip()]
        statements: list[StatementLineage] = []
        errors: list[StatementError] = []
        for index, piece in enumerate(pieces):
            result = self._scan(piece, ctx, reason)
            if isinstance(result, StatementError):
                errors.append(replace(result, index=index))
                continue
            statement_fp = fp if len(pieces) == 1 else digest(ctx.spec.name, piece)
            job_key = digest(ctx.spec.name, self.folder.fold_text(piece))
            statements.append(
                replace(result, index=index, fingerprint=statement_fp, job_key=job_key)
            )
        return _Cached(tuple(statements), tuple(errors))

    def _scan(
        self, normalized: str, ctx: ScriptContext, reason: str
    ) -> StatementLineage | StatementError:
        def unquote(part: str) -> str:
            if part[:1] in {'"', "`"}:
                return part[1:-1].replace('""', '"')
            return str(ctx.dialect.normalize_identifier(exp.to_identifier(part)).name)

        found = scan_tables(normalized, unquote)
        extractor = StatementExtractor(ctx)

        def dataset(parts: tuple[str, ...]) -> DatasetRef:
            padded = ("", "", *parts)[-3:]
            return extractor.qualified(padded[0], padded[1], padded[2])

        inputs = tuple(dict.fromkeys(dataset(p) for p in found.inputs))
        outputs = tuple(dict.fromkeys(dataset(p) for p in found.outputs))
        kind = _guess_kind(normalized)
        if kind is StatementKind.SELECT:
            outputs = ()
        if not inputs and not outputs:
            return StatementError(0, f"{reason}; no tables found", normalized[:200])
        return StatementLineage(
            kind,
            inputs,
            outputs,
            tuple(TargetLineage(o, {}) for o in outputs),
            hidden_datasets=frozenset(d for d in (*inputs, *outputs) if ctx.is_hidden(d)),
            parser="text-scan",
            warnings=(f"table lineage only ({reason})",),
        )

    # -- the openlineage-sql fallback -------------------------------------------

    def _fallback_script(
        self, sql: str, fp: str, spec: DialectSpec, ctx: ScriptContext, reason: str
    ) -> _Cached:
        result = self._fallback(sql, ctx, reason)
        if isinstance(result, StatementError):
            return _Cached((), (result,))
        job_key = digest(spec.name, self.folder.fold_text(normalize(sql, spec)))
        return _Cached((replace(result, fingerprint=fp, job_key=job_key),), ())

    def _fallback(
        self, text: str, ctx: ScriptContext, reason: str
    ) -> StatementLineage | StatementError:
        try:
            meta = openlineage_sql.parse(
                [text], dialect=ctx.spec.openlineage, default_schema=ctx.schema
            )
        except BaseException as exc:  # the extension raises its own exception types
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            return StatementError(0, f"{reason}; openlineage-sql: {_short(exc)}", text[:200])
        inputs = [self._ol_table(t, ctx) for t in meta.in_tables]
        outputs = [self._ol_table(t, ctx) for t in meta.out_tables]
        if not inputs and not outputs:
            return StatementError(0, reason, text[:200])
        kind = _guess_kind(text)
        if kind is StatementKind.SELECT:
            outputs = []
        if outputs and kind is StatementKind.SELECT:
            kind = StatementKind.INSERT
        fields: dict[str, tuple[InputField, ...]] = {}
        if len(outputs) == 1:
            for lineage in meta.column_lineage:
                sources = tuple(
                    InputField(
                        FieldRef(self._ol_table(c.origin, ctx), c.name), frozenset({TRANSFORMATION})
                    )
                    for c in lineage.lineage
                    if c.origin is not None
                )
                if sources:
                    fields[lineage.descendant.name] = sources
        targets = tuple(TargetLineage(o, fields if len(outputs) == 1 else {}) for o in outputs)
        hidden = frozenset(d for d in (*inputs, *outputs) if ctx.is_hidden(d))
        return StatementLineage(
            kind,
            tuple(dict.fromkeys(inputs)),
            tuple(dict.fromkeys(outputs)),
            targets,
            hidden_datasets=hidden,
            parser="openlineage-sql",
            warnings=(f"parsed with openlineage-sql ({reason})",),
        )

    def _ol_table(self, meta: object, ctx: ScriptContext) -> DatasetRef:
        database = getattr(meta, "database", None) or ""
        schema = getattr(meta, "schema", None) or ""
        name = getattr(meta, "name", "") or ""
        quote = getattr(meta, "quote_style", None)

        def norm(part: str, quoted: object) -> str:
            if not part or quoted:
                return quoted_part(part, bool(quoted), ctx.dialect)
            return ctx.dialect.normalize_identifier(exp.to_identifier(part)).name

        database = norm(database, getattr(quote, "database", None))
        schema = norm(schema, getattr(quote, "schema", None))
        name = norm(name, getattr(quote, "name", None))
        return StatementExtractor(ctx).qualified(database, schema, name)


def _split(tokens: list[Token]) -> list[list[Token]]:
    chunks: list[list[Token]] = []
    current: list[Token] = []
    for token in tokens:
        if token.token_type is TokenType.SEMICOLON:
            if current:
                chunks.append(current)
            current = []
        else:
            current.append(token)
    if current:
        chunks.append(current)
    return chunks


def _apply_use(node: exp.Use, ctx: ScriptContext) -> None:
    kind = str(node.args.get("kind") or "").upper()
    table = node.this
    if not isinstance(table, exp.Table) or kind in {"WAREHOUSE", "ROLE", "SECONDARY ROLES"}:
        return
    if ctx.spec.name_parts == 2:
        ctx.schema = table.name
        return
    if kind == "SCHEMA" or table.db:
        if table.db:
            ctx.database = table.db
        ctx.schema = table.name
    elif kind in {"DATABASE", "CATALOG", ""}:
        ctx.database = table.name
        if ctx.spec.name == "snowflake":
            ctx.schema = "PUBLIC"


def _guess_kind(text: str) -> StatementKind:
    for pattern, kind in _KIND_GUESS:
        if pattern.search(text):
            return kind
    return StatementKind.OTHER


def _short(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:200]


__all__ = ["DEFAULT_SCRATCH_PATTERNS", "SchemaProvider", "SqlLineageParser"]
