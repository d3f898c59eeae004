"""Atomizers split a chunk into atomic statements.

``sentence`` (the default) uses the sentence splitter and keeps offsets; ``llm`` asks the
atomizer model for self-contained facts with pronouns resolved.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence

from isotope.models import Atom, Chunk
from isotope.providers import LLM, Prompt
from isotope.sentences import split_sentences


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


ATOMIZER_PROMPT_VERSION = "a2"
_ATOM_SYSTEM = (
    "Rewrite the passage as a list of atomic facts. One fact per line. Each fact is a short, "
    "complete sentence that can be understood alone: replace every pronoun (he, she, it, "
    "they, his, her, its, their, this) with the name of the person or thing it refers to. "
    "Keep names and numbers exactly as written. Write nothing else."
)
_EXAMPLE_PASSAGE = "The Acme X1 is a drone. It weighs 900 grams and its battery lasts 30 minutes."
_EXAMPLE_FACTS = (
    "The Acme X1 is a drone.\nThe Acme X1 weighs 900 grams.\n"
    "The battery of the Acme X1 lasts 30 minutes."
)


def atomizer_prompt(chunk: str) -> Prompt:
    """One worked example (pronouns resolved), then the chunk."""
    return [
        {"role": "system", "content": _ATOM_SYSTEM},
        {"role": "user", "content": f"Passage:\n{_EXAMPLE_PASSAGE}"},
        {"role": "assistant", "content": _EXAMPLE_FACTS},
        {"role": "user", "content": f"Passage:\n{chunk}"},
    ]


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

    def __init__(self, llm: LLM, *, min_words: int = 3, max_tokens: int = 512) -> None:
        self.llm = llm
        self.min_words = min_words
        self.max_tokens = max_tokens
        self._fallback = SentenceAtomizer(min_words=min_words)

    def atomize_batch(self, chunks: Sequence[Chunk]) -> list[list[Atom]]:
        replies = self.llm.complete_batch(
            [atomizer_prompt(c.text) for c in chunks], max_tokens=self.max_tokens
        )
        out: list[list[Atom]] = []
        for chunk, reply in zip(chunks, replies, strict=True):
            facts = parse_atoms(reply, self.min_words)
            if not facts:
                out.extend(self._fallback.atomize_batch([chunk]))
                continue
            out.append([Atom(text=f, chunk_id=chunk.id, index=i) for i, f in enumerate(facts)])
        return out
