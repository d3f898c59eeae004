"""Contextual chunk enrichment (``chunk_context = true``): before a chunk is indexed, the
question model writes a sentence or two situating it in its document ("This passage is
from the Super Bowl 50 article and describes the halftime show"). The context is stored
with the chunk and searched with it: chunk keyword search covers the text and the
context, the chunk's embedding is of context and text together. Search results still show
the chunk's own text, with the context beside it (:attr:`Chunk.context`).

This is Anthropic's Contextual Retrieval. It helps chunks that do not name what they are
about (a pronoun for the product, a section without its heading). It costs one model call
per chunk. The model sees the whole document when it fits in ``context_chars``; a longer
one is shown as its beginning (what it is about) and a window around the chunk (what
surrounds it), so a chunk deep in a long document is situated by its own neighbourhood,
not by the first pages. Windows start on a grid of half their length (each chunk at least
a quarter of a window from either edge), so the chunks near one another share one
window: a model with a prompt cache evaluates it once for all of them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from isotope.errors import ProviderError
from isotope.models import Chunk
from isotope.prompts import PROMPTS, PromptSpec
from isotope.providers import LLM, BatchGenerationError, Prompt

log = logging.getLogger(__name__)

CONTEXT_PROMPT_VERSION = PROMPTS["context"].version
MAX_TOKENS = 100
MAX_CHARS = 600
"""Longer replies are cut at a sentence or word boundary."""

_LABEL = re.compile(r"^\s*(?:\*\*)?(?:succinct\s+)?context(?:\*\*)?\s*:\s*", re.IGNORECASE)


HEAD_SHARE = 5
"""A long document's beginning takes 1/HEAD_SHARE of what the model is shown."""


def _cut(text: str, start: int, end: int) -> str:
    """``text[start:end]`` shortened to whole words at both ends (when there are some)."""
    part = text[start:end]
    if start > 0 and " " in part[: len(part) // 4]:
        part = part[part.index(" ") + 1:]
    if end < len(text) and " " in part[len(part) // 2:]:
        part = part[: part.rindex(" ")]
    return part


def excerpt(document: str, max_chars: int, start: int | None = None,
            end: int | None = None) -> str:
    """The document as the model sees it for the chunk at ``[start, end)``: whole when it
    fits in ``max_chars``; else its beginning and a window around the chunk, joined by
    ``[...]`` (without a position: the beginning only)."""
    if len(document) <= max_chars:
        return document
    if start is None or end is None:
        return _cut(document, 0, max_chars) + " [...]"
    head = max_chars // HEAD_SHARE
    window = max_chars - head
    step = max(1, window // 2)
    centre = (start + end) // 2
    begin = min(max(centre - window // 2, head), len(document) - window)
    begin = head + (begin - head) // step * step  # on the grid: neighbours share a window
    if begin + window < min(end, len(document)):  # the grid cut the chunk off (the last)
        begin = max(head, min(end, len(document)) - window)
    if begin <= head:
        return _cut(document, 0, max_chars) + " [...]"
    shown = f"{_cut(document, 0, head)} [...] {_cut(document, begin, begin + window)}"
    return shown + (" [...]" if begin + window < len(document) else "")


def prompts(document: str, chunks: Sequence[Chunk], *, title: str | None = None,
            max_chars: int = 6000, spec: PromptSpec = PROMPTS["context"]) -> list[Prompt]:
    """One prompt per chunk, the document (and ``title``) first: chunks that see the same
    excerpt share their prompt's beginning, which a model with a prompt cache evaluates
    once."""
    head = f"Title: {title}\n" if title else ""
    found: list[Prompt] = []
    for chunk in chunks:
        start: int | None = chunk.start
        end: int | None = chunk.end
        if start is None or end is None or document[start:end] != chunk.text:
            at = document.find(chunk.text)  # ready-made chunks carry no offsets
            start, end = (at, at + len(chunk.text)) if at >= 0 else (None, None)
        found.append(spec.render(title=head, document=excerpt(document, max_chars, start,
                                                                 end), chunk=chunk.text))
    return found


def clean(reply: str) -> str:
    """The context in a reply: one paragraph, without a ``Context:`` label or quotes, at
    most :data:`MAX_CHARS` characters."""
    text = _LABEL.sub("", " ".join(reply.split())).strip().strip('"').strip()
    if len(text) <= MAX_CHARS:
        return text
    cut = text[:MAX_CHARS]
    end = max(cut.rfind(". "), cut.rfind("? "), cut.rfind("! "))
    return cut[: end + 1] if end > MAX_CHARS // 2 else cut[: cut.rfind(" ")].rstrip(",;:")


def situate(llm: LLM, document: str, chunks: Sequence[Chunk], *, title: str | None = None,
            max_chars: int = 6000, spec: PromptSpec = PROMPTS["context"]
            ) -> list[str | None]:
    """The context of each chunk, or None where the model failed (the others are kept;
    all, when the model server stopped answering: the ingest stores the file without
    them and stops at its questions). Raises only a fatal :class:`ProviderError` (bad
    key, unknown model)."""
    asked = prompts(document, chunks, title=title, max_chars=max_chars, spec=spec)
    try:
        replies: Sequence[str | None] = llm.complete_batch(
            asked, max_tokens=MAX_TOKENS, temperature=0.0)
    except BatchGenerationError as exc:
        replies = exc.results
        log.warning("context of %d chunk(s) failed: %s", len(exc.failures), exc)
    except ProviderError as exc:
        if exc.unreachable:
            log.warning("context of %d chunk(s) not written: %s", len(chunks), exc)
            return [None] * len(chunks)
        if exc.fatal:
            raise
        if len(asked) == 1:
            log.warning("context failed: %s", exc)
            return [None]
        # One prompt of the batch failed (too long for the model, say): ask one by one.
        return [situate(llm, document, [c], title=title, max_chars=max_chars, spec=spec)[0]
                for c in chunks]
    return [clean(r) if r is not None else None for r in replies]
