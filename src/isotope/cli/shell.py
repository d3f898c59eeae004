"""The ``isotope`` app: its options shared by commands, opening an index, and the global
flags."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from isotope._version import __version__
from isotope.cli.console import VisibleFormatter, fail, out

FIRST = ("ingest", "ask", "query", "sync", "enrich", "list", "status", "delete", "serve",
         "mcp", "access", "questions", "feedback", "log", "audit", "weights", "eval",
         "check", "compact", "copy", "config", "project")
"""The order of the commands in ``isotope --help``: the first hour's first."""


class Commands(TyperGroup):
    """The top-level group: its commands in :data:`FIRST`'s order, each listed by the
    first clause of its help (``isotope COMMAND --help`` has all of it)."""

    def list_commands(self, ctx: Any) -> list[str]:
        names = super().list_commands(ctx)
        return sorted(names, key=lambda n: FIRST.index(n) if n in FIRST else len(FIRST))

    def get_command(self, ctx: Any, name: str) -> Any:
        command = super().get_command(ctx, name)
        if command is not None and not command.short_help and command.help:
            command.short_help = _first_clause(command.help)
        return command


def _first_clause(text: str) -> str:
    """A help text's first sentence, cut at its first colon or semicolon (outside
    parentheses), and at its first parenthesis past 60 characters."""
    words = " ".join(text.split())
    depth = 0
    for i, c in enumerate(words):
        depth += (c == "(") - (c == ")")
        if c == "(" and i > 60 and depth == 1:
            return words[:i].rstrip() + "."
        if depth == 0 and c in ".:;!?" and words[i + 1:i + 2] in (" ", ""):
            return words[:i] + "."
    return words


app = typer.Typer(
    name="isotope",
    cls=Commands,
    help="A question-indexed retrieval database: ingest documents, then ask questions.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _usage_error(self: Any) -> None:
    """Click's usage errors (an unknown command or option, a value out of range) in the
    one-line style of every other error: ``error: MESSAGE (isotope COMMAND --help)``."""
    from isotope.cli.console import err, labelled

    ctx = getattr(self, "ctx", None)
    where = f" ({ctx.command_path} --help)" if ctx is not None else ""
    err.print(labelled("error:", "red", f"{self.format_message()}{where}"))


def _one_style() -> None:
    """Typer prints usage errors in a box; every other error of isotope is one line."""
    from typer import rich_utils

    rich_utils.rich_format_error = _usage_error  # (read at each error by typer.core)


_one_style()


class ShowByDefault(TyperGroup):
    """A group whose ``show`` command runs when the first word names none of its commands
    (``isotope questions SOURCE``, ``isotope weights``); a source named like a command:
    ``./review``. Alone, the group shows its help when ``show`` needs an argument
    (``isotope graph``)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        needs = any(p.param_type_name == "argument" and p.required
                    for p in self.commands["show"].params)
        if not args and needs:
            args = ["--help"]
        elif not args or (args[0] not in self.commands and args[0] not in ("--help", "-h")):
            args = ["show", *args]
        result: list[str] = super().parse_args(ctx, args)
        return result


IndexOpt = Annotated[
    str | None,
    typer.Option("--index", "-i", help="Index directory, or a store URL (default: the "
                 "ISOTOPE_INDEX setting, else ./.isotope).", show_default=False),
]
ProjectOpt = Annotated[
    str | None,
    typer.Option("--project", "-p", help="A named index (isotope project list); default: "
                 "the ISOTOPE_PROJECT setting, else the default project.", show_default=False),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
WaitOpt = Annotated[float | None, typer.Option(
    "--wait", help="Seconds to wait if another process is writing to the index "
    "(default: the lock_wait setting, 0: fail at once).", show_default=False)]
IncludeOpt = Annotated[list[str] | None, typer.Option(
    "--include", help="Only files matching this glob (repeatable).")]
ExcludeOpt = Annotated[list[str] | None, typer.Option(
    "--exclude", help="Skip files matching this glob (repeatable).")]
ContextOpt = Annotated[bool | None, typer.Option(
    "--chunk-context/--no-chunk-context", help="Contextual enrichment: the model situates "
    "each chunk in its document, and the chunk is searched with that context (one model "
    "call per chunk; saved in a new index's settings).")]
QuestionsOpt = Annotated[str, typer.Option(
    "--questions", metavar="now|later",
    help="When questions are generated: now (after every source is stored and searchable, "
    "in this run) or later (`isotope enrich`; no language model is called now).")]
AllowOpt = Annotated[list[str] | None, typer.Option(
    "--allow", metavar="public|user:NAME|group:NAME",
    help="Who may see these sources (repeatable): their access list, over the "
    ".isotope-access rules file (see isotope access --help).")]
AsOpt = Annotated[str | None, typer.Option(
    "--as", metavar="user:NAME[,group:NAME...]",
    help="See what this principal would see (only the sources its access lists let it "
    "see).", show_default=False)]
PlainOpt = Annotated[bool, typer.Option(
    "--plain", help="Print one line per file instead of a progress bar (and, every 10 s "
    "of waiting for a remote model server, a line saying so).")]


def open_index(index: str | Path | None, project: str | None = None, *, create: bool = False,
          **settings: Any) -> Any:
    from isotope import stores
    from isotope.index import Isotope

    if project is not None:
        if index is not None:
            fail("give --index or --project, not both")
        from isotope import projects
        from isotope.settings import resolve

        projects.require(project, resolve(None)[0])
        return Isotope.open(create=False, project=project, **settings)
    if index is not None and stores.scheme(index) is None:
        index = Path(index)  # --index NAME is the folder ./NAME, never a project
    return Isotope.open(index, create=create, **settings)


def describe(location: str) -> str:
    from isotope import stores

    return stores.describe(location)


def _print_version(value: bool) -> None:
    if value:
        out.print(f"isotope {__version__}")
        raise typer.Exit()


class _State:
    verbose = False


state = _State()
"""Set by the global flags (``-v``)."""


@app.callback()
def _main(
    verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Log what happens, and show the traceback of an unexpected "
        "error.")] = False,
    version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print isotope's version and exit.")] = False,
) -> None:
    state.verbose = verbose
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    for handler in logging.getLogger().handlers:  # log lines name files too
        handler.setFormatter(VisibleFormatter("%(levelname)s %(name)s: %(message)s"))
