"""Grounded answers: the answer model sees only the retrieved chunks, numbered, and must
cite them as [1], [2]; when they do not hold the answer it must say so."""

from __future__ import annotations

import re

from isotope.models import SearchResult
from isotope.providers import Prompt, messages

ANSWER_PROMPT_VERSION = "ans1"
NOT_FOUND = "The indexed documents do not contain the answer."
SYSTEM = (
    "You answer questions using only the numbered passages the user gives you. Answer in one "
    "to three sentences and cite the passages you used as [1], [2]. Do not use any knowledge "
    f"that is not in the passages. If the passages do not contain the answer, reply exactly: "
    f"{NOT_FOUND}"
)
MAX_PASSAGE_CHARS = 2000


def answer_prompt(query: str, results: list[SearchResult]) -> Prompt:
    passages = "\n\n".join(
        f"[{i}] {r.chunk.text[:MAX_PASSAGE_CHARS]}" for i, r in enumerate(results, start=1)
    )
    return messages(SYSTEM, f"Passages:\n{passages}\n\nQuestion: {query}")


def citations(answer: str, count: int) -> list[int]:
    """The passage numbers an answer cites, in order of first citation."""
    found: list[int] = []
    for group in re.findall(r"\[([\d,\s]+)\]", answer):
        for number in re.findall(r"\d+", group):
            n = int(number)
            if 1 <= n <= count and n not in found:
                found.append(n)
    return found
