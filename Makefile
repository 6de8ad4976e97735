# Lineage Explorer: `make run` and `make test` do all the set-up.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
HOST ?= 127.0.0.1
PORT ?= 8000
# PostgreSQL for the second test pass: DATABASE_URL when it is PostgreSQL, else the local default.
PG_URL ?= $(if $(filter postgres%,$(DATABASE_URL)),$(DATABASE_URL),postgres://postgres@127.0.0.1:5432/test)
REDIS_URL ?= $(if $(CELERY_BROKER_URL),$(CELERY_BROKER_URL),redis://127.0.0.1:6379/0)
PYTEST_ARGS ?=
# Test processes (pytest-xdist), one a core. TEST_WORKERS=0 runs the suite in this process.
TEST_WORKERS ?= 2
PYTEST = $(BIN)/pytest -p no:cacheprovider -n $(TEST_WORKERS)

.PHONY: install run demo test lint typecheck test-sqlite test-postgres bench clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "Python 3.11 is needed ($(PYTHON) not found)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

# The demo is served as in production (DEBUG off, its own secret, static files by WhiteNoise),
# over plain HTTP on this machine.
DATA_DIR = $(or $(LINEAGE_DATA_DIR),data)
SERVE_ENV = DEBUG=false SECRET_KEY="$$(cat $(DATA_DIR)/secret-key)" ALLOWED_HOSTS=$(HOST),localhost \
	SECURE_SSL_REDIRECT=false SESSION_COOKIE_SECURE=false CSRF_COOKIE_SECURE=false SECURE_HSTS_SECONDS=0

run: install
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py setup_demo
	$(SERVE_ENV) $(BIN)/python manage.py collectstatic --noinput -v 0
	$(SERVE_ENV) $(BIN)/python manage.py runserver $(HOST):$(PORT)

demo: install
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py setup_demo

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy .

# Every tier on SQLite, then the database-bound tiers again on PostgreSQL
# (with the Redis / real-worker tier).
test-sqlite: install
	env -u DATABASE_URL -u CELERY_BROKER_URL $(PYTEST) $(PYTEST_ARGS)

test-postgres: install
	@$(BIN)/python -m tests.services postgres "$(PG_URL)"; rc=$$?; \
	if [ $$rc -eq 0 ]; then \
	  env -u CELERY_BROKER_URL DATABASE_URL="$(PG_URL)" TEST_REDIS_URL="$(REDIS_URL)" \
	    $(PYTEST) -m "not browser and not spark" $(PYTEST_ARGS); \
	elif [ $$rc -ne 1 ]; then exit $$rc; fi

test: lint typecheck test-sqlite test-postgres

bench: install
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
