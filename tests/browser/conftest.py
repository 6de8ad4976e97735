"""Browser tier: real headless Chromium driven by Playwright against a live server.

Chromium comes from the system (``/usr/bin/chromium`` or CHROMIUM_PATH); it is
never downloaded at run time. Screenshots land in ``test-artifacts/``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from tests.conftest import CHROMIUM

# Playwright's sync API runs an event loop in this thread; the ORM calls the
# tests make between browser steps are still plain synchronous calls.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

ARTIFACTS = Path(settings.BASE_DIR) / "test-artifacts"
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    from playwright.sync_api import expect, sync_playwright

    # Assertions wait as long as page actions do: a loaded machine draws Redoc's reference
    # in more than the default 5 s (a CI run at 326673f saw it still loading).
    expect.set_options(timeout=15_000)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield browser
        browser.close()


# Redoc draws its logo from its CDN, which the API reference's policy refuses (so that the
# page loads nothing from other sites); Redoc then shows its footer link without the logo.
LOGO_REFUSED = "https://cdn.redoc.ly/redoc/logo"


@pytest.fixture
def page_as(chromium: Any, live_server: Any) -> Iterator[Callable[[Any], Any]]:
    """page_as(user) gives a Playwright page signed in as that user (None: anonymous); every
    page it gave must have run with nothing refused by the Content-Security-Policy."""
    contexts: list[Any] = []
    refused: list[str] = []

    def open_page(user: Any) -> Any:
        context = chromium.new_context(
            base_url=live_server.url, viewport={"width": 1440, "height": 900}
        )
        if user is not None:
            client = Client()
            client.force_login(user)
            cookie = client.cookies[settings.SESSION_COOKIE_NAME]
            context.add_cookies(
                [
                    {
                        "name": settings.SESSION_COOKIE_NAME,
                        "value": cookie.value,
                        "url": live_server.url,
                    }
                ]
            )
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.on(
            "console",
            lambda m: (
                refused.append(f"{page.url}: {m.text} at {m.location}")
                if "Content Security Policy" in m.text and LOGO_REFUSED not in m.text
                else None
            ),
        )
        return page

    yield open_page
    for context in contexts:
        context.close()
    assert not refused, refused


@pytest.fixture
def shot(request: pytest.FixtureRequest) -> Callable[[Any, str], Path]:
    """shot(page, name) saves a full-page screenshot under test-artifacts/."""
    ARTIFACTS.mkdir(exist_ok=True)

    def take(page: Any, name: str) -> Path:
        path = ARTIFACTS / f"{request.node.name}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take


@pytest.fixture(autouse=True)
def _flush_without_lineage_triggers(live_server: Any) -> Iterator[None]:
    """Remove the lineage revision triggers before the live server's flush.

    The flush empties ``graph_revision`` before the tables the triggers watch
    on SQLite; their deletes would then restart the revision count and collide
    with ``graph_revision_log``. The flush's post_migrate puts the triggers back.
    """
    yield
    from django.db import connection

    from graph import revision

    if connection.vendor == "sqlite":
        revision.uninstall_triggers(connection)
