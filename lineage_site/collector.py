"""Python's cycle collector in a serving process, kept out of the requests.

CPython runs a full collection whenever the objects promoted to its oldest
generation have grown by a quarter since the last one, and a full collection
walks every object in that generation. A server process keeps what it serves
from (node data, id texts, directories, whole answers), so its oldest
generation keeps growing: at 100,000 datasets, after a few hundred requests
of each benchmark scenario, full collections came about once per scenario
and took 7, 8, 12 and then 14 ms (walking everything the process held by then
took 98 ms). Each landed on whichever request happened to allocate then.

After a response has gone out, every ``INTERVAL`` requests, :func:`settle`
collects what is not frozen (what the last few hundred requests left behind:
a millisecond or two) and freezes the survivors, so no later collection walks
them again. Frozen objects are still freed by reference counting when a
cache drops them; only reference cycles among them outlive their use (the
request being closed is still alive while it settles: about 70 objects of
cycles each time), so once every ``THAW_EVERY`` requests everything is thawed
and walked once, also after a response (about 90 ms at that scale).
"""

from __future__ import annotations

import gc
import itertools
from typing import Any

from django.core.signals import request_finished

INTERVAL = 200
THAW_EVERY = 20_000

_served = itertools.count(1)


def settle(thaw: bool = False) -> None:
    """Collect what is not frozen and freeze what survives; with ``thaw``, everything."""
    if thaw:
        gc.unfreeze()
    gc.collect()
    gc.freeze()


def after_response(**kwargs: Any) -> None:
    """``request_finished`` receiver: Django sends it when the server closes the response,
    once the body has been written."""
    served = next(_served)
    if served % INTERVAL == 0:
        settle(thaw=served % THAW_EVERY == 0)


def install() -> None:
    """Collect between requests from now on (a serving process, after its start-up)."""
    settle()
    request_finished.connect(after_response, dispatch_uid="lineage_site.collector")
