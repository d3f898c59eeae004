"""Chunking: pack sentences into chunks of at most ``size`` tokens.

A chunk ends, by preference, at a paragraph boundary (when that keeps it at least half
full), else at a sentence boundary; a sentence longer than a chunk is cut between words.
Consecutive chunks of one paragraph share up to ``overlap`` tokens of whole sentences.
A heading is never left at the end of a chunk: it goes with the text after it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from isotope.ingest.sentences import Span, split_sentences
from isotope.loaders import Section

TokenCounter = Callable[[str], int]
_TOKEN = re.compile(r"\w+|[^\w\s]")
MAX_TOKEN_CHARS = 16
"""No token is longer: a word of 50,000 characters is cut into chunks, not kept whole."""


def count_tokens(text: str) -> int:
    """Words and punctuation marks: the default token count."""
    return len(_TOKEN.findall(text))


@dataclass(frozen=True)
class ChunkSpan:
    start: int
    end: int
    tokens: int


def _split_long(text: str, span: Span, size: int, counter: TokenCounter) -> list[Span]:
    """Cut a span of more than ``size`` tokens between words; a single word longer than a
    chunk (a URL, a run of characters without spaces) is cut inside."""
    body = text[span.start : span.end]
    words: list[tuple[int, int, int]] = []  # start, end, tokens
    for match in re.finditer(r"\S+", body):
        cost = counter(match.group(0))
        if cost <= size:
            words.append((match.start(), match.end(), cost))
            continue
        step = max(1, len(match.group(0)) * size // (cost + 1))
        for start in range(match.start(), match.end(), step):
            end = min(start + step, match.end())
            words.append((start, end, counter(body[start:end])))
    pieces: list[Span] = []
    first, total = 0, 0
    for n, (_, _, cost) in enumerate(words):
        if total and total + cost > size:
            pieces.append(_piece(span, words[first][0], words[n - 1][1], False))
            first, total = n, 0
        total += cost
    pieces.append(_piece(span, words[first][0], words[-1][1], span.block_end))
    return pieces


def _bounded(counter: TokenCounter) -> TokenCounter:
    """``counter``, but a run of characters counts at least one token per
    :data:`MAX_TOKEN_CHARS` characters."""
    return lambda piece: max(counter(piece), len(piece) // MAX_TOKEN_CHARS)


def _piece(span: Span, start: int, end: int, block_end: bool) -> Span:
    return Span(span.start + start, span.start + end, span.kind, block_end=block_end)


def chunk_text(
    text: str,
    *,
    size: int = 256,
    overlap: int = 32,
    counter: TokenCounter = count_tokens,
) -> list[ChunkSpan]:
    """Chunk boundaries of ``text``, as offsets into it."""
    if overlap >= size:
        raise ValueError(f"chunk overlap ({overlap}) must be smaller than chunk size ({size})")
    counter = _bounded(counter)
    units: list[Span] = []
    for span in split_sentences(text):
        if counter(text[span.start : span.end]) > size:
            units.extend(_split_long(text, span, size, counter))
        else:
            units.append(span)
    tokens = [counter(text[u.start : u.end]) for u in units]

    chunks: list[ChunkSpan] = []
    i = 0
    while i < len(units):
        total, j = 0, i
        while j < len(units) and total + tokens[j] <= size:
            total += tokens[j]
            j += 1
        j = max(j, i + 1)
        if j < len(units):
            # Prefer to end at a paragraph boundary that keeps the chunk half full.
            filled = 0
            best = None
            for k in range(i, j):
                filled += tokens[k]
                if units[k].block_end and filled >= size // 2:
                    best = k + 1
            if best is not None:
                j = best
            # A heading goes with what follows it.
            while j - 1 > i and units[j - 1].kind == "heading":
                j -= 1
        chunk_tokens = sum(tokens[i:j])
        chunks.append(ChunkSpan(units[i].start, units[j - 1].end, chunk_tokens))
        if j >= len(units):
            break
        # Overlap: whole sentences of the same paragraph, within ``overlap`` tokens.
        back, k = 0, j
        while (
            k - 1 > i
            and not units[k - 1].block_end
            and units[k - 1].kind not in ("heading", "code", "table")
            and back + tokens[k - 1] <= overlap
        ):
            back += tokens[k - 1]
            k -= 1
        i = k
    return chunks


def section_metadata(sections: list[Section], start: int, end: int) -> dict[str, object]:
    """Metadata for a chunk ``[start, end)`` from the sections it overlaps: the heading path
    where it starts, the pages it covers, and the works it cites (``cites``, with their
    keys as ``cite_keys``)."""
    metadata: dict[str, object] = {}
    pages: list[int] = []
    cites: dict[str, object] = {}
    for section in sections:
        if "cites" in section.metadata:
            if section.start < end and section.end > start:
                for work in section.metadata["cites"]:
                    cites.setdefault(work["key"], work)
            continue
        if section.end <= start or section.start >= end:
            if "headings" in section.metadata and section.start <= start:
                metadata["headings"] = section.metadata["headings"]
            continue
        if "page" in section.metadata:
            pages.append(int(section.metadata["page"]))
        if "headings" in section.metadata and section.start <= start:
            metadata["headings"] = section.metadata["headings"]
    if "headings" not in metadata:
        # A chunk that starts before the first heading but runs into one.
        for section in sections:
            if "headings" in section.metadata and section.start < end:
                metadata["headings"] = section.metadata["headings"]
                break
    if pages:
        metadata["page"] = pages[0]
        metadata["pages"] = pages
    if cites:
        metadata["cites"] = list(cites.values())
        metadata["cite_keys"] = list(cites)
    return metadata
