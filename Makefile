# Two commands from a fresh clone: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install run test lint check screenshots

# python-ldap (LDAP sign-in) builds from source: Debian needs gcc, python3-dev, libldap2-dev
# and libsasl2-dev (apt; .ci/run installs them).
install: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-prod.txt pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -r requirements.txt
	$(BIN)/pip install -q --disable-pip-version-check --no-deps -e .  # the gpuctl command
	$(BIN)/pip check
	touch $@

run: install
	$(BIN)/python -m portal.devstack

# Two processes by default (pytest-xdist), each with its own PostgreSQL, Redis and other
# testbeds, a test file's tests on one of them; TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= 2
test: install
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile

# Refresh docs/screenshots/ from the browser tests (a plain `make test` leaves them alone).
screenshots: install
	PORTAL_SCREENSHOTS_DIR=docs/screenshots $(BIN)/pytest -m browser

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

check: install
	DEBUG=1 $(BIN)/python manage.py makemigrations --check --dry-run
