"""``GET /api/v1/slis``: the lineage's service level indicators (ops/slis.py)."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from catalog.params import bool_param, check_text, int_param
from catalog.schema import BOOL, FREE, INT, NSTR, NUM, STR, arr, null, obj, paging_parameters
from ops import slis

INDICATOR = obj(
    {
        "name": STR,
        "value": null(NUM),
        "target": NUM,
        "unit": STR,
        "met": null(BOOL),
        "description": STR,
        "judged": INT,
        "missCount": INT,
        "misses": arr(FREE),
    }
)
SLIS = obj(
    {
        "at": STR,
        "scope": obj({"namespace": NSTR, "owner": NSTR, "personal": BOOL}),
        **dict.fromkeys(slis.NAMES, INDICATOR),
    }
)


def scope_of(params: Any) -> slis.Scope:
    """The scope a request asks for (``namespace``, ``owner``, ``personal``)."""
    namespace = check_text(params.get("namespace") or "", "namespace") or None
    owner = check_text(params.get("owner") or "", "owner") or None
    return slis.Scope(namespace, owner, bool_param(params, "personal", False))


class SliView(APIView):
    @extend_schema(
        responses={200: SLIS},
        summary="Coverage, freshness, completeness, ingestion lag and dead letters",
        operation_id="getSlis",
        parameters=[
            OpenApiParameter("namespace", str, description="only this namespace's datasets"),
            OpenApiParameter("owner", str, description="only the datasets this owner owns"),
            OpenApiParameter("personal", bool, description="only datasets holding personal data"),
            *paging_parameters(maximum=500, default=50),
        ],
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        scope = scope_of(params)
        limit = int_param(params, "limit", 50, 1, 500)
        offset = int_param(params, "offset", 0, 0, 10**9)
        found = slis.indicators(scope, offset, limit)
        return Response(
            {
                "at": timezone.now().isoformat(),
                "scope": {
                    "namespace": scope.namespace,
                    "owner": scope.owner,
                    "personal": scope.personal,
                },
                **{indicator.name: indicator.as_json() for indicator in found},
            }
        )
