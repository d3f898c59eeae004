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
