"""Signals the catalog sends for apps that derive state from it (the catalog imports none)."""

from __future__ import annotations

from django.dispatch import Signal

# Declarations or blocks of personal-data flags changed on these fields (``field_ids``),
# with effect from ``at`` (None: from any time), inside the transaction that changed them:
# graph.propagation brings the flags they propagate up to date in it.
flags_changed = Signal()
