"""Template filters for the lineage pages."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import template
from django.utils.html import format_html

register = template.Library()


@register.filter
def duration_ms(value: int | None) -> str:
    """A run duration for people: 850 ms, 12.4 s, 3 min 20 s, 2 h 05 min."""
    if value is None:
        return "—"
    if value < 1000:
        return f"{value} ms"
    seconds = value / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


@register.filter
def change_value(value: object) -> str:
    """A value of the change history for people: owners as "name (type)", lists joined,
    nothing as a dash (the history stores them as JSON)."""
    if value is None or value == "" or value == []:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(change_value(item) for item in value)
    if isinstance(value, dict):
        if "name" in value:
            kind = value.get("type")
            return f"{value['name']} ({kind})" if kind else str(value["name"])
        return ", ".join(f"{key}: {change_value(item)}" for key, item in value.items())
    return str(value)


# Other attributes are named as they are spelled, with spaces ("retention policy").
ATTRIBUTE_LABELS = {"pii_category": "personal data", "subject_kind": "identifies subject"}


@register.filter
def change_attribute(attribute: str) -> str:
    return ATTRIBUTE_LABELS.get(attribute, attribute.replace("_", " "))


@register.filter
def node_link(node_id: str, links: Mapping[str, Any] | None) -> str:
    """A node id as a short name linked to its page, the full id on hover (from the view's
    ``links``, see graph.page_data.node_links); the id as it is when it has none."""
    link = (links or {}).get(node_id)
    if link is None:
        return format_html('<span class="mono">{}</span>', node_id)
    return format_html(
        '<a class="mono" href="{}" title="{}">{}</a>', link.url, link.full, link.short
    )
