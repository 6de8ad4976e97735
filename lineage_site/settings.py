"""Settings for Lineage Explorer: one module, every knob an environment variable.

The embedded default (no variables set) runs on a SQLite file under ``data/``
with Celery tasks executed in-process, so ``make run`` needs no other server.
Production sets DATABASE_URL, CELERY_BROKER_URL, SECRET_KEY, DEBUG=false and
ALLOWED_HOSTS.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path

import dj_database_url
import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured

# Lets admin and generic classes be subscripted at run time, as the type checker reads them.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


DATA_DIR = Path(env_str("LINEAGE_DATA_DIR", str(BASE_DIR / "data")))

DEBUG = env_bool("DEBUG", True)

_DEV_SECRET_KEY = "dev-only-insecure-key-do-not-use-in-production-0123456789abcdef"  # noqa: S105
SECRET_KEY = env_str("SECRET_KEY", _DEV_SECRET_KEY)
if not DEBUG and (
    SECRET_KEY == _DEV_SECRET_KEY or len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5
):
    # Django's own rule for a key it calls safe (check --deploy, security.W009).
    raise ImproperlyConfigured(
        "SECRET_KEY must be set to a random secret of at least 50 characters when DEBUG is off"
    )
if SECRET_KEY == _DEV_SECRET_KEY and "runserver" in sys.argv:
    sys.stderr.write(
        "WARNING: development settings (built-in SECRET_KEY, DEBUG on); "
        "set SECRET_KEY, DEBUG=false and ALLOWED_HOSTS in production\n"
    )

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])


def env_networks(name: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    networks = []
    for item in env_list(name, []):
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ImproperlyConfigured(
                f"{name} must list IP addresses or networks (e.g. 10.0.0.0/8), got {item!r}"
            ) from None
    return networks


# /metrics answers a bearer of any API token, and without one these addresses (a
# comma-separated list of addresses or networks: the Prometheus servers).
METRICS_ALLOWED_NETWORKS = env_networks("METRICS_ALLOWED_IPS")
# Targets of the lineage's service level indicators (ops/slis.py, /api/v1/slis, /health).
SLI_COVERAGE_TARGET = 0.9
SLI_FRESHNESS_TARGET = 0.95
SLI_COMPLETENESS_TARGET = 0.95
SLI_INGESTION_LAG_TARGET_SECONDS = 30
# Where notices to owners link to (ops/notify.py), and whom their e-mail comes from.
LINEAGE_BASE_URL = env_str("LINEAGE_BASE_URL", "http://127.0.0.1:8000").rstrip("/")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "lineage-explorer@localhost")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "csp",
    "catalog",
    "graph",
    "ingest",
    "privacy",
    "ops",
]

MIDDLEWARE = [
    "ops.middleware.RequestMetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "catalog.params.TextGuardMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "lineage_site.urls"
WSGI_APPLICATION = "lineage_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "catalog.context_processors.roles",
            ],
        },
    },
]

DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{DATA_DIR / 'lineage.sqlite3'}")
if "DATABASE_URL" not in os.environ:
    # The embedded database lives in the data folder, which a fresh clone does not have yet.
    DATA_DIR.mkdir(parents=True, exist_ok=True)
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Django's, reading timestamps with psycopg's C loader (lineage_site/postgresql/base.py).
    DATABASES["default"]["ENGINE"] = "lineage_site.postgresql"
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL and a busy timeout let the web process and in-process tasks share the file.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTHENTICATION_BACKENDS = ["catalog.auth.CachedModelBackend"]
# Roles, permissions and bearer tokens are cached in each process for this long.
AUTH_CACHE_SECONDS = env_int("AUTH_CACHE_SECONDS", 5)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(BASE_DIR / "staticfiles")))
WHITENOISE_USE_FINDERS = DEBUG

# Large lineage batches and SQL logs come in through the API.
LINEAGE_MAX_BODY_BYTES = env_int("LINEAGE_MAX_BODY_BYTES", 32 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = LINEAGE_MAX_BODY_BYTES
FILE_UPLOAD_MAX_MEMORY_SIZE = 8 * 1024 * 1024

SECURE_CONTENT_TYPE_NOSNIFF = True
# Pages run only the project's own script files and styles (no inline script or style, no
# other origin): an injected tag runs nothing. The API documentation pages relax it for
# what they need (lineage_site/urls.py).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}
if not DEBUG:
    SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", True)
    CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", True)
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    if not SECURE_HSTS_PRELOAD:
        # Preloading is a commitment to the browsers' HSTS list that an operator makes by
        # setting SECURE_HSTS_PRELOAD=true; without it, check --deploy has nothing to say.
        SILENCED_SYSTEM_CHECKS = ["security.W021"]

# Whatever DEBUG says, an error in a request to the privacy pages or API shows, reports
# and logs no variable, message or field of it (a subject's identifier may be in one).
DEFAULT_EXCEPTION_REPORTER = "privacy.reporting.SubjectSafeExceptionReporter"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "catalog.auth.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["catalog.auth.CanReadLineage"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "catalog.errors.api_exception_handler",
    # The API takes JSON (SQL log uploads name their own parsers).
    "DEFAULT_PARSER_CLASSES": ["catalog.params.JSONBodyParser"],
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Lineage Explorer API",
    "DESCRIPTION": "OpenLineage ingestion, catalog, time-travelling lineage graph and GDPR subject search.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Served from the vendored sidecar package: no CDN needed.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # The pages' own fonts: Redoc's defaults are web fonts from Google, which are not loaded.
    "REDOC_UI_SETTINGS": {
        "theme": {
            "typography": {
                "fontFamily": "system-ui, -apple-system, 'Segoe UI', Roboto, Arial, sans-serif",
                "headings": {"fontFamily": "system-ui, -apple-system, 'Segoe UI', sans-serif"},
            }
        }
    },
    # The project's error shape under every error status of every operation.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "catalog.schema.add_error_responses",
        "catalog.schema.document_text_rule",
    ],
    "ENUM_NAME_OVERRIDES": {
        "PiiCategoryEnum": "catalog.models.PiiCategory",
        "OwnerKindEnum": "catalog.models.OwnerKind",
        "SensitivityEnum": "catalog.models.Sensitivity",
        "IdentifierKindEnum": "privacy.api.IDENTIFIER_KINDS",
    },
}

# Celery: without a broker, tasks run in-process (eagerly) — the embedded default.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "")
CELERY_TASK_ALWAYS_EAGER = CELERY_BROKER_URL == ""
CELERY_TASK_EAGER_PROPAGATES = False
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", "") or None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = env_int("CELERY_WORKER_PREFETCH_MULTIPLIER", 16)
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {}

# OpenLineage ingestion: the outbox sweep re-queues events whose task was lost (broker down)
# and frees events whose worker died (claimed longer ago than the stuck timeout).
LINEAGE_MAX_BATCH_EVENTS = env_int("LINEAGE_MAX_BATCH_EVENTS", 10000)
INGEST_SWEEP_INTERVAL_SECONDS = env_int("INGEST_SWEEP_INTERVAL_SECONDS", 30)
INGEST_REQUEUE_AFTER_SECONDS = env_int("INGEST_REQUEUE_AFTER_SECONDS", 120)
INGEST_STUCK_AFTER_SECONDS = env_int("INGEST_STUCK_AFTER_SECONDS", 600)
INGEST_MAX_ATTEMPTS = env_int("INGEST_MAX_ATTEMPTS", 5)
INGEST_DRAIN_BATCH = env_int("INGEST_DRAIN_BATCH", 2000)
INGEST_TASK_BATCH = env_int("INGEST_TASK_BATCH", 100)
# With a real broker, tasks are sent from a background thread (1) or by the request (0).
INGEST_PUBLISH_IN_BACKGROUND = env_int("INGEST_PUBLISH_IN_BACKGROUND", 1)
# At most one publish per this many ms per process: events accepted meanwhile share a task.
INGEST_PUBLISH_INTERVAL_MS = env_int("INGEST_PUBLISH_INTERVAL_MS", 50)
CELERY_BEAT_SCHEDULE["ingest-sweep"] = {
    "task": "ingest.tasks.sweep_events",
    "schedule": float(INGEST_SWEEP_INTERVAL_SECONDS),
}
# SQL logs that read tables before the catalog knew their columns are processed again
# once it does (ingest.sql_actions.retake_logs).
CELERY_BEAT_SCHEDULE["ingest-retake-sql-logs"] = {
    "task": "ingest.tasks.retake_sql_logs",
    "schedule": 60.0,
}
# Bodies of events normalised longer ago than this are replaced by summaries (daily task);
# failed and pending events keep theirs.
INGEST_RAW_RETENTION_DAYS = env_int("INGEST_RAW_RETENTION_DAYS", 30)
CELERY_BEAT_SCHEDULE["ingest-compact-raw-events"] = {
    "task": "ingest.tasks.compact_raw_events",
    "schedule": 24 * 3600.0,
}

# Lineage graph: run-level detail (facets, error stacks) older than this is compacted into
# summaries by a daily task; edges and validity intervals stay. Node cache size per process.
LINEAGE_DETAIL_RETENTION_DAYS = env_int("LINEAGE_DETAIL_RETENTION_DAYS", 90)
GRAPH_NODE_CACHE_SIZE = env_int("GRAPH_NODE_CACHE_SIZE", 50_000)
# PostgreSQL: the server processes of a host share, through files under DATA_DIR, every
# node's rendered lineage data (graph/docfile.py) and the base of each lineage snapshot.
GRAPH_SHARED_NODE_DATA = env_bool("GRAPH_SHARED_NODE_DATA", True)
# Server processes (lineage_site/wsgi.py) build the lineage snapshots before serving.
GRAPH_WARM_ON_START = env_bool("GRAPH_WARM_ON_START", True)
# Folding a lineage snapshot's grown overlay into a new base goes to a background thread,
# which would otherwise hold up a request. Off, overlays are not folded.
GRAPH_BACKGROUND_REBUILD = env_bool("GRAPH_BACKGROUND_REBUILD", True)
# PostgreSQL: this often, the host's node document file is written again once many nodes
# changed since it (graph/documents.py).
GRAPH_DOCUMENTS_INTERVAL = env_int("GRAPH_DOCUMENTS_INTERVAL", 30, minimum=1)
CELERY_BEAT_SCHEDULE["graph-render-node-documents"] = {
    "task": "graph.tasks.render_node_documents",
    "schedule": float(GRAPH_DOCUMENTS_INTERVAL),
}
# Subject scans and erasures on Spark: the worker renews a run's heartbeat this often; a
# run not heard from for PRIVACY_RUN_STALE_SECONDS lost its worker (killed, host gone) and
# is failed, its sealed identifier values emptied, by the sweep (and when its page is read).
PRIVACY_RUN_HEARTBEAT_SECONDS = env_int("PRIVACY_RUN_HEARTBEAT_SECONDS", 30, minimum=1)
PRIVACY_RUN_STALE_SECONDS = env_int("PRIVACY_RUN_STALE_SECONDS", 300, minimum=1)
if PRIVACY_RUN_STALE_SECONDS < 3 * PRIVACY_RUN_HEARTBEAT_SECONDS:
    raise ImproperlyConfigured(
        f"PRIVACY_RUN_STALE_SECONDS ({PRIVACY_RUN_STALE_SECONDS}) must be at least three "
        f"PRIVACY_RUN_HEARTBEAT_SECONDS ({PRIVACY_RUN_HEARTBEAT_SECONDS}): a live run "
        "missing a beat or two would be failed"
    )
CELERY_BEAT_SCHEDULE["privacy-sweep-runs"] = {
    "task": "privacy.sweep_runs",
    "schedule": 60.0,
}
CELERY_BEAT_SCHEDULE["ops-requeue-deliveries"] = {
    "task": "ops.requeue_deliveries",
    "schedule": 300.0,
}
CELERY_BEAT_SCHEDULE["ops-notify-stale"] = {
    "task": "ops.notify_stale",
    "schedule": 3600.0,
}
CELERY_BEAT_SCHEDULE["ops-record-slis"] = {
    "task": "ops.record_slis",
    "schedule": 3600.0,
}
CELERY_BEAT_SCHEDULE["graph-compact-lineage-detail"] = {
    "task": "graph.tasks.compact_lineage_detail",
    "schedule": 24 * 3600.0,
}

SPARK_MASTER = env_str("SPARK_MASTER", "local[*]")

# Privacy: subject identifiers are stored only as keyed hashes.
PRIVACY_HASH_KEY = env_str("PRIVACY_HASH_KEY", SECRET_KEY)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "filters": {"subject_safe": {"()": "privacy.reporting.SubjectSafeLogFilter"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "filters": ["subject_safe"],
        }
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # Django's own handler for this logger (on when DEBUG is) would skip the filter.
        "django": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}
