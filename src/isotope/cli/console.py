"""What the command prints: a console that shows user data as it is, and the helpers
that print errors, JSON and source names."""

from __future__ import annotations

import json
import logging
import sys
import unicodedata
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import typer
from rich.console import Console, ConsoleDimensions
from rich.segment import Segment
from rich.text import Text

from isotope.errors import IsotopeError


def visible(text: str) -> str:
    """``text`` with control and format characters (terminal escape sequences,
    bidirectional overrides) written out as ``\\x1b``-style escapes, so that a file name
    or a document cannot clear the screen, retitle the window or reorder what is shown."""
    if text.isprintable():
        return text
    return "".join(c if c == "\n" or c.isprintable() or unicodedata.category(c) == "Zs"
                   else ascii(c)[1:-1] for c in text)


UNWRAPPED = 10_000
"""The width of a console that writes to no terminal: no line of a table is folded."""


class SafeConsole(Console):
    """A console that never interprets markup in what it is given (a file named
    ``[red]x.txt`` is shown as such: a style is given as a style, ``Text(name, "bold")``,
    never as ``[bold]`` in a string) and shows control characters of the text it prints
    visibly (:func:`visible`); its own styles and the progress bar's cursor moves pass.
    Writing to a pipe or a file (no terminal, no ``COLUMNS``), it is as wide as a line
    needs: a table's cells are not folded at 80 columns (a source's path cut in two is
    found by no grep)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(highlight=False, markup=False, emoji=False, soft_wrap=True,
                         **kwargs)

    @property
    def size(self) -> ConsoleDimensions:
        found = super().size
        if self._width is None and "COLUMNS" not in self._environ and not self.is_terminal:
            return ConsoleDimensions(UNWRAPPED, found.height)
        return found

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            s if s.control else Segment(visible(s.text), s.style) for s in buffer)


out = SafeConsole()
err = SafeConsole(stderr=True)


class VisibleFormatter(logging.Formatter):
    """Log lines with control characters shown as escapes (they carry file names)."""

    def format(self, record: logging.LogRecord) -> str:
        from isotope.redaction import redact

        return visible(redact(super().format(record)))


def labelled(label: str, style: str, message: str) -> Text:
    """``label`` in ``style``, then ``message`` as it is."""
    return Text.assemble((label, style), " ", message)


def fail(message: str, code: int = 1) -> NoReturn:
    from isotope.redaction import redact

    err.print(labelled("error:", "red", redact(message)))
    raise typer.Exit(code)


@contextmanager
def errors() -> Iterator[None]:
    try:
        yield
    except IsotopeError as exc:
        fail(str(exc))


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str, ensure_ascii=False) + "\n")
