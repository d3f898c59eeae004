"""docs/architecture.md stays true: every module it names exists, every package of the
library has a line in it, each part of the Store contract is listed with its members and
counts as the code has them, every schema step is named, and the tree stays in packages
(the top level holds fewer than 15 modules). No model, no index."""

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


def test_the_store_is_its_parts_each_listed_in_the_document() -> None:
    """The Store is the sum of its parts (issue 43), each member of it declared by exactly
    one part; docs/architecture.md lists every part with its members and their counts, as
    the code has them."""
    from isotope.stores.parts import PARTS

    assert Store.__bases__ == PARTS
    members = {n for n in dir(Store) if not n.startswith("_")}
    declared = [n for part in PARTS for n in vars(part) if not n.startswith("_")]
    assert sorted(declared) == sorted(members) and len(set(declared)) == len(declared)
    listed = {m.group(1): m for m in re.finditer(
        r"\*\*(\w+)\*\* \((\d+) members, (\d+) abstract\): ((?:`\w+`(?:,\s+)?)+)", DOC)}
    assert sorted(listed) == sorted(p.__name__ for p in PARTS)
    for part in PARTS:
        found = listed[part.__name__]
        names = re.findall(r"`(\w+)`", found.group(4))
        own = [n for n in vars(part) if not n.startswith("_")]
        assert sorted(names) == sorted(own), part.__name__
        assert int(found.group(2)) == len(own), part.__name__
        assert int(found.group(3)) == len(getattr(part, "__abstractmethods__", ())), \
            part.__name__


def test_every_schema_step_is_named_in_both_spellings_and_the_document() -> None:
    """One list of named steps (issue 43) gives each engine its numbered steps; the steps
    written once are spelled per dialect; docs/architecture.md's table names each."""
    from isotope.stores import SCHEMA_VERSION
    from isotope.stores.postgres_schema import STEPS as SERVER
    from isotope.stores.schema_steps import STEPS, TYPES
    from isotope.stores.sqlite_schema import STEPS as EMBEDDED

    assert [s.number for s in STEPS] == list(range(1, SCHEMA_VERSION + 1))
    assert sorted(EMBEDDED) == list(range(1, SCHEMA_VERSION + 1))
    assert sorted(SERVER) == list(range(6, SCHEMA_VERSION + 1))  # (6: the first, at once)
    for step in STEPS:
        if step.both is not None:
            embedded, server = EMBEDDED[step.number], SERVER[step.number]
            assert isinstance(embedded, list) and isinstance(server, list)
            assert len(embedded) == len(server) == len(step.both)
            assert not any("{" in s for s in [*embedded, *server])
            assert any(TYPES["postgres"]["json"] in s or TYPES["postgres"]["id"] in s
                       for s in server), step.name
    table = dict(re.findall(r"^\| (\d+) \| ([^|]+?) \|", DOC, re.M))
    assert {int(n): name for n, name in table.items()} == {s.number: s.name for s in STEPS}


def test_the_table_of_operations_in_the_document_is_the_code_s() -> None:
    """docs/architecture.md's table of operations (writes, administrator, route, tool,
    command, the library call, what only administrators get) is
    ``server/operations.OPERATIONS``, row for row."""
    from isotope.server.operations import OPERATIONS

    def cell(text: str) -> str:
        return text.strip().replace("`", "")

    rows = [[cell(c) for c in line.strip("|").split("|")]
            for line in DOC.splitlines() if re.match(r"^\| [a-z_]+ \| (yes|no) \|", line)]
    expected = [[op.name, "yes" if op.writes else "no", "yes" if op.admin else "no",
                 "<br>".join(f"{m} {p}" for m, p in op.http), op.mcp or "", op.cli or "",
                 op.call, ", ".join(op.shapes)] for op in OPERATIONS]
    assert rows == expected


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


def test_a_store_that_forgets_who_may_see_cannot_be_made() -> None:
    """``visible_chunks`` returned every chunk by default: an engine that forgot it showed
    everything to everyone. The Access part has no default (issue 43): an engine that
    implements everything else but it cannot be made."""
    import pytest

    from isotope.stores.parts import Access
    from isotope.stores.sqlite import SQLiteStore

    access = {"visible_chunks", "set_access"}
    assert Access.__abstractmethods__ == frozenset(access) <= Store.__abstractmethods__
    written = {n: getattr(SQLiteStore, n) for n in Store.__abstractmethods__ - access}
    forgetful = type("Forgetful", (Store,), written)  # (all the rest an engine writes)
    with pytest.raises(TypeError, match="visible_chunks"):
        forgetful()
    assert forgetful.__abstractmethods__ == frozenset(access)


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


def test_no_module_imports_itself_back() -> None:
    """No import circle (issue 67: the last, postgres_chroma -> postgres): a module's
    imports at its top level, those for type checking among them, never lead back to
    it. (An import inside a function, a package's lazy factory, is no circle.)"""
    import ast

    modules = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts)
               .removesuffix(".__init__"): p for p in PACKAGE.rglob("*.py")}

    def top_level(path: Path) -> set[str]:
        found: set[str] = set()
        body = list(ast.parse(path.read_text()).body)
        while body:
            node = body.pop()
            if isinstance(node, ast.If):  # (if TYPE_CHECKING: ...)
                body += [*node.body, *node.orelse]
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules
                          else node.module for a in node.names}
        return found & set(modules)

    graph = {name: top_level(path) - {name} for name, path in modules.items()}
    circles = []
    for start in graph:
        seen, todo = set(), list(graph[start])
        while todo:
            name = todo.pop()
            if name == start:
                circles.append(start)
                break
            if name not in seen:
                seen.add(name)
                todo += graph[name]
    assert circles == [], f"modules that import themselves back: {circles}"


def test_the_facade_only_delegates_and_no_module_is_long() -> None:
    """``Isotope.search`` and ``Isotope.answer`` build a request (or take the principal's
    conditions) and hand it on to ``search/`` (issue 67): each under 25 lines, docstring
    included; no module of the library is over 800 lines."""
    import ast

    tree = ast.parse((PACKAGE / "index.py").read_text())
    facade = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Isotope")
    lengths = {n.name: (n.end_lineno or n.lineno) - n.lineno + 1 for n in facade.body
               if isinstance(n, ast.FunctionDef)}
    assert lengths["search"] < 25 and lengths["answer"] < 25 and lengths["ask"] < 25, lengths
    long = {str(path.relative_to(PACKAGE)): lines for path in sorted(PACKAGE.rglob("*.py"))
            if (lines := len(path.read_text().splitlines())) > 800}
    assert long == {}, long
