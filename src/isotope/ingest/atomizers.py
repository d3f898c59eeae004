"""Atomizers split a chunk into atomic statements.

``sentence`` (the default) uses the sentence splitter and keeps offsets; ``llm`` asks the
atomizer model for self-contained facts with pronouns resolved.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence

from isotope.ingest.sentences import split_sentences
from isotope.models import Atom, Chunk
from isotope.prompts import PROMPTS, PromptSpec
from isotope.providers import LLM, Prompt


class Atomizer(ABC):
    name: str = ""

    @abstractmethod
    def atomize_batch(self, chunks: Sequence[Chunk]) -> list[list[Atom]]:
        """The atoms of each chunk."""


class SentenceAtomizer(Atomizer):
    """Sentences, list items and code blocks; headings and atoms of fewer than
    ``min_words`` words are left out (they answer no question)."""

    name = "sentence"

    def __init__(self, *, min_words: int = 3) -> None:
        self.min_words = min_words

    def atomize_batch(self, chunks: Sequence[Chunk]) -> list[list[Atom]]:
        out: list[list[Atom]] = []
        for chunk in chunks:
            atoms: list[Atom] = []
            for span in split_sentences(chunk.text):
                text = chunk.text[span.start : span.end]
                if span.kind == "heading" or len(text.split()) < self.min_words:
                    continue
                atoms.append(
                    Atom(text=text, chunk_id=chunk.id, index=len(atoms), start=span.start,
                         end=span.end)
                )
            out.append(atoms)
        return out


ATOMIZER_PROMPT_VERSION = PROMPTS["atomizer"].version


def atomizer_prompt(chunk: str, spec: PromptSpec = PROMPTS["atomizer"]) -> Prompt:
    """One worked example (pronouns resolved), then the chunk."""
    return spec.render(chunk=chunk)


def parse_atoms(reply: str, min_words: int) -> list[str]:
    facts: list[str] = []
    seen: set[str] = set()
    for raw in reply.splitlines():
        line = re.sub(r"^\s*(?:[-*\u2022]+|\d{1,2}[.)])\s*", "", raw).strip()
        if len(line.split()) < min_words or line.endswith(":"):
            continue
        key = line.lower()
        if key not in seen:
            seen.add(key)
            facts.append(line)
    return facts


class LLMAtomizer(Atomizer):
    """Self-contained facts written by a language model. Falls back to sentences for a
    chunk whose reply holds no usable fact."""

    name = "llm"

    def __init__(self, llm: LLM, *, min_words: int = 3, max_tokens: int = 512,
                 prompt: PromptSpec = PROMPTS["atomizer"]) -> None:
        self.llm = llm
        self.prompt = prompt
        self.min_words = min_words
        self.max_tokens = max_tokens
        self._fallback = SentenceAtomizer(min_words=min_words)

    def atomize_batch(self, chunks: Sequence[Chunk]) -> list[list[Atom]]:
        replies = self.llm.complete_batch(
            [atomizer_prompt(c.text, self.prompt) for c in chunks], max_tokens=self.max_tokens
        )
        out: list[list[Atom]] = []
        for chunk, reply in zip(chunks, replies, strict=True):
            facts = parse_atoms(reply, self.min_words)
            if not facts:
                out.extend(self._fallback.atomize_batch([chunk]))
                continue
            out.append([Atom(text=f, chunk_id=chunk.id, index=i) for i, f in enumerate(facts)])
        return out
