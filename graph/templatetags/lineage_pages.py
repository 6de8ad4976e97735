"""Template filters for the lineage pages."""

from __future__ import annotations

from django import template

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
