"""Lineage of one parsed sqlglot statement: what it reads, writes, and how columns flow.

DML without a plain query (UPDATE, DELETE, MERGE, multi-table INSERT) is
rewritten into an equivalent SELECT whose projections are the assigned
values, so one column tracer serves every statement kind.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect, NormalizationStrategy
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers
from sqlglot.optimizer.qualify_columns import qualify_columns
from sqlglot.optimizer.qualify_tables import qualify_tables
from sqlglot.optimizer.scope import Scope, build_scope
from sqlglot.schema import MappingSchema

from catalog import naming
from ingest.sql.columns import ColumnTracer, Reached, is_table_star
from ingest.sql.dialects import DialectSpec
from ingest.sql.folding import DateSuffixFolder
from ingest.sql.model import (
    IDENTITY,
    DatasetRef,
    FieldRef,
    InputField,
    Lifecycle,
    StatementKind,
    StatementLineage,
    Subtype,
    TargetLineage,
    Transformation,
)

ColumnsOf = Callable[[DatasetRef], "tuple[str, ...] | None"]

_URI = re.compile(r"^([A-Za-z][\w+.-]*)://([^/]*)(/.*)?$")
_GENERATED_NAME = re.compile(r"^_col_\d+$")


_FOLDS = {NormalizationStrategy.UPPERCASE: str.upper, NormalizationStrategy.LOWERCASE: str.lower}


def quoted_part(text: str, quoted: bool, dialect: Dialect) -> str:
    """``text`` as a name part: in double quotes when it was quoted in a dialect that folds
    case and differs from its folded form (catalog.naming keeps the case of quoted parts)."""
    fold = _FOLDS.get(dialect.normalization_strategy)
    return text if not quoted or fold is None else naming.quote(text, fold)


def _aliased_table(target: exp.Table, from_: exp.Expr | None) -> exp.Table | None:
    """The table of the FROM clause that an UPDATE's one-part target names by its alias."""
    if target.db or target.catalog or not isinstance(from_, exp.From):
        return None
    first = from_.this
    joins = [*(first.args.get("joins") or []), *(from_.args.get("joins") or [])]
    for table in [first, *(j.this for j in joins)]:
        if isinstance(table, exp.Table) and table.alias and table.alias == target.name:
            return table
    return None


def location(uri: str) -> DatasetRef:
    """Return the dataset of a file, object-store or stage location."""
    uri = uri.strip()
    if uri.startswith("@"):
        return DatasetRef(uri, "stage")
    m = _URI.match(uri)
    if m:
        scheme, authority, path = m.groups()
        return DatasetRef((path or "").lstrip("/"), f"{scheme}://{authority}")
    return DatasetRef(uri, "file")


@dataclass
class ScriptContext:
    """What a statement needs to know about its surroundings in a script."""

    spec: DialectSpec
    dialect: Dialect
    database: str | None
    schema: str | None
    provider_columns: ColumnsOf
    folder: DateSuffixFolder
    is_scratch: Callable[[DatasetRef], bool]
    # Tables created earlier in the same script, with their columns.
    created: dict[DatasetRef, tuple[str, ...] | None] = field(default_factory=dict)
    temporary: set[DatasetRef] = field(default_factory=set)

    def columns_of(self, dataset: DatasetRef) -> tuple[str, ...] | None:
        if dataset in self.created:
            return self.created[dataset]
        if dataset.is_location:
            return None
        return self.provider_columns(dataset)

    def is_hidden(self, dataset: DatasetRef) -> bool:
        return dataset in self.temporary or self.is_scratch(dataset)


class Unsupported(Exception):
    """The statement is valid SQL but outside what lineage extraction handles."""


@dataclass
class _Target:
    dataset: DatasetRef
    explicit: list[str] | None = None
    positional: bool = False
    static_partitions: frozenset[str] = frozenset()
    schema: tuple[tuple[str, str], ...] | None = None


@dataclass
class _Plan:
    kind: StatementKind
    query: exp.Query | None = None
    targets: list[_Target] = field(default_factory=list)
    # Output slot i of a rewritten DML query feeds (target index, column).
    slots: list[tuple[int, str]] | None = None
    extra_inputs: list[DatasetRef] = field(default_factory=list)
    exclude_inputs: set[DatasetRef] = field(default_factory=set)
    lifecycle: Lifecycle | None = None
    previous: DatasetRef | None = None
    temporary: bool = False
    read_only: bool = False
    # Columns of tables this statement creates, by target index.
    created_columns: dict[int, tuple[str, ...]] = field(default_factory=dict)


class StatementExtractor:
    """Extracts the lineage of sqlglot statements in one script context."""

    def __init__(self, ctx: ScriptContext) -> None:
        self.ctx = ctx

    # -- names ---------------------------------------------------------------

    def dataset(self, table: exp.Table) -> DatasetRef | None:
        """The dataset a table reference names, qualified with the defaults and folded."""
        this = table.this
        if isinstance(this, exp.Var) and this.name.startswith("@"):
            return DatasetRef(this.name, "stage")
        if not isinstance(this, exp.Identifier):
            return None
        part = self.part
        return self.qualified(
            part(table.args.get("catalog")), part(table.args.get("db")), part(this)
        )

    def part(self, identifier: exp.Expr | None) -> str:
        """An identifier's text, quoted when its dialect folds case and only its quotes kept
        this one's (``"MixedCase"``), as catalog.naming spells it."""
        if not isinstance(identifier, exp.Identifier):
            return identifier.name if identifier is not None else ""
        return quoted_part(identifier.name, identifier.quoted, self.ctx.dialect)

    def qualified(self, catalog: str, db: str, name: str) -> DatasetRef:
        spec, ctx = self.ctx.spec, self.ctx
        if catalog in spec.implicit_catalogs:
            catalog = ""
        if spec.name_parts == 3:
            parts = [catalog or ctx.database or "", db or ctx.schema or "", name]
        elif catalog:
            parts = [catalog, db, name]
        else:
            parts = [db or ctx.schema or ctx.database or "", name]
        text = ".".join(p for p in parts if p)
        return DatasetRef(self.ctx.folder.fold(text) if self.ctx.folder.enabled else text)

    # -- entry point ---------------------------------------------------------

    def extract(self, statement: exp.Expr) -> StatementLineage:
        statement = normalize_identifiers(statement, dialect=self.ctx.dialect)
        _drop_implicit_catalogs(statement, self.ctx.spec.implicit_catalogs)
        plan = self._plan(statement)
        return self._lineage(plan)

    # -- planning: what kind, which query, which targets -----------------------

    def _plan(self, node: exp.Expr) -> _Plan:
        if isinstance(node, (exp.Select, exp.SetOperation, exp.Subquery)):
            return self._plan_select(node)
        handlers: dict[type[exp.Expr], Callable[[exp.Expr], _Plan]] = {
            exp.Insert: self._plan_insert,
            exp.Create: self._plan_create,
            exp.Merge: self._plan_merge,
            exp.Update: self._plan_update,
            exp.Delete: self._plan_delete,
            exp.Copy: self._plan_copy,
            exp.Export: self._plan_export,
            exp.LoadData: self._plan_load,
            exp.MultitableInserts: self._plan_multitable_insert,
            exp.Drop: self._plan_drop,
            exp.TruncateTable: self._plan_truncate,
            exp.Alter: self._plan_alter,
            exp.Cache: self._plan_cache,
        }
        handler = handlers.get(type(node))
        if handler is None:
            return _Plan(StatementKind.OTHER)
        return handler(node)

    def _plan_select(self, node: exp.Expr) -> _Plan:
        into = node.args.get("into") if isinstance(node, exp.Select) else None
        if isinstance(into, exp.Into) and isinstance(into.this, exp.Table):
            target = self._table_target(into.this)
            query = node.copy()
            assert isinstance(query, exp.Query)
            query.set("into", None)
            temporary = bool(into.args.get("temporary"))
            return _Plan(
                StatementKind.CTAS,
                query=query,
                targets=[target],
                temporary=temporary,
                lifecycle=Lifecycle.CREATE,
            )
        assert isinstance(node, exp.Query)
        return _Plan(StatementKind.SELECT, query=node, read_only=True)

    def _table_target(self, node: exp.Expr) -> _Target:
        explicit = None
        if isinstance(node, exp.Schema):
            explicit = [e.name for e in node.expressions if isinstance(e, exp.Identifier)]
            node = node.this
        if not isinstance(node, exp.Table):
            raise Unsupported(f"cannot write to {type(node).__name__}")
        dataset = self.dataset(node)
        if dataset is None:
            raise Unsupported("unsupported target table")
        partition = node.args.get("partition")
        static: frozenset[str] = frozenset()
        if isinstance(partition, exp.Partition):
            static = frozenset(e.this.name for e in partition.expressions if isinstance(e, exp.EQ))
        return _Target(dataset, explicit=explicit or None, static_partitions=static)

    def _plan_insert(self, node: exp.Expr) -> _Plan:
        assert isinstance(node, exp.Insert)
        query = node.expression
        if isinstance(query, exp.Query):
            with_ = node.args.get("with_")
            if with_ is not None and not query.args.get("with_"):
                query = query.copy()
                query.set("with_", with_.copy())
        else:
            query = None
        this = node.this
        if isinstance(this, exp.Directory):
            path = this.this.name if isinstance(this.this, exp.Literal) else ""
            return _Plan(StatementKind.UNLOAD, query=query, targets=[_Target(location(path))])
        target = self._table_target(this)
        target.positional = True
        kind = (
            StatementKind.INSERT_OVERWRITE if node.args.get("overwrite") else StatementKind.INSERT
        )
        return _Plan(
            kind,
            query=query,
            targets=[target],
            lifecycle=Lifecycle.OVERWRITE if kind is StatementKind.INSERT_OVERWRITE else None,
        )

    def _plan_create(self, node: exp.Expr) -> _Plan:
        assert isinstance(node, exp.Create)
        kind = str(node.args.get("kind") or "").upper()
        if kind not in {"TABLE", "VIEW"} and "VIEW" not in kind:
            return _Plan(StatementKind.OTHER)
        temporary = _is_temporary(node)
        target = self._table_target(node.this)
        query = node.expression
        clone = node.args.get("clone")
        replace = bool(node.args.get("replace"))
        if isinstance(query, exp.Query):
            view = "VIEW" in kind
            return _Plan(
                StatementKind.CREATE_VIEW if view else StatementKind.CTAS,
                query=query,
                targets=[target],
                temporary=temporary,
                lifecycle=None if view else (Lifecycle.OVERWRITE if replace else Lifecycle.CREATE),
            )
        if isinstance(clone, exp.Clone) and isinstance(clone.this, exp.Table):
            return _Plan(
                StatementKind.CTAS,
                query=exp.select("*").from_(clone.this.copy()),
                targets=[target],
                temporary=temporary,
                lifecycle=Lifecycle.CREATE,
            )
        target.schema = self._declared_schema(node)
        return _Plan(
            StatementKind.DDL,
            targets=[target],
            temporary=temporary,
            lifecycle=Lifecycle.CREATE,
        )

    def _declared_schema(self, node: exp.Create) -> tuple[tuple[str, str], ...] | None:
        this = node.this
        candidates: list[exp.Expr] = list(this.expressions) if isinstance(this, exp.Schema) else []
        properties = node.args.get("properties")
        if isinstance(properties, exp.Properties):
            candidates.extend(properties.expressions)
        columns: list[tuple[str, str]] = []
        for item in candidates:
            if isinstance(item, exp.ColumnDef):
                kind = item.args.get("kind")
                columns.append((item.name, kind.sql(self.ctx.dialect) if kind else ""))
            elif isinstance(item, exp.LikeProperty) and isinstance(item.this, exp.Table):
                source = self.dataset(item.this)
                known = self.ctx.columns_of(source) if source else None
                if known:
                    columns.extend((c, "") for c in known)
        return tuple(columns) or None

    def _plan_cache(self, node: exp.Expr) -> _Plan:
        query = node.args.get("expression")
        if not isinstance(query, exp.Query) or not isinstance(node.this, exp.Table):
            return _Plan(StatementKind.OTHER)
        return _Plan(
            StatementKind.CREATE_VIEW,
            query=query,
            targets=[self._table_target(node.this)],
            temporary=True,
        )

    def _plan_merge(self, node: exp.Expr) -> _Plan:
        assert isinstance(node, exp.Merge)
        target_table = node.this
        using = node.args.get("using")
        if not isinstance(target_table, exp.Table) or using is None:
            raise Unsupported("MERGE without a target table or source")
        target = self._table_target(target_table)
        source_alias = using.alias_or_name
        target_columns = self.ctx.columns_of(target.dataset)
        source_columns = self._source_columns(using)
        values: list[exp.Expr] = []
        slots: list[tuple[int, str]] = []
        conditions: list[exp.Expr] = []
        whens = node.args.get("whens")
        for when in whens.expressions if isinstance(whens, exp.Whens) else ():
            condition = when.args.get("condition")
            if condition is not None:
                conditions.append(condition.copy())
            then = when.args.get("then")
            if isinstance(then, exp.Update):
                for assignment in then.expressions:
                    if isinstance(assignment, exp.Star):
                        names = target_columns or source_columns or ()
                        for name in names:
                            values.append(exp.column(name, table=source_alias))
                            slots.append((0, name))
                    elif isinstance(assignment, exp.EQ) and isinstance(assignment.this, exp.Column):
                        values.append(assignment.expression.copy())
                        slots.append((0, assignment.this.name))
            elif isinstance(then, exp.Insert):
                columns = then.this
                row = then.expression
                if isinstance(columns, exp.Star) or columns is None:
                    names = target_columns or source_columns or ()
                    for name in names:
                        values.append(exp.column(name, table=source_alias))
                        slots.append((0, name))
                    continue
                listed = [c.name for c in columns.expressions]
                row_values = list(row.expressions) if isinstance(row, exp.Tuple) else []
                for name, value in zip(listed, row_values, strict=False):
                    values.append(_qualify_bare_columns(value.copy(), source_alias))
                    slots.append((0, name))
        select = exp.Select(
            expressions=[v.as_(f"__m{i}") for i, v in enumerate(values)] or [exp.Literal.number(1)]
        )
        select = select.from_(target_table.copy())
        join_on = node.args.get("on")
        join = exp.Join(this=using.copy(), on=join_on.copy() if join_on else None)
        select.append("joins", join)
        if conditions:
            select = select.where(exp.and_(*conditions))
        return _Plan(
            StatementKind.MERGE,
            query=select,
            targets=[target],
            slots=slots,
            exclude_inputs={target.dataset},
        )

    def _source_columns(self, source: exp.Expr) -> tuple[str, ...] | None:
        if isinstance(source, exp.Table):
            dataset = self.dataset(source)
            return self.ctx.columns_of(dataset) if dataset else None
        if isinstance(source, exp.Subquery) and isinstance(source.this, exp.Query):
            names = source.this.named_selects
            return None if "*" in names else tuple(names)
        return None

    def _plan_update(self, node: exp.Expr) -> _Plan:
        assert isinstance(node, exp.Update)
        target_table = node.this
        if not isinstance(target_table, exp.Table):
            raise Unsupported("UPDATE of something other than a table")
        from_ = node.args.get("from_")
        aliased = _aliased_table(target_table, from_)
        values: list[exp.Expr] = []
        slots: list[tuple[int, str]] = []
        for assignment in node.expressions:
            if isinstance(assignment, exp.EQ) and isinstance(assignment.this, exp.Column):
                values.append(assignment.expression.copy())
                slots.append((0, assignment.this.name))
        if aliased is not None:  # T-SQL: UPDATE c SET … FROM dbo.customers c JOIN …
            assert isinstance(from_, exp.From)
            target = self._table_target(aliased)
            select = self._from_with_joins(from_.this, None, list(from_.args.get("joins") or []))
        else:
            target = self._table_target(target_table)
            select = self._from_with_joins(target_table, from_, [])
        select.set(
            "expressions",
            [v.as_(f"__u{i}") for i, v in enumerate(values)] or [exp.Literal.number(1)],
        )
        where = node.args.get("where")
        if isinstance(where, exp.Where):
            select.set("where", where.copy())
        return _Plan(
            StatementKind.UPDATE,
            query=select,
            targets=[target],
            slots=slots,
            exclude_inputs={target.dataset},
        )

    def _from_with_joins(
        self, target: exp.Table, from_: exp.Expr | None, using: Sequence[exp.Expr]
    ) -> exp.Select:
        """SELECT … FROM target, with the target's joins and extra FROM / USING tables."""
        base = target.copy()
        joins = list(base.args.get("joins") or [])
        base.set("joins", None)
        select = exp.Select().from_(base)
        extra: list[exp.Expr] = []
        if isinstance(from_, exp.From):
            extra.append(from_.this)
            extra.extend(from_.args.get("joins") or [])
        extra.extend(using)
        for item in extra:
            if isinstance(item, exp.Join):
                joins.append(item.copy())
                continue
            item = item.copy()
            nested = list(item.args.get("joins") or [])
            item.set("joins", None)
            joins.append(exp.Join(this=item, kind="CROSS"))
            joins.extend(j.copy() for j in nested)
        for join in joins:
            select.append("joins", join)
        return select

    def _plan_delete(self, node: exp.Expr) -> _Plan:
        assert isinstance(node, exp.Delete)
        target_table = node.this
        if not isinstance(target_table, exp.Table):
            raise Unsupported("DELETE from something other than a table")
        select = self._from_with_joins(target_table, None, node.args.get("using") or [])
        select.set("expressions", [exp.Literal.number(1)])
        where = node.args.get("where")
        if isinstance(where, exp.Where):
            select.set("where", where.copy())
        # MySQL multi-table DELETE names the deleted tables by alias.
        aliases = {t.alias_or_name for t in node.args.get("tables") or []}
        tables = [target_table] + [
            j.this for j in target_table.args.get("joins") or [] if isinstance(j.this, exp.Table)
        ]
        targets = [
            self._table_target(t) for t in tables if not aliases or t.alias_or_name in aliases
        ] or [self._table_target(target_table)]
        return _Plan(
            StatementKind.DELETE,
            query=select,
            targets=targets,
            slots=[],
            exclude_inputs={t.dataset for t in targets},
        )

    def _plan_copy(self, node: exp.Expr) -> _Plan:
        assert isinstance(node, exp.Copy)
        this = node.this
        files = list(node.args.get("files") or [])
        loading = bool(node.args.get("kind"))
        this_location = _location_of(this)
        if loading and this_location is None:
            # COPY table FROM files / stage
            target = self._table_target(this)
            inputs = [loc for loc in (_location_of(f) for f in files) if loc is not None]
            return _Plan(StatementKind.COPY, targets=[target], extra_inputs=inputs)
        if loading and this_location is not None:
            # Snowflake COPY INTO @stage FROM table | (query): an unload
            source = files[0] if files else None
            query = _as_query(source)
            return _Plan(StatementKind.COPY, query=query, targets=[_Target(this_location)])
        query = _as_query(this)
        outputs = [loc for loc in (_location_of(f) for f in files) if loc is not None]
        return _Plan(
            StatementKind.COPY,
            query=query,
            targets=[_Target(o) for o in outputs],
            read_only=not outputs,
        )

    def _plan_export(self, node: exp.Expr) -> _Plan:
        query = node.this
        uri = ""
        options = node.args.get("options")
        if isinstance(options, exp.Properties):
            for prop in options.expressions:
                if isinstance(prop, exp.Property) and prop.name.lower() == "uri":
                    uri = prop.args["value"].name
        if not isinstance(query, exp.Query) or not uri:
            raise Unsupported("EXPORT DATA without a query or uri")
        return _Plan(StatementKind.UNLOAD, query=query, targets=[_Target(location(uri))])

    def _plan_load(self, node: exp.Expr) -> _Plan:
        assert isinstance(node, exp.LoadData)
        target = self._table_target(node.this)
        inputs: list[DatasetRef] = []
        inpath = node.args.get("inpath")
        if isinstance(inpath, exp.Literal):
            inputs.append(location(inpath.name))
        files = node.args.get("files")
        if isinstance(files, exp.Properties):
            for prop in files.expressions:
                value = prop.args.get("value")
                if isinstance(prop, exp.Property) and prop.name.lower() in {"uris", "uri"}:
                    literals = value.expressions if isinstance(value, exp.Array) else [value]
                    inputs.extend(location(v.name) for v in literals if isinstance(v, exp.Literal))
        return _Plan(StatementKind.COPY, targets=[target], extra_inputs=inputs)

    def _plan_multitable_insert(self, node: exp.Expr) -> _Plan:
        source = node.args.get("source")
        if isinstance(source, (exp.Table, exp.Subquery)):
            return self._plan_from_first_insert(node, source)
        if not isinstance(source, exp.Query):
            raise Unsupported("multi-table INSERT without a source query")
        targets: list[_Target] = []
        values: list[exp.Expr] = []
        slots: list[tuple[int, str]] = []
        conditions: list[exp.Expr] = []
        source_names = [n for n in source.named_selects if n != "*"]
        for branch in node.expressions:
            insert = branch.this if isinstance(branch, exp.ConditionalInsert) else branch
            condition = (
                branch.args.get("expression") if isinstance(branch, exp.ConditionalInsert) else None
            )
            if condition is not None:
                conditions.append(condition.copy())
            if not isinstance(insert, exp.Insert):
                continue
            target = self._table_target(insert.this)
            index = len(targets)
            targets.append(target)
            row = insert.expression
            row_values: list[exp.Expr] = []
            if isinstance(row, exp.Values) and row.expressions:
                first = row.expressions[0]
                row_values = list(first.expressions) if isinstance(first, exp.Tuple) else [first]
            else:
                row_values = [exp.column(n) for n in source_names]
            names = target.explicit or list(self.ctx.columns_of(target.dataset) or source_names)
            for name, value in zip(names, row_values, strict=False):
                values.append(value.copy())
                slots.append((index, name))
        select = exp.Select(
            expressions=[v.as_(f"__i{i}") for i, v in enumerate(values)] or [exp.Literal.number(1)]
        ).from_(
            exp.Subquery(this=source.copy(), alias=exp.TableAlias(this=exp.to_identifier("__src")))
        )
        if conditions:
            select = select.where(exp.or_(*conditions))
        return _Plan(StatementKind.INSERT, query=select, targets=targets, slots=slots)

    def _plan_from_first_insert(self, node: exp.Expr, source: exp.Expr) -> _Plan:
        """Hive and Spark's ``FROM src INSERT … SELECT … [WHERE …] INSERT … SELECT …``: each
        branch selects from the shared source. Planned as one query over the source whose
        columns are every branch's values, filtered by any branch's condition and grouped by
        every branch's keys, each value slotted into its branch's target."""
        targets: list[_Target] = []
        values: list[exp.Expr] = []
        slots: list[tuple[int, str]] = []
        conditions: list[exp.Expr] = []
        groups: list[exp.Expr] = []
        for insert in node.expressions:
            row = insert.expression if isinstance(insert, exp.Insert) else None
            if not isinstance(row, exp.Select) or row.args.get("from") is not None:
                raise Unsupported("multi-table INSERT branch that is not a SELECT of its source")
            target = self._table_target(insert.this)
            index = len(targets)
            targets.append(target)
            where = row.args.get("where")
            conditions.append(where.this.copy() if where is not None else exp.true())
            group = row.args.get("group")
            if group is not None:
                groups.extend(g.copy() for g in group.expressions)
            selected = [e for e in row.expressions if not isinstance(e, exp.Star)]
            names = target.explicit or list(
                self.ctx.columns_of(target.dataset) or [e.alias_or_name for e in selected]
            )
            for name, value in zip(names, selected, strict=False):
                values.append(value.unalias().copy())
                slots.append((index, name))
        select = exp.Select(
            expressions=[v.as_(f"__i{i}") for i, v in enumerate(values)] or [exp.Literal.number(1)]
        ).from_(source.copy())
        # A branch without a condition keeps every row; the others' conditions still filter
        # what reaches their targets, so they are kept (``cond OR TRUE``).
        select = select.where(exp.or_(*conditions))
        if groups:
            select = select.group_by(*groups)
        overwrite = all(insert.args.get("overwrite") for insert in node.expressions)
        kind = StatementKind.INSERT_OVERWRITE if overwrite else StatementKind.INSERT
        return _Plan(kind, query=select, targets=targets, slots=slots)

    def _plan_drop(self, node: exp.Expr) -> _Plan:
        kind = str(node.args.get("kind") or "").upper()
        if kind not in {"TABLE", "VIEW"} and "VIEW" not in kind:
            return _Plan(StatementKind.OTHER)
        tables = node.args.get("tables") or ([node.this] if node.this is not None else [])
        targets = [self._table_target(t) for t in tables if isinstance(t, exp.Table)]
        return _Plan(StatementKind.DDL, targets=targets, lifecycle=Lifecycle.DROP)

    def _plan_truncate(self, node: exp.Expr) -> _Plan:
        targets = [self._table_target(t) for t in node.expressions if isinstance(t, exp.Table)]
        return _Plan(StatementKind.DDL, targets=targets, lifecycle=Lifecycle.TRUNCATE)

    def _plan_alter(self, node: exp.Expr) -> _Plan:
        kind = str(node.args.get("kind") or "").upper()
        table = node.this
        if (kind not in {"TABLE", "VIEW"} and "VIEW" not in kind) or not isinstance(
            table, exp.Table
        ):
            return _Plan(StatementKind.OTHER)
        old = self._table_target(table)
        for action in node.args.get("actions") or []:
            if isinstance(action, exp.AlterRename) and isinstance(action.this, exp.Table):
                new_table = action.this
                new = self.qualified(
                    new_table.catalog or (table.catalog if not new_table.db else ""),
                    new_table.db or table.db,
                    new_table.name,
                )
                return _Plan(
                    StatementKind.DDL,
                    targets=[_Target(new)],
                    lifecycle=Lifecycle.RENAME,
                    previous=old.dataset,
                )
        return _Plan(StatementKind.DDL, targets=[old], lifecycle=Lifecycle.ALTER)

    # -- lineage from a plan -------------------------------------------------

    def _lineage(self, plan: _Plan) -> StatementLineage:
        warnings: list[str] = []
        inputs: list[DatasetRef] = list(plan.extra_inputs)
        target_lineages: list[TargetLineage] = []
        unknown: frozenset[DatasetRef] = frozenset()
        if plan.query is not None:
            try:
                traced_inputs, target_lineages, unknown = self._trace(plan, warnings)
            except RecursionError:
                raise
            except Exception as exc:  # sqlglot's optimizer raises many kinds on odd input
                warnings.append(f"column lineage unavailable: {_short(exc)}")
                inputs.extend(self._tables_without_columns(plan.query))
                target_lineages = [
                    TargetLineage(t.dataset, {}, schema=t.schema) for t in plan.targets
                ]
            else:
                inputs.extend(traced_inputs)
        else:
            target_lineages = [TargetLineage(t.dataset, {}, schema=t.schema) for t in plan.targets]
        inputs = [d for d in _unique(inputs) if d not in plan.exclude_inputs]
        outputs = list(_unique(t.dataset for t in plan.targets))
        if plan.temporary:
            self.ctx.temporary.update(outputs)
        creates = {StatementKind.CTAS, StatementKind.CREATE_VIEW, StatementKind.DDL}
        if plan.kind in creates and plan.lifecycle in {None, Lifecycle.CREATE, Lifecycle.OVERWRITE}:
            for index, (target, lineage) in enumerate(
                zip(plan.targets, target_lineages, strict=True)
            ):
                declared = tuple(n for n, _ in lineage.schema) if lineage.schema else None
                self.ctx.created[target.dataset] = plan.created_columns.get(index) or declared
        if plan.kind is StatementKind.DDL and plan.lifecycle is Lifecycle.DROP:
            for output in outputs:
                self.ctx.created.pop(output, None)
        hidden = frozenset(d for d in (*inputs, *outputs) if self.ctx.is_hidden(d))
        return StatementLineage(
            kind=plan.kind,
            inputs=tuple(inputs),
            outputs=() if plan.read_only else tuple(outputs),
            targets=() if plan.read_only else tuple(target_lineages),
            lifecycle=plan.lifecycle,
            previous_name=plan.previous,
            hidden_datasets=hidden,
            warnings=tuple(warnings),
            columns_unknown=unknown,
        )

    def _tables_without_columns(self, query: exp.Expr) -> list[DatasetRef]:
        ctes = {c.alias_or_name for c in query.find_all(exp.CTE)}
        out: list[DatasetRef] = []
        for table in query.find_all(exp.Table):
            if not table.db and table.name in ctes:
                continue
            dataset = self.dataset(table)
            if dataset is not None:
                out.append(dataset)
        return out

    def _trace(
        self, plan: _Plan, warnings: list[str]
    ) -> tuple[list[DatasetRef], list[TargetLineage], frozenset[DatasetRef]]:
        """Inputs, lineage per target, and the inputs whose unknown columns it lacks."""
        assert plan.query is not None
        if plan.read_only:
            root = build_scope(plan.query)
            if root is None:
                return self._tables_without_columns(plan.query), [], frozenset()
            return list(self._scope_inputs(root)), [], frozenset()
        qualified = self._qualify(plan.query)
        root = build_scope(qualified)
        if root is None:
            raise Unsupported("no query scope")
        tracer = ColumnTracer(self.dataset, self.ctx.columns_of)
        tracer.index_scopes(root)
        inputs = list(self._scope_inputs(root))
        dataset_level = tracer.dataset_level(root)
        lineages = self._targets(plan, qualified, root, tracer, warnings)
        if tracer.unresolved:
            names = sorted(tracer.unresolved)
            more = f" (+{len(names) - 10} more)" if len(names) > 10 else ""
            warnings.append("unresolved columns: " + ", ".join(names[:10]) + more)
        indirect = _input_fields(dataset_level, None)
        lineages = [TargetLineage(t.dataset, t.fields, indirect, t.schema) for t in lineages]
        unknown: frozenset[DatasetRef] = frozenset()
        starred = any(
            isinstance(p, exp.Star) or is_table_star(p)
            for select in qualified.find_all(exp.Select)
            for p in select.expressions
        )
        if starred or tracer.unresolved:
            unknown = frozenset(
                d
                for d in inputs
                if not d.is_location
                and d not in self.ctx.created
                and self.ctx.columns_of(d) is None
            )
        if unknown:
            tables = ", ".join(sorted(str(d) for d in unknown))
            warnings.append(f"columns of {tables} unknown: their column lineage is left out")
        # A temporary or scratch table sends no events: the catalog will never know its
        # columns, so the log is not to wait for them.
        return inputs, lineages, frozenset(d for d in unknown if not self.ctx.is_hidden(d))

    def _scope_inputs(self, root: Scope) -> Iterable[DatasetRef]:
        for scope in root.traverse():
            for source in scope.sources.values():
                if isinstance(source, exp.Table):
                    dataset = self.dataset(source)
                    if dataset is not None:
                        yield dataset

    def _qualify(self, query: exp.Query) -> exp.Query:
        spec = self.ctx.spec
        mapping: dict[str, object] = {}
        depth = 0
        entries: list[tuple[list[str], tuple[str, ...]]] = []
        ctes = {c.alias_or_name for c in query.find_all(exp.CTE)}
        for table in query.find_all(exp.Table):
            if not table.db and table.name in ctes:
                continue
            dataset = self.dataset(table)
            if dataset is None or dataset.is_location:
                continue
            columns = self.ctx.columns_of(dataset)
            if not columns:
                continue
            parts = self._raw_parts(table)
            entries.append((parts, columns))
            depth = max(depth, len(parts))
        for parts, columns in entries:
            if len(parts) != depth:
                continue
            node = mapping
            for part in parts[:-1]:
                child = node.setdefault(part, {})
                assert isinstance(child, dict)
                node = child
            node[parts[-1]] = dict.fromkeys(columns, "UNKNOWN")
        schema = (
            MappingSchema(mapping, dialect=self.ctx.dialect, normalize=False) if mapping else None
        )
        if spec.name_parts == 3:
            catalog, db = self.ctx.database, self.ctx.schema
        else:
            catalog, db = None, self.ctx.schema or self.ctx.database
        # sqlglot's qualify() without its normalize / quote / validate steps: the
        # statement is normalised once in extract() and the plan's query is ours.
        qualified = qualify_tables(query, db=db, catalog=catalog, dialect=self.ctx.dialect)
        self._correlate_unnests(qualified)
        return qualify_columns(
            qualified,
            schema or MappingSchema(dialect=self.ctx.dialect, normalize=False),
            expand_alias_refs=True,
            expand_stars=True,
        )

    def _correlate_unnests(self, query: exp.Expr) -> None:
        """Qualify a bare column a subquery unnests (``(SELECT COUNT(*) FROM UNNEST(items))``)
        with the one table of the enclosing query that has it: sqlglot resolves such a
        correlated column only when it is qualified."""
        for unnest in list(query.find_all(exp.Unnest)):
            inner = unnest.find_ancestor(exp.Select)
            outer = inner.find_ancestor(exp.Select) if inner is not None else None
            if inner is None or outer is None:
                continue
            for column in unnest.find_all(exp.Column):
                if column.table or self._tables_having(inner, column.name):
                    continue
                owners = self._tables_having(outer, column.name)
                if len(owners) == 1:
                    column.set("table", exp.to_identifier(owners[0].alias_or_name))

    def _tables_having(self, select: exp.Select, column: str) -> list[exp.Table]:
        """The tables of this SELECT's FROM and joins whose known columns include ``column``."""
        from_ = select.args.get("from_")
        first = from_.this if isinstance(from_, exp.From) else None
        joins = [*(select.args.get("joins") or [])]
        found = []
        for table in [first, *(j.this for j in joins)]:
            if isinstance(table, exp.Table):
                dataset = self.dataset(table)
                columns = self.ctx.columns_of(dataset) if dataset is not None else None
                if columns and column in columns:
                    found.append(table)
        return found

    def _raw_parts(self, table: exp.Table) -> list[str]:
        spec, ctx = self.ctx.spec, self.ctx
        catalog, db, name = table.catalog, table.db, table.name
        if spec.name_parts == 3:
            parts = [catalog or ctx.database or "", db or ctx.schema or "", name]
        elif catalog:
            parts = [catalog, db, name]
        else:
            parts = [db or ctx.schema or ctx.database or "", name]
        return [p for p in parts if p]

    def _targets(
        self,
        plan: _Plan,
        query: exp.Query,
        root: Scope,
        tracer: ColumnTracer,
        warnings: list[str],
    ) -> list[TargetLineage]:
        names = list(query.named_selects)
        per_target: list[dict[str, set[tuple[FieldRef, Transformation]]]] = [
            {} for _ in plan.targets
        ]
        if plan.slots is not None:
            for index, (target_index, column) in enumerate(plan.slots):
                per_target[target_index].setdefault(column, set()).update(
                    tracer.position(root, index)
                )
        else:
            for target_index, target in enumerate(plan.targets):
                columns = self._target_columns(target, names, warnings)
                fields = per_target[target_index]
                if columns is None:
                    # An unexpanded star: map the target's known columns by name.
                    for known in self._known_columns(target) or ():
                        fields.setdefault(known, set()).update(tracer.projection(root, known))
                    continue
                for index, target_column in enumerate(columns):
                    if target_column is not None:
                        fields.setdefault(target_column, set()).update(tracer.position(root, index))
        lineages: list[TargetLineage] = []
        for index, (target, fields) in enumerate(zip(plan.targets, per_target, strict=True)):
            mapped = {
                column: _input_fields(frozenset(reached), FieldRef(target.dataset, column))
                for column, reached in fields.items()
            }
            schema = target.schema
            creates = plan.kind in {StatementKind.CTAS, StatementKind.CREATE_VIEW}
            # A created table's columns, unless the catalog knows them (maybe with types).
            columns = self._target_columns(target, names, []) if creates else None
            if columns is not None and None not in columns:
                plan.created_columns[index] = tuple(c for c in columns if c is not None)
                if schema is None and self.ctx.provider_columns(target.dataset) is None:
                    schema = tuple((c, "") for c in plan.created_columns[index])
            lineages.append(
                TargetLineage(target.dataset, {c: f for c, f in mapped.items() if f}, (), schema)
            )
        return lineages

    def _known_columns(self, target: _Target) -> tuple[str, ...] | None:
        if target.explicit:
            return tuple(target.explicit)
        known = self.ctx.columns_of(target.dataset)
        if known is None:
            return None
        return tuple(c for c in known if c not in target.static_partitions)

    def _target_columns(
        self, target: _Target, names: list[str], warnings: list[str]
    ) -> list[str | None] | None:
        """Target column per output position of the query; None if a star is unexpanded."""
        if "*" in names:
            return None
        if target.explicit:
            return list(target.explicit)
        if target.positional:
            known = self._known_columns(target)
            if known is not None and len(known) == len(names):
                return list(known)
            if known is not None:
                warnings.append(
                    f"{target.dataset} has {len(known)} columns, the query gives {len(names)}"
                )
        out: list[str | None] = []
        for name in names:
            out.append(None if _GENERATED_NAME.match(name) else name)
        return out


def _input_fields(reached: Reached, target: FieldRef | None) -> tuple[InputField, ...]:
    grouped: dict[FieldRef, set[Transformation]] = {}
    for source, transformation in reached:
        if source == target and transformation.subtype is Subtype.IDENTITY:
            continue  # a column copied onto itself is no lineage
        grouped.setdefault(source, set()).add(transformation)
    return tuple(
        InputField(source, frozenset(transformations))
        for source, transformations in sorted(grouped.items(), key=lambda kv: kv[0])
    )


def _unique(items: Iterable[DatasetRef]) -> Iterable[DatasetRef]:
    seen: set[DatasetRef] = set()
    for item in items:
        if item not in seen:
            seen.add(item)
            yield item


def _is_temporary(node: exp.Create) -> bool:
    properties = node.args.get("properties")
    if isinstance(properties, exp.Properties):
        return any(isinstance(p, exp.TemporaryProperty) for p in properties.expressions)
    return False


def _location_of(node: exp.Expr | None) -> DatasetRef | None:
    if isinstance(node, exp.Literal) and node.is_string:
        return location(node.name)
    if isinstance(node, exp.Table) and isinstance(node.this, exp.Var):
        text = node.this.name
        if text.startswith("@") or "://" in text:
            return location(text)
    if isinstance(node, exp.Var) and node.name.startswith("@"):
        return location(node.name)
    return None


def _as_query(node: exp.Expr | None) -> exp.Query | None:
    if isinstance(node, exp.Subquery) and isinstance(node.this, exp.Query):
        return node.this
    if isinstance(node, exp.Query):
        return node
    if isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier):
        return exp.select("*").from_(node.copy())
    return None


def _qualify_bare_columns(node: exp.Expr, alias: str) -> exp.Expr:
    for column in node.find_all(exp.Column):
        if not column.table:
            column.set("table", exp.to_identifier(alias))
    return node


def _drop_implicit_catalogs(node: exp.Expr, implicit: frozenset[str]) -> None:
    if not implicit:
        return
    for table in node.find_all(exp.Table):
        if table.catalog in implicit:
            table.set("catalog", None)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


__all__ = ["IDENTITY", "ScriptContext", "StatementExtractor", "Unsupported", "location"]
