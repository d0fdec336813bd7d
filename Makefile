.PHONY: run test test-fast verify-suites setup lint format

run:  ## set up, then run web, workers, beat and Redis on embedded defaults until Ctrl-C
	scripts/run.sh

test:  ## set up, lint, the whole suite on real PostgreSQL and Redis, what differs on SQLite; budgets
	scripts/test.sh

test-fast:  ## lint and the fast tests on SQLite (still a real Redis): the inner loop
	FAST=1 scripts/test.sh

verify-suites:  ## the long sweeps in full: every task of every suite, every seed (before a release)
	VERIFY=1 scripts/test.sh

setup:
	scripts/setup.sh test

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy

format:
	.venv/bin/ruff check --fix . && .venv/bin/ruff format .
