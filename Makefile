.PHONY: run test test-fast setup lint format

run:  ## set up, then run web, workers, beat and Redis on embedded defaults until Ctrl-C
	scripts/run.sh

test:  ## set up, lint, the whole suite on real PostgreSQL and Redis, fast tests on SQLite
	scripts/test.sh

test-fast:  ## lint and the fast tests on SQLite (still a real Redis)
	FAST=1 scripts/test.sh

setup:
	scripts/setup.sh test

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy

format:
	.venv/bin/ruff check --fix . && .venv/bin/ruff format .
