"""HTML: the main text (``<main>`` or ``<article>`` when present, else ``<body>``), without
scripts, styles, navigation, headers, footers and asides; the ``<title>`` as metadata;
sections carry their heading path. Offsets are into the extracted text.

Uses the standard library's parser, which is not recursive, so deeply nested markup is safe.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from isotope.loaders import Document, heading_sections
from isotope.loaders.text import decode_text

_SKIP = {"script", "style", "noscript", "template", "svg", "nav", "header", "footer", "aside",
         "form", "button", "select", "iframe", "head", "title"}
_LINE = {"br", "li", "tr", "dt", "dd"}
_PARAGRAPH = {"p", "div", "section", "article", "main", "hr", "table", "ul", "ol", "dl",
              "blockquote", "pre", "figure", "figcaption", "h1", "h2", "h3", "h4", "h5", "h6"}
_VOID = {"br", "hr", "img", "input", "meta", "link", "area", "base", "col", "embed", "source",
         "track", "wbr", "param"}
_HEADING = re.compile(r"h([1-6])$")


class _Text:
    """Text being extracted: whitespace collapsed, breaks merged, as it is written."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.length = 0
        self._pending = 0  # newlines owed before the next text
        self.headings: list[tuple[int, int, str]] = []  # offset, level, title

    def brk(self, newlines: int) -> None:
        if self.length:
            self._pending = max(self._pending, newlines)

    def write(self, data: str) -> None:
        if self._pending:
            data = data.lstrip(" ")
            if not data:
                return
            self.parts.append("\n" * self._pending)
            self.length += self._pending
            self._pending = 0
        elif not self.length or self.parts[-1].endswith((" ", "\n")):
            data = data.lstrip(" ")
        self.parts.append(data)
        self.length += len(data)

    def text(self) -> str:
        return "".join(self.parts).rstrip()


class _Extractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.body = _Text()
        self.main = _Text()
        self.title = ""
        self._skip: list[str] = []
        self._main_depth = 0
        self._in_title = False
        self._pre = 0
        self._heading: tuple[int, list[str]] | None = None

    def _targets(self) -> list[_Text]:
        return [self.body, self.main] if self._main_depth else [self.body]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        if tag in _SKIP and tag not in _VOID:
            self._skip.append(tag)
        if self._skip or (tag in _VOID and tag not in _LINE | _PARAGRAPH):
            return
        if tag in {"main", "article"}:
            self._main_depth += 1
        if tag == "pre":
            self._pre += 1
        for target in self._targets():
            target.brk(2 if tag in _PARAGRAPH else 1 if tag in _LINE else 0)
            if tag == "li":
                target.write("- ")
        match = _HEADING.match(tag)
        if match:
            self._heading = (int(match.group(1)), [])

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if self._skip:
            if tag == self._skip[-1]:
                self._skip.pop()
            return
        if self._heading is not None and _HEADING.match(tag):
            title = " ".join("".join(self._heading[1]).split())
            if title:
                for target in self._targets():
                    start = target.length - len(title)
                    target.headings.append((max(0, start), self._heading[0], title))
            self._heading = None
        for target in self._targets():
            target.brk(2 if tag in _PARAGRAPH else 1 if tag in _LINE else 0)
        if tag in {"main", "article"}:
            self._main_depth = max(0, self._main_depth - 1)
        if tag == "pre":
            self._pre = max(0, self._pre - 1)

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        if self._skip:
            return
        if self._pre:
            lines = data.split("\n")
            for i, line in enumerate(lines):
                if i:
                    for target in self._targets():
                        target.brk(1)
                if line:
                    for target in self._targets():
                        target.write(line)
            return
        data = re.sub(r"\s+", " ", data)
        if not data.strip() and not any(t.length for t in self._targets()):
            return
        if self._heading is not None:
            self._heading[1].append(data)
        for target in self._targets():
            target.write(data)


def html_text(markup: str) -> str:
    """The readable text of an HTML string (as :func:`load_html` extracts it)."""
    parser = _Extractor()
    parser.feed(markup)
    parser.close()
    return (parser.main if parser.main.text().strip() else parser.body).text()


def load_html(path: Path, data: bytes) -> Document:
    parser = _Extractor()
    parser.feed(decode_text(path, data))
    parser.close()
    chosen = parser.main if parser.main.text().strip() else parser.body
    text = chosen.text()
    headings = chosen.headings
    title = " ".join(parser.title.split()) or (headings[0][2] if headings else path.stem)
    return Document(text, {"type": "html", "title": title}, heading_sections(headings, len(text)))
