DEMO_INDEX ?= .isotope-demo
QUESTION ?= How many vacation days do new employees get?

.PHONY: setup demo test lint bench

setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/isotope ingest examples --index $(DEMO_INDEX)
	.venv/bin/isotope query "$(QUESTION)" --index $(DEMO_INDEX)

lint: setup
	.venv/bin/ruff check src tests benchmarks
	.venv/bin/mypy

test: lint
	.venv/bin/pytest

bench: setup
	.venv/bin/python benchmarks/ingest_query.py
