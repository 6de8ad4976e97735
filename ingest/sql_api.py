"""API for SQL query logs: ``POST /api/v1/sql-logs`` (multipart or raw body) and status reads.

The log is stored, then turned into lineage by a task; the answer is 202
with the upload's status URL. Options come as form fields (multipart) or
query parameters (raw body): namespace, dialect, format, database, schema.
Errors use the project's shape and name the field at fault.
"""

from __future__ import annotations

from typing import IO, Any, cast

from django.http import HttpRequest
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from catalog.api import JsonOnlyNegotiation
from catalog.auth import CanOperateIngestion
from catalog.errors import ApiError
from catalog.schema import BODY_REQUIRED
from ingest import schema, sql_actions, sql_queries
from ingest.sql.dialects import SUPPORTED_DIALECTS
from ingest.sql.readers import FORMATS


class SqlLogOptions(serializers.Serializer[dict[str, Any]]):
    namespace = serializers.CharField(max_length=1024)
    dialect = serializers.CharField(max_length=32)
    format = serializers.ChoiceField(choices=FORMATS)
    database = serializers.CharField(max_length=255, required=False, allow_blank=True, default="")
    schema = serializers.CharField(max_length=255, required=False, allow_blank=True, default="")


class _RawBody:
    """The request body as a binary stream, read in chunks (never whole)."""

    def __init__(self, request: HttpRequest) -> None:
        self._request = request

    def read(self, size: int = -1) -> bytes:
        return self._request.read(size)


class SqlLogListView(APIView):
    permission_classes = [CanOperateIngestion]
    parser_classes = [MultiPartParser, FormParser]
    content_negotiation_class = JsonOnlyNegotiation  # ?format= names the log's format here

    @extend_schema(
        summary="Send a SQL query log (CSV, JSON Lines or PostgreSQL csvlog)",
        description=(
            "Multipart with a `file` part and option fields, or the log as the raw body with "
            "options as query parameters. Answers 202 with the upload; lineage follows."
        ),
        parameters=[
            OpenApiParameter(
                "namespace",
                # Something other than white space (as Python's str.isspace and ECMA's \s
                # count it: the form field is trimmed), and no NUL (catalog.params).
                {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 1024,
                    "pattern": r"^[^\u0000]*[^\s\u0000\u001c-\u001f\u0085][^\u0000]*$",
                },
                required=True,
                description="data source, e.g. postgres://db:5432",
            ),
            OpenApiParameter("dialect", str, enum=sorted(SUPPORTED_DIALECTS), required=True),
            OpenApiParameter("format", str, enum=list(FORMATS), required=True),
            OpenApiParameter("database", {"type": "string", "maxLength": 255}),
            OpenApiParameter("schema", {"type": "string", "maxLength": 255}),
        ],
        request={
            "multipart/form-data": {
                "type": "object",
                "properties": {"file": {"type": "string", "format": "binary", "minLength": 1}},
                "required": ["file"],
                # No parameter name may hold NUL (catalog.params refuses it with 400).
                "propertyNames": {"pattern": "^[^\u0000]*$"},
            },
            "application/octet-stream": {"type": "string", "format": "binary", "minLength": 1},
        },
        responses={202: schema.SQL_LOG_ACCEPTED},
        operation_id="postSqlLog",
        extensions={BODY_REQUIRED: True},
    )
    def post(self, request: Request) -> Response:
        content_type = request.META.get("CONTENT_TYPE", "")
        multipart = content_type.startswith(
            ("multipart/form-data", "application/x-www-form-urlencoded")
        )
        limit = sql_actions.max_upload_bytes()
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError as exc:
            raise ApiError("Content-Length is not a number", "Content-Length") from exc
        if length > limit:
            raise ApiError(f"the log is larger than the {limit:,}-byte limit", "file", 413)
        source = dict(request.query_params.items())
        stream: IO[bytes]
        if multipart:
            source.update({k: v for k, v in request.data.items() if k != "file"})
            upload = request.FILES.get("file")
            if upload is None:
                raise ApiError("file is required", "file")
            stream = cast(IO[bytes], upload)
            name = upload.name or ""
        else:
            stream = cast(IO[bytes], _RawBody(request._request))
            name = source.pop("name", "")
        options = SqlLogOptions(data=source)
        options.is_valid(raise_exception=True)
        data = options.validated_data
        try:
            log = sql_actions.create_upload(
                namespace=data["namespace"],
                dialect=data["dialect"],
                fmt=data["format"],
                stream=stream,
                original_name=name,
                database=data["database"],
                schema=data["schema"],
                user=request.user,
                source="api",
            )
        except sql_actions.SqlLogInputError as exc:
            raise ApiError(exc.message, exc.field, exc.status) from exc
        log.refresh_from_db()
        url = reverse("api-sql-log", args=[log.pk])
        return Response(
            sql_queries.upload_json(log, problems=0) | {"statusUrl": url},
            status=202,
            headers={"Location": url},
        )

    @extend_schema(
        summary="Recent SQL log uploads",
        responses={200: schema.SQL_LOGS},
        operation_id="listSqlLogs",
    )
    def get(self, request: Request) -> Response:
        return Response(
            {
                "sqlLogs": [
                    sql_queries.upload_json(u, problems=0) for u in sql_queries.recent_uploads()
                ]
            }
        )


class SqlLogDetailView(APIView):
    permission_classes = [CanOperateIngestion]

    @extend_schema(
        summary="A SQL log upload: state, progress, counts and problems",
        responses={200: schema.SQL_LOG},
        operation_id="getSqlLog",
    )
    def get(self, request: Request, upload_id: int) -> Response:
        log = sql_queries.upload(upload_id)
        if log is None:
            raise ApiError("No such SQL log", "id", 404)
        return Response(sql_queries.upload_json(log))
