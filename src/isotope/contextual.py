"""Contextual chunk enrichment (``chunk_context = true``): before a chunk is indexed, the
question model writes a sentence or two situating it in its document ("This passage is
from the Super Bowl 50 article and describes the halftime show"). The context is stored
with the chunk and searched with it: chunk keyword search covers the text and the
context, the chunk's embedding is of context and text together. Search results still show
the chunk's own text, with the context beside it (:attr:`Chunk.context`).

This is Anthropic's Contextual Retrieval. It helps chunks that do not name what they are
about (a pronoun for the product, a section without its heading). It costs one model call
per chunk; the prompt begins with the document, so a local model evaluates that beginning
once per document and reuses it for the document's other chunks.
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


def excerpt(document: str, max_chars: int) -> str:
    """The document as the model sees it: whole, or its first ``max_chars`` characters
    (cut at a word) followed by ``[...]``."""
    if len(document) <= max_chars:
        return document
    cut = document[:max_chars]
    space = cut.rfind(" ", max_chars // 2)
    return (cut[:space] if space > 0 else cut) + " [...]"


def prompts(document: str, chunks: Sequence[Chunk], *, title: str | None = None,
            max_chars: int = 6000, spec: PromptSpec = PROMPTS["context"]) -> list[Prompt]:
    """One prompt per chunk. They all begin with the same document text (and ``title``),
    so a model with a prompt cache evaluates it once."""
    head = f"Title: {title}\n" if title else ""
    shown = excerpt(document, max_chars)
    return [spec.render(title=head, document=shown, chunk=chunk.text) for chunk in chunks]


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
    """The context of each chunk, or None where the model failed (the others are kept).
    Raises only a fatal :class:`ProviderError` (bad key, unknown model)."""
    asked = prompts(document, chunks, title=title, max_chars=max_chars, spec=spec)
    try:
        replies: Sequence[str | None] = llm.complete_batch(
            asked, max_tokens=MAX_TOKENS, temperature=0.0)
    except BatchGenerationError as exc:
        replies = exc.results
        log.warning("context of %d chunk(s) failed: %s", len(exc.failures), exc)
    except ProviderError as exc:
        if exc.fatal:
            raise
        if len(asked) == 1:
            log.warning("context failed: %s", exc)
            return [None]
        # One prompt of the batch failed (too long for the model, say): ask one by one.
        return [situate(llm, document, [c], title=title, max_chars=max_chars)[0]
                for c in chunks]
    return [clean(r) if r is not None else None for r in replies]


def search_text(chunk: Chunk) -> str:
    """What a chunk's embedding is made of: its context, then its text."""
    return f"{chunk.context}\n\n{chunk.text}" if chunk.context else chunk.text
