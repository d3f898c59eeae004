DEMO_INDEX ?= .isotope-demo
QUESTION ?= How many vacation days do new employees get?

.PHONY: setup demo test lint bench docs

setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/isotope ingest examples --index $(DEMO_INDEX)
	.venv/bin/isotope query "$(QUESTION)" --index $(DEMO_INDEX)

lint: setup
	.venv/bin/ruff check src tests benchmarks docs
	.venv/bin/mypy

test: lint docs
	.venv/bin/pytest

bench: setup
	.venv/bin/python benchmarks/ingest_query.py

docs: setup
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict
