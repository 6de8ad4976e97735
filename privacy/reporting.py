"""Error pages, error reports and logs that never carry a data subject's identifier.

A request to the privacy pages or API may carry a subject's identifier in its
body, and a failure while handling it may hold the identifier in a local
variable, in the exception's message (a database error quotes the value it
refused) or in a chained exception. Whatever ``DEBUG`` says, for such a
request:

- Django's debug page and error reports (``SubjectSafeExceptionReporter``)
  show the code and the frames, but no variables, no exception message and no
  POST field;
- log records (``SubjectSafeLogFilter``) keep the traceback's frames and the
  exception's type, without its message.
"""

from __future__ import annotations

import logging
import traceback
from functools import cache
from typing import Any

from django.http import HttpRequest
from django.urls import reverse
from django.views.debug import ExceptionReporter

WITHHELD = "(withheld: this request may carry a data subject's identifier)"


@cache
def _subject_prefixes() -> tuple[str, ...]:
    page = reverse("privacy-search")
    api = reverse("privacy-api-search").rsplit("/", 1)[0] + "/"
    return (page, api)


def carries_subject(request: HttpRequest | None) -> bool:
    """Whether ``request`` goes to the privacy pages or API, whose bodies hold identifiers."""
    path = getattr(request, "path_info", None)
    return isinstance(path, str) and path.startswith(_subject_prefixes())


class SubjectSafeExceptionReporter(ExceptionReporter):
    """Django's reporter (debug page, error e-mails), told nothing a privacy request held."""

    def get_traceback_data(self) -> dict[str, Any]:
        data: dict[str, Any] = super().get_traceback_data()
        if not carries_subject(self.request):
            return data
        data["exception_value"] = WITHHELD
        data.pop("exception_notes", None)
        data["unicode_hint"] = ""
        data["filtered_POST_items"] = [(key, WITHHELD) for key, _ in data["filtered_POST_items"]]
        for frame in data["frames"]:
            frame["vars"] = [(name, WITHHELD) for name, _ in frame.get("vars", [])]
            if frame.get("exc_cause") is not None:
                frame["exc_cause"] = f"{type(frame['exc_cause']).__name__}: {WITHHELD}"
        return data


def _bare_traceback(exc_info: Any) -> str:
    """The traceback's frames and each exception's type, without any message."""
    _, value, _ = exc_info
    lines: list[str] = []
    seen: set[int] = set()
    while value is not None and id(value) not in seen:
        seen.add(id(value))
        lines[:0] = [
            "Traceback (most recent call last):\n",
            *traceback.format_tb(value.__traceback__),
            f"{type(value).__name__}: {WITHHELD}\n",
        ]
        value = value.__cause__ or (None if value.__suppress_context__ else value.__context__)
    return "".join(lines).rstrip("\n")


class SubjectSafeLogFilter(logging.Filter):
    """Keeps the message of an exception raised by a privacy request out of the logs."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and carries_subject(getattr(record, "request", None)):
            record.exc_text = _bare_traceback(record.exc_info)
        return True
