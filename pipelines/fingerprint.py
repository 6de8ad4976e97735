"""Content fingerprints of OpenLineage events, shared by the Spark backfill and the ingest app."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(event: Any) -> str:
    """Return the canonical JSON text of an event: sorted keys, no spaces, UTF-8 kept as is."""
    return json.dumps(event, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_fingerprint(event: Any) -> str:
    """Return the hex sha256 of an event's canonical JSON; the same event always gives the same value."""
    return fingerprint_of_canonical(canonical_json(event))


def fingerprint_of_canonical(text: str) -> str:
    """Return the fingerprint of an event already rendered by :func:`canonical_json`."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
