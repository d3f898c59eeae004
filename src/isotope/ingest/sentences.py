"""A sentence splitter that returns offsets.

Text is first cut into blocks: paragraphs (blank lines between), Markdown headings, list
items, tables and fenced code blocks. Code blocks and tables stay whole; paragraphs and
list items are cut into sentences at ``.``, ``!``, ``?`` or an ellipsis followed by space and
a capital letter, digit, quote or bracket; never after a title abbreviation (``Dr.``,
``e.g.``), an initial (``J. Smith``) or inside a number (``3.14``, ``v1.2``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

BlockKind = Literal["paragraph", "heading", "list_item", "code", "table"]

# Abbreviations after which a period never ends a sentence (lower case, no final period).
ABBREVIATIONS = frozenset(
    """mr mrs ms mx dr prof sr jr st mt ft gen col lt sgt capt cmdr adm gov sen rep rev hon
    pres fig figs eq eqs no nos vol vols pp p ch sec art approx ca cf vs v e.g i.e al
    dept est min max ref refs tel ext op ed eds esp incl viz resp""".split()
)

# Month abbreviations end no sentence before a number ("Jan. 5").
_MONTHS = frozenset("jan feb mar apr jun jul aug sep sept oct nov dec".split())

_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s")
_ITEM = re.compile(r"^\s*(?:[-*+\u2022]|\d{1,3}[.)]|[a-zA-Z][.)])\s+")
_TABLE = re.compile(r"^\s*\|")
_BOUNDARY = re.compile(r"(?:[.!?]+|\u2026|\.\.\.)[\"'\u201d\u2019)\]]*(?=\s+(\S))")
_OPENERS = "\"'\u201c\u2018([-*"


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    kind: BlockKind
    block_end: bool = True
    """True for the last span of its block (a paragraph boundary follows)."""


def split_blocks(text: str) -> list[Span]:
    """Blocks of ``text`` with their kind, whitespace trimmed from their ends."""
    blocks: list[Span] = []
    lines = text.splitlines(keepends=True)
    offset = 0
    current: tuple[int, BlockKind] | None = None  # start, kind of the open block
    current_end = 0
    fence = ""

    def close() -> None:
        nonlocal current
        if current is not None:
            start, kind = current
            blocks.append(_trim(text, start, current_end, kind))
            current = None

    for line in lines:
        stripped = line.strip()
        line_end = offset + len(line)
        if fence:
            current_end = line_end
            match = _FENCE.match(line)
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = ""
                close()
        elif (match := _FENCE.match(line)) is not None:
            close()
            fence = match.group(1)
            current, current_end = (offset, "code"), line_end
        elif not stripped:
            close()
        elif _HEADING.match(line):
            close()
            current, current_end = (offset, "heading"), line_end
            close()
        elif _TABLE.match(line):
            if current is None or current[1] != "table":
                close()
                current = (offset, "table")
            current_end = line_end
        elif _ITEM.match(line):
            close()
            current, current_end = (offset, "list_item"), line_end
        else:
            if current is not None and current[1] == "table":
                close()
            if current is None:
                current = (offset, "paragraph")
            current_end = line_end
        offset = line_end
    close()
    return [b for b in blocks if b.end > b.start]


def _trim(text: str, start: int, end: int, kind: BlockKind) -> Span:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return Span(start, end, kind)


def _is_boundary(text: str, start: int, end: int, match: re.Match[str]) -> bool:
    following = match.group(1)
    if not (following[0].isupper() or following[0].isdigit() or following[0] in _OPENERS):
        return False
    punct = match.group(0)
    if not punct.startswith(".") or punct.startswith(".."):
        return True
    # The word before the period.
    i = match.start()
    j = i
    while j > start and not text[j - 1].isspace():
        j -= 1
    word = text[j:i].lstrip(_OPENERS)
    if not word:
        return True
    lowered = word.lower().rstrip(".")
    if lowered in ABBREVIATIONS or (lowered in _MONTHS and following[0].isdigit()):
        return False
    return not (len(word) == 1 and word.isalpha() and word.isupper())


def split_sentences(text: str, start: int = 0, end: int | None = None) -> list[Span]:
    """Sentences (and whole code blocks, tables, headings) of ``text[start:end]``."""
    end = len(text) if end is None else end
    spans: list[Span] = []
    for block in split_blocks(text[start:end]):
        b_start, b_end = block.start + start, block.end + start
        if block.kind in ("code", "table", "heading"):
            spans.append(Span(b_start, b_end, block.kind))
            continue
        pieces: list[Span] = []
        s = b_start
        for match in _BOUNDARY.finditer(text, b_start, b_end):
            if match.end() >= b_end or not _is_boundary(text, s, b_end, match):
                continue
            pieces.append(_trim(text, s, match.end(), block.kind))
            s = match.end()
        pieces.append(_trim(text, s, b_end, block.kind))
        pieces = [p for p in pieces if p.end > p.start]
        for k, piece in enumerate(pieces):
            spans.append(Span(piece.start, piece.end, piece.kind, block_end=k == len(pieces) - 1))
    return spans


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` as strings."""
    return [text[s.start : s.end] for s in split_sentences(text)]
