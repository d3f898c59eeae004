"""What the command line prints, and where its help points (issue 64, round 5 of the
adversarial runs): every command run on a small index of the sample documents (the fake
model at the provider boundary, the knowledge graph on) prints no unrendered markup;
every ``isotope WORD [WORD]`` its help names is a command; and a source is named one way
in a table, a message and ``--json``."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from rich.style import Style
from typer.testing import CliRunner

from isotope.cli import app

from conftest import EXAMPLES

QUESTION = "How many vacation days do new employees get?"
NOT_RUN = {("serve",): "it serves until stopped", ("mcp",): "it serves stdio until closed"}
"""Commands that only show their help here, and why."""
_TAG = re.compile(r"\[(/?)([^\[\]\n]*)\]")


def unrendered(text: str) -> list[str]:
    """The Rich markup tags in ``text`` (``[bold]``, ``[/dim]``, ``[/]``, ``[link=...]``):
    a bracket that holds a style. A bracket of plain text (``[1]``, ``[--not-useful]``,
    ``[y/N]``) is none."""
    found = []
    for tag in _TAG.finditer(text):
        closing, inner = tag.groups()
        if (closing and not inner) or inner.startswith(("link=", "@")) or _a_style(inner):
            found.append(tag.group(0))
    return found


def _a_style(text: str) -> bool:
    if not text.strip():
        return False
    try:
        Style.parse(text)
    except Exception:  # (rich's StyleSyntaxError, or a colour it does not know)
        return False
    return True


def test_the_markup_check_finds_markup_and_only_markup() -> None:
    assert unrendered("[bold]Anna Ferreira[/bold] (person)") == ["[bold]", "[/bold]"]
    assert unrendered("[dim red]x[/] [link=https://x]y") == ["[dim red]", "[/]",
                                                             "[link=https://x]"]
    assert unrendered("[1] 0.852  handbook.md [--not-useful] [y/N] [default: 5]") == []


def _commands(command: Any = None, path: tuple[str, ...] = ()
              ) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command of the app (groups too), by its words after ``isotope``."""
    command = command or typer.main.get_command(app)
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        if not getattr(sub, "hidden", False):
            yield from _commands(sub, (*path, name))


def _leaf(args: list[str]) -> tuple[str, ...]:
    """The command ``args`` runs (a group's ``show`` when its first word names none of
    its commands, as :class:`isotope.cli.shell.ShowByDefault` does)."""
    command: Any = typer.main.get_command(app)
    path: list[str] = []
    for word in args:
        subs = getattr(command, "commands", None)
        if subs is None or word.startswith("-"):
            break
        if word not in subs:
            word = "show"  # (a KeyError: a group without it)
        path.append(word)
        command = subs[word]
    return tuple(path)


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working directory (conftest's ``tmp_path``) holding ``docs/``, the sample
    documents; the fake model selected as a user selects a model; the graph on."""
    shutil.copytree(EXAMPLES, tmp_path / "docs")
    monkeypatch.setenv("ISOTOPE_QUESTION_MODEL", "fake/echo")
    monkeypatch.setenv("ISOTOPE_ANSWER_MODEL", "fake/echo")
    monkeypatch.setenv("ISOTOPE_GRAPH", "true")
    return tmp_path


def test_no_command_prints_unrendered_markup(workspace: Path) -> None:
    """`isotope graph "Anna Ferreira"` printed `[bold]Anna Ferreira[/bold]`: the console
    shows text as it is (a document's "[bold]" must stay), so a style is given as a
    style, never as markup. Every command runs here, and its help is shown."""
    runner = CliRunner()
    index = ["--index", "idx"]
    said: dict[str, str] = {}
    ran: set[tuple[str, ...]] = set()

    def run(*args: str, fails: bool = False) -> str:
        done = runner.invoke(app, list(args))
        shown = " ".join(args)
        assert (done.exit_code != 0) == fails, f"isotope {shown}: {done.output[-2000:]}"
        assert not done.exception or isinstance(done.exception, SystemExit), shown
        said[shown] = done.output
        ran.add(_leaf(list(args)))
        return done.output

    run("sample", "sample-docs")
    run("ingest", "docs", *index, "--plain")
    run("ingest", "docs", *index)
    run("enrich", *index)
    run("sync", "docs", *index)
    run("list", *index)
    run("list", *index, "--json")
    run("status", *index)
    run("config", *index)
    run("check", *index)
    run("compact", *index)
    run("copy", "idx", "copied")
    run("query", QUESTION, *index, "--raw", "--explain")
    run("ask", QUESTION, *index)
    found = json.loads(run("query", QUESTION, *index, "--raw", "--json"))
    chunk = found["results"][0]["chunk"]
    run("feedback", found["query_id"], chunk["id"], *index)
    run("log", *index)
    run("audit", *index)
    run("eval", "--from-log", *index)
    run("questions", "show", "docs/handbook.md", *index)
    run("questions", "add", "docs/handbook.md", "Who is given 25 days of vacation?", *index)
    listed = json.loads(run("questions", "docs/handbook.md", *index, "--json"))
    added = next(q for q in listed if q["origin"] == "manual")
    run("questions", "edit", added["id"], "Who receives 25 days of vacation?", *index)
    generated = next(q for q in listed if q["origin"] == "generated" and q["kept"])
    run("questions", "disable", generated["id"], *index)
    run("questions", "enable", generated["id"], *index)
    run("questions", "orphaned", *index)
    run("questions", "review", *index)
    run("weights", "show", *index)
    run("weights", "fit", *index, fails=True)  # (too few marks: it says so)
    run("weights", "reset", *index)
    run("adapter", "show", *index)
    run("adapter", "fit", *index, fails=True)  # (too few questions: it says so)
    run("access", "set", "docs/handbook.md", "--allow", "public", *index)
    run("access", "show", "docs/handbook.md", *index)
    run("entities", *index)
    entity = json.loads(run("entities", "--top", "1", "--json", *index))[0]["name"]
    run("graph", entity, *index)
    run("graph", "show", entity, "--hops", "2", *index)
    run("graph", f"{entity} Instruments", *index, fails=True)  # (did you mean ...)
    run("graph", "export", *index)
    run("project", "create", "demo")
    run("project", "list")
    run("project", "show", "demo")
    run("project", "use", "demo")
    run("project", "delete", "demo", "--yes")
    run("delete", "docs/faq.html", *index)
    for path, _ in _commands():
        run(*path, "--help")
    assert "did you mean" in said[f"graph {entity} Instruments --index idx"]

    leaves = {path for path, command in _commands() if not hasattr(command, "commands")}
    assert leaves - ran - set(NOT_RUN) == set(), "commands this test does not run"
    marked = {shown: tags for shown, text in said.items() if (tags := unrendered(text))}
    assert marked == {}, marked


def test_a_document_s_brackets_are_shown_as_they_are(workspace: Path) -> None:
    """The variant the fix must keep: markup is not interpreted in user text either."""
    (workspace / "notes").mkdir()
    (workspace / "notes" / "[bold]plan.md").write_text(
        "# Plan\n\nThe [dim]north gate[/dim] opens at [red]six[/red] on weekdays.\n")
    runner = CliRunner()
    assert runner.invoke(app, ["ingest", "notes", "-i", "idx", "--plain"]).exit_code == 0
    shown = runner.invoke(app, ["query", "When does the north gate open?", "-i", "idx",
                                "--raw"]).output
    assert "[bold]plan.md" in shown and "[dim]north gate[/dim]" in shown, shown


# -- where the help points -------------------------------------------------------------
_MENTION = re.compile(r"\bisotope ([a-z][\w-]*)(?: ([a-z][\w-]*))?")


def dangling(text: str) -> list[str]:
    """Each ``isotope WORD [WORD]`` in ``text`` that names no command: the first word must
    be a command; a second lowercase word after a group, one of its commands (a group's
    argument is written in capitals: ``isotope questions SOURCE``)."""
    root = typer.main.get_command(app)
    found = []
    for mention in _MENTION.finditer(text):
        first, second = mention.groups()
        command = root.commands.get(first)  # type: ignore[attr-defined]
        if command is None or (second is not None and hasattr(command, "commands")
                               and second not in command.commands):
            found.append(mention.group(0))
    return found


def test_the_mention_check_finds_what_points_nowhere() -> None:
    assert dangling("as `isotope search --json` gives it") == ["isotope search"]
    assert dangling("`isotope graph exports` and isotope weights fits") == [
        "isotope graph exports", "isotope weights fits"]
    assert dangling("`isotope query --json`, (isotope questions SOURCE), isotope graph "
                    "show X, `isotope ingest isotope-sample`, isotopedb[server]") == []


def test_every_command_a_help_names_exists() -> None:
    """`isotope entities --help` named `isotope search --json`, which does not exist. Every
    command's help, its options' and arguments' help, and the docstrings the help is made
    from, name only commands that exist."""
    texts: dict[str, str] = {}
    for path, command in _commands():
        where = "isotope " + " ".join(path)
        texts[where] = command.help or ""
        callback = getattr(command, "callback", None)
        texts[f"{where} (docstring)"] = (callback.__doc__ or "") if callback else ""
        for param in command.params:
            texts[f"{where} {param.name}"] = getattr(param, "help", None) or ""
    assert len(texts) > 200
    wrong = {where: found for where, text in texts.items() if (found := dangling(text))}
    assert wrong == {}, wrong


def test_copy_s_help_names_every_backend_it_copies_between() -> None:
    said = " ".join(CliRunner().invoke(app, ["copy", "--help"]).output.split())
    assert "PostgreSQL" in said and "Chroma" in said and "usearch" in said, said


# -- one name for a source -------------------------------------------------------------
def test_a_source_is_named_one_way_in_tables_messages_and_json(
        workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`isotope list` showed `docs/handbook.md` where `--json` gave the absolute path:
    every command names a source by the name the index stores (docs/reference/cli.md),
    whatever the working directory, in its table and text as in its JSON; and a table
    written to no terminal folds no path in two (it was cut at 80 columns)."""
    runner = CliRunner()

    def run(*args: str) -> str:
        done = runner.invoke(app, [*args, "--index", "idx"])
        assert done.exit_code == 0, done.output
        return done.output

    run("ingest", "docs", "--plain")
    listed = [s["uri"] for s in json.loads(run("list", "--json"))]
    table = run("list")
    assert len(listed) == 11 and all(Path(uri).is_absolute() for uri in listed)
    assert all(f"│ {uri} " in table for uri in listed), table
    handbook = str((workspace / "docs" / "handbook.md").resolve())
    assert handbook in listed
    found = json.loads(run("query", QUESTION, "--raw", "--json"))["results"]
    text = run("query", QUESTION, "--raw")
    assert found[0]["chunk"]["source"] == handbook and f"  {handbook} > " in text, text
    sampled = re.findall(r"^(\S.*) chunk \d+$", run("questions", "--sample", "100"), re.M)
    assert handbook in sampled and set(sampled) <= set(listed), sampled
    assert run("access", "set", "docs/handbook.md", "--allow", "public").splitlines()[
        0] == handbook
    # from another working directory, the same names
    (workspace / "elsewhere").mkdir()
    monkeypatch.chdir(workspace / "elsewhere")
    assert [s["uri"] for s in json.loads(runner.invoke(app, [
        "list", "--json", "--index", "../idx"]).output)] == listed
