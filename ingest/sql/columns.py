"""Column lineage over a qualified sqlglot query: which source columns feed what, and how.

One pass over sqlglot's scopes, memoised per (scope, column), instead of
sqlglot's own ``lineage()`` which re-qualifies the query for every column.
Each reached source column carries an OpenLineage transformation: DIRECT
(IDENTITY, TRANSFORMATION, AGGREGATION) when its value flows into the
target, INDIRECT (JOIN, FILTER, GROUP_BY, SORT, WINDOW, CONDITIONAL) when it
only shapes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from ingest.sql.model import (
    AGGREGATION,
    IDENTITY,
    TRANSFORMATION,
    DatasetRef,
    FieldRef,
    Subtype,
    Transformation,
)

Reached = frozenset[tuple[FieldRef, Transformation]]
_EMPTY: Reached = frozenset()

# Functions whose output reveals nothing of their input (OpenLineage "masking").
_MASKING_FUNCTIONS = frozenset(
    {
        "md5",
        "md5digest",
        "md5_hex",
        "md5_binary",
        "sha",
        "sha1",
        "sha2",
        "sha256",
        "sha512",
        "sha2_hex",
        "sha1_hex",
        "standardhash",
        "farmfingerprint",
        "farm_fingerprint",
        "hash",
        "crc32",
        "xxhash64",
        "murmur3",
        "hll",
        "hashagg",
    }
)
_MASKING_AGGREGATES = (exp.Count, exp.ApproxDistinct)

FILTER = Transformation(Subtype.FILTER)
JOIN = Transformation(Subtype.JOIN)
GROUP_BY = Transformation(Subtype.GROUP_BY)
SORT = Transformation(Subtype.SORT)
WINDOW = Transformation(Subtype.WINDOW)
CONDITIONAL = Transformation(Subtype.CONDITIONAL)


def _is_indirect(t: Transformation) -> bool:
    return t.subtype not in (Subtype.IDENTITY, Subtype.TRANSFORMATION, Subtype.AGGREGATION)


def _derived(role: Transformation, masking: bool = False) -> Transformation:
    """The role of an argument of a function or operator whose result has ``role``."""
    if _is_indirect(role):
        return role
    subtype = Subtype.TRANSFORMATION if role.subtype is Subtype.IDENTITY else role.subtype
    return Transformation(subtype, role.masking or masking)


def _function_name(node: exp.Expr) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    return type(node).__name__.lower()


class ColumnTracer:
    """Traces columns of one qualified query back to the tables they come from."""

    def __init__(
        self,
        dataset_of: Callable[[exp.Table], DatasetRef | None],
        columns_of: Callable[[DatasetRef], tuple[str, ...] | None],
    ) -> None:
        self._dataset_of = dataset_of
        self._columns_of = columns_of
        self._projections: dict[tuple[int, str], Reached] = {}
        self._positions: dict[tuple[int, int], Reached] = {}
        self._scopes_by_node: dict[int, Scope] = {}
        self.unresolved: set[str] = set()

    def index_scopes(self, root: Scope) -> None:
        for scope in root.traverse():
            self._scopes_by_node[id(scope.expression)] = scope

    # -- projections ---------------------------------------------------------

    def projection(self, scope: Scope, name: str) -> Reached:
        """Sources of the output column ``name`` of ``scope``."""
        key = (id(scope), name)
        cached = self._projections.get(key)
        if cached is not None:
            return cached
        self._projections[key] = _EMPTY  # breaks cycles (recursive CTEs)
        result = self._projection(scope, name)
        self._projections[key] = result
        return result

    def _projection(self, scope: Scope, name: str) -> Reached:
        expression = scope.expression
        if isinstance(expression, exp.SetOperation):
            names = expression.named_selects
            if name in names:
                return self.position(scope, names.index(name))
            return self._union_children(scope, lambda child: self.projection(child, name))
        if scope.is_udtf:
            return self._udtf(scope)
        if not isinstance(expression, exp.Select):
            return _EMPTY
        for projection in expression.expressions:
            if projection.alias_or_name == name and not isinstance(projection, exp.Star):
                return self.expression(scope, projection, IDENTITY)
        return self._through_star(scope, expression, name)

    def position(self, scope: Scope, index: int) -> Reached:
        """Sources of the output column at ``index`` of ``scope``."""
        key = (id(scope), index)
        cached = self._positions.get(key)
        if cached is not None:
            return cached
        self._positions[key] = _EMPTY
        expression = scope.expression
        result: Reached = _EMPTY
        if isinstance(expression, exp.SetOperation):
            result = self._union_children(scope, lambda child: self.position(child, index))
        elif isinstance(expression, exp.Select):
            projections = expression.expressions
            starred = any(isinstance(p, exp.Star) or is_table_star(p) for p in projections)
            if not starred and index < len(projections):
                result = self.expression(scope, projections[index], IDENTITY)
        self._positions[key] = result
        return result

    def _union_children(self, scope: Scope, get: Callable[[Scope], Reached]) -> Reached:
        out: set[tuple[FieldRef, Transformation]] = set()
        for child in scope.set_operation_scopes:
            out |= get(child)
        return frozenset(out)

    def _through_star(self, scope: Scope, select: exp.Select, name: str) -> Reached:
        """A column that an unexpanded ``*`` (source schema unknown) passes through."""
        stars = [p for p in select.expressions if isinstance(p, exp.Star) or is_table_star(p)]
        if not stars:
            return _EMPTY
        aliases: list[str] = []
        for star in stars:
            if isinstance(star, exp.Star):
                aliases = list(scope.selected_sources)
                break
            aliases.append(star.table)
        out: set[tuple[FieldRef, Transformation]] = set()
        for alias in aliases:
            source = scope.sources.get(alias)
            if isinstance(source, exp.Table):
                dataset = self._dataset_of(source)
                if dataset is None:
                    continue
                known = self._columns_of(dataset)
                if known is None or name in known:
                    out.add((FieldRef(dataset, name), IDENTITY))
            elif isinstance(source, Scope):
                out |= self.projection(source, name)
        return frozenset(out)

    def _udtf(self, scope: Scope) -> Reached:
        """Every column of a table function's output derives from all columns it unnests."""
        out: set[tuple[FieldRef, Transformation]] = set()
        for column in scope.expression.find_all(exp.Column):
            out |= self._column(scope, column, TRANSFORMATION)
        return frozenset(out)

    # -- expressions ---------------------------------------------------------

    def expression(self, scope: Scope, node: exp.Expr, role: Transformation) -> Reached:
        """Sources of an expression evaluated in ``scope``, whose value plays ``role``."""
        out: set[tuple[FieldRef, Transformation]] = set()
        self._visit(scope, node, role, out)
        return frozenset(out)

    def _visit(
        self,
        scope: Scope,
        node: exp.Expr,
        role: Transformation,
        out: set[tuple[FieldRef, Transformation]],
    ) -> None:
        if isinstance(node, exp.Column):
            out |= self._column(scope, node, role)
            return
        if isinstance(node, (exp.Alias, exp.Paren)):
            self._visit(scope, node.this, role, out)
            return
        if isinstance(node, (exp.Query, exp.Subquery)):
            out |= self._subquery(scope, node, role)
            return
        if isinstance(node, exp.Window):
            self._visit(scope, node.this, role, out)
            window_role = role if _is_indirect(role) else WINDOW
            for part in node.args.get("partition_by") or ():
                self._visit(scope, part, window_role, out)
            order = node.args.get("order")
            if order is not None:
                self._visit(scope, order, window_role, out)
            return
        if isinstance(node, exp.Case):
            condition_role = role if _is_indirect(role) else CONDITIONAL
            value_role = _derived(role)
            if node.this is not None:
                self._visit(scope, node.this, condition_role, out)
            for branch in node.args.get("ifs") or ():
                self._visit(scope, branch.this, condition_role, out)
                true = branch.args.get("true")
                if true is not None:
                    self._visit(scope, true, value_role, out)
            default = node.args.get("default")
            if default is not None:
                self._visit(scope, default, value_role, out)
            return
        if isinstance(node, exp.If):
            condition_role = role if _is_indirect(role) else CONDITIONAL
            self._visit(scope, node.this, condition_role, out)
            for key in ("true", "false"):
                branch = node.args.get(key)
                if branch is not None:
                    self._visit(scope, branch, _derived(role), out)
            return
        if isinstance(node, exp.AggFunc):
            masking = isinstance(node, _MASKING_AGGREGATES)
            if _is_indirect(role):
                child_role = role
            else:
                child_role = Transformation(Subtype.AGGREGATION, role.masking or masking)
            for argument in node.iter_expressions():
                self._visit(scope, argument, child_role, out)
            return
        if isinstance(node, (exp.Literal, exp.Null, exp.Boolean, exp.Star)):
            return
        masking = isinstance(node, exp.Func) and _function_name(node) in _MASKING_FUNCTIONS
        child_role = _derived(role, masking)
        for child in node.iter_expressions():
            self._visit(scope, child, child_role, out)

    def _subquery(self, scope: Scope, node: exp.Expr, role: Transformation) -> Reached:
        query = node.this if isinstance(node, exp.Subquery) else node
        child = self._scopes_by_node.get(id(query)) or self._scopes_by_node.get(id(node))
        if child is None:
            return _EMPTY
        return frozenset((f, t.then(role)) for f, t in self.position(child, 0))

    # -- columns -------------------------------------------------------------

    def _column(self, scope: Scope, column: exp.Column, role: Transformation) -> Reached:
        name = column.name
        alias = column.table
        if not alias:
            return self._unqualified(scope, column, role)
        found = _lookup(scope, alias)
        if found is None and column.args.get("db") is not None:
            # t.struct_col.field: the column is the struct, one level up.
            found = _lookup(scope, column.text("db"))
            name = alias
        if found is None:
            return self._struct_on_single_source(scope, alias, role)
        return self._from_source(found, name, role)

    def _from_source(self, source: exp.Table | Scope, name: str, role: Transformation) -> Reached:
        if isinstance(source, exp.Table):
            dataset = self._dataset_of(source)
            if dataset is None:
                return _EMPTY
            return frozenset({(FieldRef(dataset, name), role)})
        return frozenset((f, t.then(role)) for f, t in self.projection(source, name))

    def _unqualified(self, scope: Scope, column: exp.Column, role: Transformation) -> Reached:
        name = column.name
        select = scope.expression
        # An output alias referenced in ORDER BY / GROUP BY / QUALIFY.
        if isinstance(select, exp.Select):
            for projection in select.expressions:
                if isinstance(projection, exp.Alias) and projection.alias == name:
                    if projection.this is column or column in projection.this.find_all(exp.Column):
                        break
                    return self.expression(scope, projection.this, role)
        candidates = list(_visible_sources(scope))
        owner = self._owner(candidates, name)
        if owner is None:
            self.unresolved.add(name)
            return _EMPTY
        return self._from_source(owner, name, role)

    def _owner(self, candidates: list[exp.Table | Scope], name: str) -> exp.Table | Scope | None:
        """The one source that can own an unqualified column, if there is exactly one."""
        if len(candidates) == 1:
            return candidates[0]
        known_owners: list[exp.Table | Scope] = []
        unknown: list[exp.Table | Scope] = []
        for source in candidates:
            columns = self._source_columns(source)
            if columns is None:
                unknown.append(source)
            elif name in columns:
                known_owners.append(source)
        if len(known_owners) == 1:
            return known_owners[0]
        if not known_owners and len(unknown) == 1:
            return unknown[0]
        return None

    def _source_columns(self, source: exp.Table | Scope) -> Iterable[str] | None:
        if isinstance(source, exp.Table):
            dataset = self._dataset_of(source)
            return None if dataset is None else self._columns_of(dataset)
        expression = source.expression
        if isinstance(expression, (exp.Select, exp.SetOperation)):
            if any(isinstance(p, exp.Star) for p in expression.selects):
                return None
            return expression.named_selects
        return None

    def _struct_on_single_source(self, scope: Scope, alias: str, role: Transformation) -> Reached:
        """``address.city`` where ``address`` is a struct column, not a table alias."""
        owner = self._owner(list(_visible_sources(scope)), alias)
        if owner is None:
            self.unresolved.add(alias)
            return _EMPTY
        return self._from_source(owner, alias, role)

    # -- dataset level -------------------------------------------------------

    def dataset_level(self, root: Scope) -> Reached:
        """INDIRECT sources of the whole result: joins, filters, grouping, sorting."""
        out: set[tuple[FieldRef, Transformation]] = set()
        for scope in root.traverse():
            expression = scope.expression
            if not isinstance(expression, (exp.Select, exp.SetOperation)):
                continue
            where = expression.args.get("where")
            if where is not None:
                self._visit(scope, where.this, FILTER, out)
            for join in expression.args.get("joins") or ():
                on = join.args.get("on")
                if on is not None:
                    self._visit(scope, on, JOIN, out)
                for using in join.args.get("using") or ():
                    out |= self._using(scope, using)
            group = expression.args.get("group")
            if group is not None:
                for part in group.expressions:
                    self._visit(scope, part, GROUP_BY, out)
            for key, role in (("having", FILTER), ("qualify", FILTER)):
                clause = expression.args.get(key)
                if clause is not None:
                    self._visit(scope, clause.this, role, out)
            order = expression.args.get("order")
            if order is not None and scope is root:
                for part in order.expressions:
                    self._visit(scope, part, SORT, out)
        return frozenset(out)

    def _using(self, scope: Scope, identifier: exp.Expr) -> Reached:
        name = identifier.name
        out: set[tuple[FieldRef, Transformation]] = set()
        for source in _visible_sources(scope):
            columns = self._source_columns(source)
            if columns is None or name in columns:
                out |= self._from_source(source, name, JOIN)
        return frozenset(out)


def is_table_star(node: exp.Expr) -> bool:
    return isinstance(node, exp.Column) and isinstance(node.this, exp.Star)


def _visible_sources(scope: Scope) -> Iterable[exp.Table | Scope]:
    for _node, source in scope.selected_sources.values():
        if isinstance(source, (exp.Table, Scope)):
            yield source


def _lookup(scope: Scope, alias: str) -> exp.Table | Scope | None:
    current: Scope | None = scope
    while current is not None:
        source = current.sources.get(alias)
        if isinstance(source, (exp.Table, Scope)):
            return source
        current = current.parent
    return None


__all__ = ["AGGREGATION", "ColumnTracer", "Reached"]
