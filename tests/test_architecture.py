"""docs/architecture.md stays true: every module it names exists, every package of the
library has a line in it, every method of the Store contract is named, and the tree stays
in packages (the top level holds fewer than 15 modules). No model, no index."""

from __future__ import annotations

import re
from pathlib import Path

from isotope.stores import Store

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "isotope"
DOC = (ROOT / "docs" / "architecture.md").read_text()


def _named_files() -> set[str]:
    return set(re.findall(r"`([a-z_]+(?:/[a-z_]+)*\.py)`", DOC))


def test_every_module_the_document_names_exists() -> None:
    named = _named_files()
    assert len(named) > 40
    missing = []
    for name in sorted(named):
        if name.startswith(("tests/", "benchmarks/")):
            found = (ROOT / name).is_file()
        elif "/" in name:
            found = (PACKAGE / name).is_file()
        else:  # a bare name: a top-level module, or one of a package the text is about
            found = (PACKAGE / name).is_file() or any(PACKAGE.glob(f"*/{name}"))
        if not found:
            missing.append(name)
    assert missing == [], f"docs/architecture.md names modules that do not exist: {missing}"


def test_every_package_has_a_line() -> None:
    packages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    assert {"ingest", "search", "stores", "providers", "embedders", "loaders", "ann", "cli",
            "server", "integrations"} <= set(packages)
    unnamed = [p for p in packages if f"`{p}/" not in DOC]
    assert unnamed == [], f"packages docs/architecture.md does not describe: {unnamed}"


def test_every_store_method_is_named() -> None:
    methods = {n for n, v in vars(Store).items() if callable(v) and not n.startswith("_")}
    assert {"add", "search", "export_source", "pending_chunks"} <= methods
    unnamed = sorted(m for m in methods if f"`{m}`" not in DOC and f"`{m}/" not in DOC
                     and f"/`{m}`" not in DOC and not re.search(rf"`\w+/{m}`", DOC))
    assert unnamed == [], f"Store methods docs/architecture.md leaves out: {unnamed}"


def test_the_top_level_is_small() -> None:
    modules = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert len(modules) < 15, modules


def test_settings_come_in_groups_each_consumer_taking_its_own() -> None:
    """Every setting is in exactly one group; a group checks its own values; the model
    factories take the models group, the key loader the server group, the ingest the
    groups it reads (a consumer reading another group's setting fails mypy)."""
    import inspect
    import typing

    import pydantic
    import pytest

    from isotope import embedders, providers
    from isotope.ingest.pipeline import Pipeline
    from isotope.server.auth import Keys
    from isotope.settings import GROUPS, ChunkingSettings, Settings, group_of

    names = [n for cls in GROUPS.values() for n in cls.model_fields]
    assert sorted(names) == sorted(Settings.model_fields) and len(set(names)) == len(names)
    assert list(GROUPS) == ["storage", "models", "chunking", "questions", "retrieval",
                            "server"]
    assert group_of("openai_base_url") == "models" and group_of("top_k") == "retrieval"
    with pytest.raises(pydantic.ValidationError, match="chunk_overlap"):
        ChunkingSettings(chunk_size=64, chunk_overlap=64)
    def takes(function: typing.Callable[..., object]) -> object:
        return inspect.signature(function).parameters["settings"].annotation

    assert takes(providers.create) == takes(embedders.create) == "ModelSettings"
    assert takes(Keys.from_settings) == "ServerSettings"
    assert takes(Pipeline.__init__) == "IngestSettings"


def test_the_stores_and_access_import_nothing_from_the_search() -> None:
    """The search reads the stores; the stores and the access rules never climb back up
    to search/ (``Condition`` lives in models.py, below both: issue 43)."""
    import ast

    climbing = []
    for path in [*sorted((PACKAGE / "stores").glob("*.py")), PACKAGE / "access.py",
                 PACKAGE / "models.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            climbing += [f"{path.relative_to(PACKAGE)}: {n}" for n in names
                         if n == "isotope.search" or n.startswith("isotope.search.")]
    assert climbing == []


def test_a_store_that_forgets_who_may_see_shows_nothing() -> None:
    """``visible_chunks`` returned every chunk by default: an engine that forgot it showed
    everything to everyone. The default now refuses as soon as a condition is given."""
    import pytest

    from isotope.access import Principal, condition
    from isotope.errors import InvalidArgument

    class Forgetful(Store):
        get_chunks = lambda self, ids: {i: object() for i in ids}  # noqa: E731

    Forgetful.__abstractmethods__ = frozenset()  # (only what this test calls)
    store = Forgetful()  # type: ignore[abstract]
    bob = condition(Principal.parse("user:bob"), control=True)
    assert bob is not None
    with pytest.raises(InvalidArgument, match="keeps no access lists"):
        store.visible_chunks(["c1"], [bob])
    assert store.visible_chunks(["c1"], []) == {"c1"}


def test_the_modes_come_from_the_registered_signals() -> None:
    """Each signal is registered once (name, what it reads, how it scores, its default
    weight); the modes, the weights, the CLI's and MCP's lists of modes are derived from
    it (issue 43)."""
    from typing import get_args

    import anyio

    from isotope.search import retrieval

    names = [s.name for s in retrieval.REGISTRY]
    assert retrieval.MODES == (*names, "hybrid") == get_args(retrieval.Mode)
    assert set(retrieval.signal_weights(0.5)) == set(names) == set(retrieval.SIGNALS)
    assert retrieval.signal_weights(0.5)["questions-bm25"] == 0.0  # (its registered weight)
    from isotope.server.mcp import create_mcp

    class _Index:
        def answer_llm(self) -> object:
            return type("LLM", (), {"local": True})()

        settings = type("S", (), {"llm_concurrency": 1})()

    tools = {t.name: t for t in anyio.run(create_mcp(_Index(), remote=True).list_tools)}  # type: ignore[arg-type]
    listed = tools["search"].inputSchema["properties"]["mode"]["anyOf"][0]["enum"]
    assert sorted(listed) == sorted(retrieval.MODES)
