"""Deterministic synthetic source data for the demo lakehouse (pure Python, no Spark).

Every row is a function of the seed and the simulated day only, so two runs produce the same
files, and a day's data contains all earlier days' data (sources grow day by day).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

DEFAULT_SEED = 20260302
FIRST_DAY = date(2026, 3, 2)
BASE_CUSTOMERS = 600
NEW_CUSTOMERS_PER_DAY = 40
ORDERS_PER_DAY = 700
WEB_EVENTS_PER_DAY = 1200

_FIRST_NAMES = (
    "Ada", "Ben", "Chloé", "Dmitri", "Elif", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Kemal",
    "Lena", "Mateo", "Nora", "Olu", "Priya", "Quentin", "Rosa", "Sven", "Tariq", "Uma", "Vera",
    "Wei", "Xavier", "Yara", "Zoltan",
)  # fmt: skip
_LAST_NAMES = (
    "Andersen", "Bauer", "Costa", "Dubois", "Eriksen", "Fischer", "García", "Horvat", "Ivanova",
    "Jansen", "Kowalski", "Lindqvist", "Moreau", "Novak", "O'Brien", "Petrov", "Rossi", "Schmidt",
    "Tanaka", "Urbano", "Virtanen", "Weber", "Yilmaz", "Zimmermann",
)  # fmt: skip
_COUNTRIES = (("DE", "+49", "Berlin"), ("FR", "+33", "Lyon"), ("NL", "+31", "Utrecht"),
              ("ES", "+34", "Valencia"), ("PL", "+48", "Kraków"), ("SE", "+46", "Malmö"))  # fmt: skip
_DOMAINS = ("example.com", "mail.test", "inbox.example", "post.example.org")
_STREETS = ("Main St", "Station Rd", "Park Ave", "Mill Lane", "Harbour Way", "Church St")
_STATUSES = (("completed", 80), ("cancelled", 8), ("refunded", 5), ("pending", 7))
_PAGES = ("/", "/catalog", "/catalog/shoes", "/catalog/bags", "/cart", "/checkout", "/account",
          "/help", "/search?q=boots", "/product/1042", "/product/2210")  # fmt: skip
_AGENTS = (("Mozilla/5.0 (X11; Linux x86_64) Firefox/131.0", "linux"),
           ("Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) Safari/605.1", "macos"),
           ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) Chrome/129.0", "windows"),
           ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_6) Mobile/15E148", "ios"))  # fmt: skip

CUSTOMER_SCHEMA = (
    "customer_id BIGINT, name STRING, email STRING, country STRING, signup_date DATE, "
    "phone STRING, address STRUCT<street: STRING, city: STRING, postcode: STRING>"
)
ORDER_SCHEMA = (
    "order_id BIGINT, customer_id BIGINT, order_ts TIMESTAMP, amount DOUBLE, "
    "currency STRING, status STRING"
)
WEB_EVENT_SCHEMA = (
    "event_id BIGINT, user_id BIGINT, ip STRING, url STRING, ts TIMESTAMP, "
    "device STRUCT<user_agent: STRING, os: STRING>"
)


@dataclass(frozen=True)
class SourceData:
    """The three source tables as of one simulated day (rows are plain tuples)."""

    customers: list[tuple[Any, ...]]
    orders: list[tuple[Any, ...]]
    web_events: list[tuple[Any, ...]]


def simulated_day(day_number: int) -> date:
    """Return the calendar date of simulated day ``day_number`` (1-based)."""
    return FIRST_DAY + timedelta(days=day_number - 1)


def customer_count(day_number: int) -> int:
    """Return how many customers exist on a simulated day."""
    return BASE_CUSTOMERS + NEW_CUSTOMERS_PER_DAY * (day_number - 1)


def _rng(seed: int, *parts: int) -> random.Random:
    value = seed
    for part in parts:
        value = value * 1_000_003 + part
    return random.Random(value)


def _customer(seed: int, customer_id: int, day_number: int) -> tuple[Any, ...]:
    rng = _rng(seed, 1, customer_id)
    first, last = rng.choice(_FIRST_NAMES), rng.choice(_LAST_NAMES)
    country, prefix, city = rng.choice(_COUNTRIES)
    local = f"{first}.{last}".lower().replace("'", "").replace(" ", "")
    email: str | None = f"{local}{customer_id}@{rng.choice(_DOMAINS)}"
    if rng.random() < 0.03:
        email = None  # a few sign-ups never confirmed an address
    elif rng.random() < 0.2:
        email = f"  {str(email).upper()} "  # messy input that staging cleans up
    if customer_id <= BASE_CUSTOMERS:
        signup = FIRST_DAY - timedelta(days=rng.randint(1, 900))
    else:
        signup = simulated_day(day_number)
    phone = f"{prefix} {rng.randint(100, 999)} {rng.randint(1000, 9999)}{rng.randint(10, 99)}"
    address = (
        f"{rng.randint(1, 180)} {rng.choice(_STREETS)}",
        city,
        f"{rng.randint(10000, 99999)}",
    )
    return (customer_id, f"{first} {last}", email, country, signup, phone, address)


def joined_on(customer_id: int) -> int:
    """Return the simulated day a customer signed up (1 for the customers there from the start)."""
    if customer_id <= BASE_CUSTOMERS:
        return 1
    return (customer_id - BASE_CUSTOMERS - 1) // NEW_CUSTOMERS_PER_DAY + 2


def customers(seed: int, day_number: int) -> list[tuple[Any, ...]]:
    """Return all customers known on a day; a customer's row never changes once created."""
    return [
        _customer(seed, customer_id, joined_on(customer_id))
        for customer_id in range(1, customer_count(day_number) + 1)
    ]


def _day_start(day_number: int) -> datetime:
    day = simulated_day(day_number)
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def _weighted_status(rng: random.Random) -> str:
    roll = rng.randint(1, 100)
    for status, weight in _STATUSES:
        if roll <= weight:
            return status
        roll -= weight
    return _STATUSES[0][0]


def orders(seed: int, day_number: int) -> list[tuple[Any, ...]]:
    """Return every order placed up to and including a day."""
    rows = []
    for day in range(1, day_number + 1):
        rng = _rng(seed, 2, day)
        start = _day_start(day) - timedelta(days=1)
        known = customer_count(day)
        for n in range(ORDERS_PER_DAY):
            order_id = day * 100_000 + n
            customer_id = min(known, int(rng.paretovariate(1.2) * 40) % known + 1)
            moment = start + timedelta(seconds=rng.randint(0, 86_399))
            amount = round(rng.lognormvariate(3.6, 0.8), 2)
            rows.append((order_id, customer_id, moment, amount, "EUR", _weighted_status(rng)))
    return rows


def web_events(seed: int, day_number: int) -> list[tuple[Any, ...]]:
    """Return every web event seen up to and including a day (about 10% anonymous)."""
    rows = []
    for day in range(1, day_number + 1):
        rng = _rng(seed, 3, day)
        start = _day_start(day) - timedelta(days=1)
        known = customer_count(day)
        for n in range(WEB_EVENTS_PER_DAY):
            user_id = None if rng.random() < 0.1 else rng.randint(1, known)
            ip = f"{rng.randint(11, 223)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
            moment = start + timedelta(seconds=rng.randint(0, 86_399))
            agent, os_name = rng.choice(_AGENTS)
            rows.append(
                (day * 1_000_000 + n, user_id, ip, rng.choice(_PAGES), moment, (agent, os_name))
            )
    return rows


def source_data(seed: int, day_number: int) -> SourceData:
    """Return the three source tables as of a simulated day."""
    return SourceData(
        customers=customers(seed, day_number),
        orders=orders(seed, day_number),
        web_events=web_events(seed, day_number),
    )
