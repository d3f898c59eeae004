"""The ``isotope`` command: a thin shell over :class:`isotope.Isotope`. Each group of
commands is a module of this package; this one gathers them and runs the app."""

from __future__ import annotations

import sys

from isotope.cli import (  # noqa: F401 (commands)
    access_commands,
    evaluating,
    graph_commands,
    ingesting,
    inspecting,
    learning_commands,
    questions_view,
    searching,
    serving,
)
from isotope.cli.access_commands import access_app
from isotope.cli.console import err, labelled, visible
from isotope.cli.graph_commands import graph_app
from isotope.cli.learning_commands import weights_app
from isotope.cli.project_commands import project_app
from isotope.cli.questions_view import questions_app
from isotope.cli.shell import app, state


def paragraphs(doc: str) -> str:
    """A docstring as help text: each paragraph on one line (Rich would otherwise keep
    the docstring's line breaks and break sentences in the middle)."""
    import inspect

    return "\n\n".join(" ".join(part.split()) for part in inspect.cleandoc(doc).split("\n\n"))


for _command in (*app.registered_commands, *project_app.registered_commands,
                 *access_app.registered_commands, *questions_app.registered_commands,
                 *weights_app.registered_commands, *graph_app.registered_commands):
    if _command.help is None and _command.callback is not None and _command.callback.__doc__:
        _command.help = paragraphs(_command.callback.__doc__)


def main() -> None:
    """The ``isotope`` command. Its last line of defence: an unexpected exception is one
    line naming it, plus how to see the traceback (``-v`` shows it)."""
    try:
        app()
    except Exception as exc:  # the last line of defence
        if state.verbose:
            raise
        err.print(labelled("error:", "red", f"{type(exc).__name__}: {exc}"))
        err.print("this is a bug in isotope or an unexpected condition; run the command "
                  "again with -v (isotope -v ...) for the traceback")
        sys.exit(1)


__all__ = ["app", "main", "project_app", "visible"]
