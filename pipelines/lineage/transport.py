"""Delivery of OpenLineage events: HTTP with retries, then a spool file, never an exception.

A pipeline must not fail because lineage could not be sent. Events that cannot be delivered
are appended to an NDJSON spool file (one event per line, exactly the JSON that would have
been posted), which ``manage.py ingest_events`` loads later.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from openlineage.client.serde import Serde
from openlineage.client.transport.http import (
    ApiKeyTokenProvider,
    HttpCompression,
    HttpConfig,
    HttpTransport,
    TokenProvider,
)
from openlineage.client.transport.transport import Config, Transport

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "api/v1/lineage"


@dataclass
class DeliveryStats:
    """What happened to the events handed to a transport."""

    sent: int = 0
    spooled: int = 0
    attempts: int = 0
    last_error: str | None = None


def http_transport(
    url: str,
    api_key: str | None = None,
    *,
    endpoint: str = DEFAULT_ENDPOINT,
    timeout: float = 5.0,
    gzip: bool = True,
) -> HttpTransport:
    """Return openlineage-python's HttpTransport posting to ``url``/``endpoint``.

    Auth is ``api_key`` (``Authorization: Bearer <token>``); bodies are gzip-compressed.
    urllib3's own retries are off: :class:`SpoolingTransport` retries, so that it decides
    when to give up and spool.
    """
    auth: TokenProvider = (
        ApiKeyTokenProvider({"api_key": api_key}) if api_key else TokenProvider({})
    )
    config = HttpConfig(
        url=url,
        endpoint=endpoint,
        timeout=timeout,
        auth=auth,
        compression=HttpCompression.GZIP if gzip else None,
        retry={"total": 0, "connect": 0, "read": 0, "status": 0, "allowed_methods": ["POST"]},
    )
    return HttpTransport(config)


def _retryable(error: BaseException) -> bool:
    if isinstance(error, requests.HTTPError) and error.response is not None:
        status = error.response.status_code
        return status >= 500 or status in (408, 429)
    return isinstance(error, requests.RequestException | OSError)


class SpoolingTransport(Transport):
    """Send through an inner transport with retries and backoff; spool what still fails.

    After a delivery gives up, the transport stays offline for ``cooldown`` seconds: later
    events go straight to the spool instead of each paying the full retry delay.
    """

    kind = "spooling"
    config_class = Config

    def __init__(
        self,
        inner: Transport | None,
        spool_path: str | os.PathLike[str],
        *,
        retries: int = 3,
        backoff: float = 0.5,
        cooldown: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self.spool_path = Path(spool_path)
        self.retries = retries
        self.backoff = backoff
        self.cooldown = cooldown
        self.sleep = sleep
        self.monotonic = monotonic
        self.stats = DeliveryStats()
        self._offline_until: float | None = None
        self._lock = threading.Lock()

    def emit(self, event: Any) -> bool:
        """Deliver one event; return True when it was sent, False when it was spooled."""
        if self.inner is not None and not self._offline() and self._send(event):
            return True
        self._spool(event)
        return False

    def _offline(self) -> bool:
        return self._offline_until is not None and self.monotonic() < self._offline_until

    def _send(self, event: Any) -> bool:
        assert self.inner is not None
        for attempt in range(self.retries + 1):
            self.stats.attempts += 1
            try:
                self.inner.emit(event)
            except Exception as error:  # any failure must end in the spool
                self.stats.last_error = f"{type(error).__name__}: {error}"
                if not _retryable(error):
                    log.warning("lineage event refused, spooling it: %s", self.stats.last_error)
                    return False
                if attempt < self.retries:
                    self.sleep(self.backoff * (2**attempt))
                continue
            self.stats.sent += 1
            self._offline_until = None
            return True
        log.warning(
            "lineage endpoint unreachable after %d attempts (%s); spooling to %s",
            self.retries + 1,
            self.stats.last_error,
            self.spool_path,
        )
        self._offline_until = self.monotonic() + self.cooldown
        return False

    def _spool(self, event: Any) -> None:
        line = Serde.to_json(event) + "\n"
        with self._lock:
            self.spool_path.parent.mkdir(parents=True, exist_ok=True)
            with self.spool_path.open("a", encoding="utf-8") as spool:
                spool.write(line)
                spool.flush()
                os.fsync(spool.fileno())
            self.stats.spooled += 1

    def close(self, timeout: float = -1) -> bool:
        if self.inner is not None:
            return bool(self.inner.close(timeout))
        return True
