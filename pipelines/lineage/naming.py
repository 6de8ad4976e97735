"""OpenLineage dataset naming for file-based data (https://openlineage.io/docs/spec/naming)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

# Schemes whose OpenLineage namespace is ``scheme://authority`` and whose name is the path
# relative to the authority (object stores name the key without a leading slash).
_OBJECT_STORES = {
    "s3": "s3",
    "s3a": "s3",
    "s3n": "s3",
    "gs": "gs",
    "wasbs": "wasbs",
    "abfss": "abfss",
}


@dataclass(frozen=True, order=True)
class DatasetId:
    """An OpenLineage dataset identity: namespace plus name."""

    namespace: str
    name: str

    def node_id(self) -> str:
        """Return the explorer's node id of this dataset (``dataset:{ns}:{name}``)."""
        return f"dataset:{self.namespace}:{self.name}"


def dataset_for_uri(uri: str) -> DatasetId:
    """Return the OpenLineage dataset for a file or object-store location.

    Local paths (``/x``, ``file:/x``, ``file:///x``) give namespace ``file`` and the absolute,
    normalised path as name; ``s3a://bucket/key`` gives ``s3://bucket`` and ``key``;
    ``hdfs://nn:8020/p`` gives ``hdfs://nn:8020`` and ``/p``.
    """
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt"):
        path = parts.path if scheme == "file" else uri
        return DatasetId("file", _clean_path(os.path.abspath(path)))
    if scheme in _OBJECT_STORES:
        return DatasetId(f"{_OBJECT_STORES[scheme]}://{parts.netloc}", parts.path.strip("/"))
    return DatasetId(f"{scheme}://{parts.netloc}", _clean_path(parts.path or "/"))


def _clean_path(path: str) -> str:
    cleaned = os.path.normpath(path).replace(os.sep, "/")
    return cleaned if cleaned == "/" else cleaned.rstrip("/")
