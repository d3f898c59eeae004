"""The documentation as a user meets it: the README is short and its links resolve; the
reference pages are made from the code and every command, option, setting and HTTP
route has a description; the site builds with ``mkdocs build --strict`` and fetches
nothing from the network; and every shell and Python example of the guides runs as
written, page by page, in a folder holding the repository's ``examples/`` and the index
``./my_index`` made from them (the first page's). The fake model replies (at the
provider boundary, registered in each example's process); one example's answer comes from
the real local model."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from isotope import Isotope
from isotope.embedders import Embedder

from conftest import EXAMPLES, FakeLLM

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
GUIDES = ("getting-started", "guides", "operations")
"""The folders whose examples run (the reference is generated; development and
architecture describe this repository)."""
_FENCE = re.compile(r"^\s*```(\S*)")
LANGUAGES = {"bash", "python", "text", "console", "json", "sql", "yaml", "toml"}
"""The languages a fence may name: ``bash`` and ``python`` run, the others are data or
output (a command in one of them is an error)."""
_NOT_RUN = re.compile(r"^<!-- not run: (.*?) -->$")

sys.path.insert(0, str(DOCS))
import reference  # noqa: E402


@dataclass
class Example:
    page: Path
    line: int
    language: str
    code: str
    not_run: str | None
    """Why it is not run (None: it runs)."""


def fences_of(page: Path) -> list[Example]:
    """Every fenced block of the page, in order (``not_run``: the reason given before
    it, if any)."""
    found, lines = [], page.read_text().splitlines()
    i = 0
    while i < len(lines):
        opened = _FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        start, language, indent = i, opened.group(1), len(lines[i]) - len(lines[i].lstrip())
        i += 1
        body = []
        while i < len(lines) and not lines[i].lstrip().startswith("```"):
            body.append(lines[i][indent:])
            i += 1
        i += 1
        before = next((x for x in reversed(lines[:start]) if x.strip()), "")
        marker = _NOT_RUN.match(before.strip())
        found.append(Example(page, start + 1, language, "\n".join(body),
                             marker.group(1) if marker else None))
    return found


def examples_of(page: Path) -> list[Example]:
    """The page's ``bash`` and ``python`` blocks, in order."""
    return [e for e in fences_of(page) if e.language in ("bash", "python")]


def _pages() -> list[Path]:
    return sorted(p for folder in GUIDES for p in (DOCS / folder).rglob("*.md"))


# -- the README --------------------------------------------------------------------------
def test_the_readme_is_short_and_its_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert len(links) >= 15
    for link in links:
        if "://" not in link:
            assert (ROOT / link).exists(), f"the README links to {link}, which is missing"
    for figure in ("Apache-2.0", "make demo", "make test"):
        assert figure in readme
    # its headline figure is hybrid's current one (benchmarks/current/quality.json)
    kept = json.loads((ROOT / "benchmarks" / "current" / "quality.json").read_text())
    hybrid = next(m for m in kept["outputs"][0]["modes"] if m["mode"] == "hybrid")
    assert f"**{hybrid['recall']['1']:.1f}%**" in readme


def test_what_the_readme_held_was_moved_not_lost() -> None:
    """The hostile-input table, the reliability promises and the measured figures with
    their commands live in the docs now."""
    import hostile

    reliability = (DOCS / "operations" / "reliability.md").read_text()
    assert "hostile files" in reliability and "SIGKILL" in reliability
    folder = Path(tempfile.mkdtemp())
    try:
        cases = hostile.build(folder / "corpus")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    missing = [c.name for c in cases if f"| {c.name} |" not in reliability]
    assert len(cases) >= 40 and missing == [], missing
    # each row says the outcome tests/test_hostile.py checks (it was matched by case name
    # only: a row could say "ingested" of a file that is refused)
    said = {}
    for line in reliability.splitlines():
        cells = [c.strip() for c in line.split(" | ")]
        if len(cells) >= 2:
            said[cells[0].removeprefix("| ")] = cells[1]
    labels = {"error": "error", "ingested": "ingested", "skipped": "skipped",
              "walked": "walked once, no hang", "members": "streamed"}
    wrong = [c.name for c in cases if not said[c.name].startswith(labels[c.outcome])]
    assert wrong == [], wrong
    assert "PostgreSQL at a million questions" in (
        ROOT / "benchmarks" / "history" / "2026-11.md").read_text()
    assert '--8<-- "benchmarks/RESULTS.md"' in (DOCS / "benchmarks.md").read_text()


# -- the reference -----------------------------------------------------------------------
def test_every_command_option_setting_and_route_has_a_description() -> None:
    assert reference.undescribed() == []


def test_the_reference_pages_are_made_from_the_code() -> None:
    from isotope.settings import Settings

    cli = reference.cli_markdown()
    for command in ("ingest", "query", "weights fit", "project create", "access set"):
        assert f"## isotope {command}\n" in cli
    assert "`--json`" in cli and "`--index`, `-i`" in cli
    settings = reference.settings_markdown()
    for name in Settings.model_fields:
        assert f"| `{name}` | `ISOTOPE_{name.upper()}` |" in settings
    assert "| `replica_max_lag` | `ISOTOPE_REPLICA_MAX_LAG` | `5.0` | > 0, <= 86400 |" in (
        settings)
    http = reference.http_markdown()
    for route in ("POST /search", "POST /ask", "GET /status", "DELETE /sources/{source}"):
        assert f"## {route}\n" in http
    for page, marker in (("cli", "cli"), ("settings", "settings"), ("http-api", "http")):
        assert f"<!-- reference:{marker} -->" in (DOCS / "reference" / f"{page}.md").read_text()


def test_the_python_api_page_shows_every_export_with_its_docstring() -> None:
    import isotope

    page = (DOCS / "reference" / "python-api.md").read_text()
    for name in isotope.__all__:
        if name == "__version__":
            continue
        assert f"::: isotope.{name}\n" in page, f"{name} is not on the Python API page"
        assert (getattr(isotope, name).__doc__ or "").strip(), f"{name} has no docstring"


def test_the_hand_written_tables_name_what_exists() -> None:
    """The serving guide's table of endpoints and the first page's table of calls are
    written for reading; they name only routes and methods that exist, and the table of
    endpoints names every route."""
    from isotope import Isotope

    routes = {f"{m.upper()} {re.sub(r'{[^}]+}', '{id}', path)}"
              for path, ops in reference.openapi()["paths"].items() for m in ops}
    table = (DOCS / "guides" / "serving.md").read_text().split("| endpoint |")[1]
    table = table.split("\n\n")[0]
    named = {f"{m} {re.sub(r'{[^}]+}', '{id}', p.split('?')[0])}"
             for m, p in re.findall(r"`(GET|POST|PUT|DELETE) (/[^`]*)`", table)}
    assert named - routes == set(), named - routes
    assert {r for r in routes if r != "DELETE /sources/{id}"} - named == set()
    calls = re.findall(r"`iso\.(\w+)\(", (DOCS / "getting-started" / "first-index.md"
                                            ).read_text())
    assert calls and [c for c in calls if not hasattr(Isotope, c)] == []


def test_the_site_builds_strictly_and_fetches_nothing(tmp_path: Path) -> None:
    """``mkdocs build --strict`` (a broken link, a page missing from the nav, a bad
    reference fails it); the built pages load no script, style or font from the network,
    so the site works opened from disk."""
    site = tmp_path / "site"
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f",
                            str(ROOT / "mkdocs.yml"), "-d", str(site)], cwd=ROOT,
                           capture_output=True, text=True, timeout=600,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, built.stderr
    pages = list(site.rglob("*.html"))
    assert len(pages) >= 25
    for page in pages:
        text = page.read_text()
        fetched = re.findall(r'<(?:script|link|img|iframe|source)[^>]+(?:src|href)='
                             r'"((?:https?:)?//[^"]+)"', text)
        assert fetched == [], f"{page.name} loads {fetched}"
    for sheet in site.rglob("*.css"):
        imported = re.findall(r"(?:url\(|@import\s+)['\"]?((?:https?:)?//[^'\")]+)",
                              sheet.read_text())
        assert imported == [], f"{sheet.name} loads {imported}"
    assert "isotope weights fit" in (site / "reference" / "cli.html").read_text()
    api = (site / "reference" / "python-api.html").read_text()
    assert "Isotope" in api and "fit_weights" in api
    assert not re.search(r":(meth|class|func|data|attr|mod|exc):", api)  # (Sphinx roles)
    assert "ISOTOPE_READ_REPLICAS" in (site / "reference" / "settings.html").read_text()


# -- the examples ------------------------------------------------------------------------
def test_every_fence_names_its_language_and_commands_are_examples() -> None:
    """No command hides in a block that does not run: a fence names a known language,
    and a ``text`` or ``console`` block holds data or output, not a command to type
    (``console`` shows what a command printed, after a ``$ ``)."""
    for page in [*_pages(), DOCS / "index.md"]:
        for fence in fences_of(page):
            where = f"{page.relative_to(DOCS)}:{fence.line}"
            assert fence.language in LANGUAGES, f"{where}: fence language {fence.language!r}"
            if fence.language == "text":
                commands = [x for x in fence.code.splitlines() if re.match(
                    r"\s*(isotope|pip|export|python|\.venv/|curl|make) ", x)]
                assert not commands, f"{where}: a command in a text block: {commands}"


def test_the_readme_example_is_the_first_page_example() -> None:
    readme = ROOT / "README.md"
    first = DOCS / "getting-started" / "first-index.md"
    python = [e.code for e in fences_of(readme) if e.language == "python"]
    assert python and python[0] in [e.code for e in examples_of(first)]


def test_every_example_that_is_not_run_says_why() -> None:
    every = [e for page in _pages() for e in examples_of(page)]
    assert len(every) >= 15
    skipped = [e for e in every if e.not_run is not None]
    assert all(len(e.not_run or "") > 20 for e in skipped)
    assert len(skipped) <= len(every) // 2, [f"{e.page.name}:{e.line}" for e in skipped]


@pytest.fixture(scope="module")
def made_index(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Path:
    """``./my_index`` as the first page makes it (the bundled examples ingested)."""
    folder = tmp_path_factory.mktemp("made")
    shutil.copytree(EXAMPLES, folder / "examples")
    with Isotope.open(folder / "my_index", embedder=embedder, llm=FakeLLM(),
                      cache=False) as iso:
        assert iso.ingest(folder / "examples").ok
    return folder / "my_index"


def _workspace(tmp_path: Path, made_index: Path) -> tuple[Path, dict[str, str]]:
    """A folder with ``examples/`` and ``./my_index``, and the environment an example runs
    in: this .venv first on PATH, the fake model registered at interpreter start."""
    from isotope.settings import Settings

    work = tmp_path / "work"
    shutil.copytree(EXAMPLES, work / "examples")
    shutil.copytree(made_index, work / "my_index")
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'tests')!r})\nimport conftest  # noqa\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ISOTOPE_")}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               PYTHONPATH=str(shim), HOME=str(tmp_path / "home"),
               XDG_DATA_HOME=str(tmp_path / "data"), XDG_CACHE_HOME=str(tmp_path / "cache"),
               ISOTOPE_MODEL_DIR=str(Settings().model_dir),
               ISOTOPE_QUESTION_MODEL="fake/echo", ISOTOPE_ANSWER_MODEL="fake/echo",
               NO_COLOR="1", COLUMNS="120")
    return work, env


def _extras() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return set(project["optional-dependencies"])


def run(example: Example, work: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run one example as written in ``work``. An install line (``pip install
    'isotopedb[EXTRA]'``) is checked against the package's extras, not run: the suite's
    environment has them all."""
    code = example.code
    if example.language == "bash":
        kept = []
        for line in code.splitlines():
            wanted = re.match(r"pip install '?isotopedb\[([\w,-]+)\]'?", line.strip())
            if wanted:
                missing = set(wanted.group(1).split(",")) - _extras()
                assert not missing, f"{example.page.name}:{example.line}: no extra {missing}"
                continue
            kept.append(line)
        command = ["bash", "-euo", "pipefail", "-c", "\n".join(kept)]
    else:
        command = [sys.executable, "-c", code]
    return subprocess.run(command, cwd=work, env=env, capture_output=True, text=True,
                          timeout=600)


_RUNNING = [p for p in _pages() if any(e.not_run is None for e in examples_of(p))]


def test_most_guides_have_examples_that_run() -> None:
    assert len(_RUNNING) >= 10, [str(p.relative_to(DOCS)) for p in _RUNNING]


@pytest.mark.parametrize("page", _RUNNING, ids=lambda p: str(p.relative_to(DOCS)))
def test_the_examples_of_each_page_run_as_written(page: Path, tmp_path: Path,
                                                  made_index: Path) -> None:
    work, env = _workspace(tmp_path, made_index)
    said = ""
    for example in (e for e in examples_of(page) if e.not_run is None):
        done = run(example, work, env)
        assert done.returncode == 0, (f"{page.relative_to(DOCS)}:{example.line} failed:\n"
                                      f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
        said += done.stdout
    if page.name == "first-index.md":  # (what the user reads first does what it says)
        assert "handbook.md" in said and "25" in said, said[-2000:]


@pytest.mark.llm
def test_the_first_question_is_answered_by_the_real_local_model(tmp_path: Path,
                                                                 made_index: Path) -> None:
    """The first page's question through the offline model itself (no fake)."""
    first, asked = next((e, line) for e in examples_of(
        DOCS / "getting-started" / "first-index.md") if e.language == "bash"
        for line in e.code.splitlines()
        if line.startswith(("isotope ask", "isotope query")) and "--raw" not in line)
    work, env = _workspace(tmp_path, made_index)
    for name in ("ISOTOPE_QUESTION_MODEL", "ISOTOPE_ANSWER_MODEL", "PYTHONPATH"):
        env.pop(name)
    done = run(Example(first.page, first.line, "bash", asked.split("  #")[0], None), work,
               env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "handbook.md" in done.stdout, done.stdout
