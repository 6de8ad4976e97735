"""``__any_of``: ``IN`` for a long list of ids, sent as one array parameter on PostgreSQL.

``IN (%s, %s, …)`` with thousands of values costs milliseconds of client-side
query building per statement; ``= ANY(%s)`` is one parameter. Elsewhere it is
a plain ``IN``.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Field, ForeignObject
from django.db.models.lookups import In


class AnyOf(In[Any]):
    lookup_name = "any_of"

    def as_postgresql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        values = [self.lhs.output_field.get_db_prep_value(v, connection) for v in self.rhs]
        return f"{lhs} = ANY(%s)", [*lhs_params, values]


Field.register_lookup(AnyOf)
# Relations keep a lookup table of their own (Django stops at ForeignObject).
ForeignObject.register_lookup(AnyOf)
