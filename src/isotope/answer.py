"""Grounded answers: the answer model sees only the retrieved chunks, numbered, and must
cite them as [1], [2]. Small models asked to "reply exactly X when the passages do not
hold the answer" copy X even when the answer is there, and answer from memory when it is
not; so the model is only asked to answer and cite, and isotope checks the reply: it
must cite a passage, and its numbers and new words must appear in the passages it cites.
Otherwise the reply is :data:`NOT_FOUND`."""

from __future__ import annotations

import re

from isotope.models import SearchResult
from isotope.prompts import PROMPTS, PromptSpec
from isotope.providers import Prompt

ANSWER_PROMPT_VERSION = PROMPTS["answer"].version
NOT_FOUND = "The indexed documents do not contain the answer."
GROUNDED_SHARE = 0.6
"""Share of an answer's new content words that must appear in the passages it cites."""
MAX_PASSAGE_CHARS = 2000
MAX_PASSAGES = 20
"""Passages given to the answer model at most (an ``/answer`` or ``/ask`` with a large
``k`` must not build a prompt of any size)."""
PROMPT_CHARS = 24_000
"""Characters of passages in one prompt at most (each passage gets its share)."""


def answer_prompt(query: str, results: list[SearchResult],
                  spec: PromptSpec = PROMPTS["answer"], *,
                  max_chars: int = PROMPT_CHARS) -> Prompt:
    """The answer prompt over the first :data:`MAX_PASSAGES` results, each cut to its
    share of ``max_chars`` (at most :data:`MAX_PASSAGE_CHARS`)."""
    results = results[:MAX_PASSAGES]
    each = min(MAX_PASSAGE_CHARS, max(200, max_chars // max(1, len(results))))
    passages = "\n\n".join(
        f"[{i}] {r.chunk.text[:each]}" for i, r in enumerate(results, start=1)
    )
    return spec.render(passages=passages, query=query)


def citations(answer: str, count: int) -> list[int]:
    """The passage numbers an answer cites, in order of first citation."""
    found: list[int] = []
    for group in re.findall(r"\[([\d,\s]+)\]", answer):
        for number in re.findall(r"\d+", group):
            n = int(number)
            if 1 <= n <= count and n not in found:
                found.append(n)
    return found


def grounded(answer: str, question: str, results: list[SearchResult]) -> list[int]:
    """The passages an answer cites if the answer is grounded in them (else ``[]``): it
    cites at least one, every number in it appears in them, and most of its content words
    that are not in the question do."""
    from isotope.questions import content_words

    cited = citations(answer, len(results))
    if not cited:
        return []
    source = " ".join(results[n - 1].chunk.text for n in cited).lower()
    known = set(re.findall(r"[\w']+", source))
    text = re.sub(r"\[[\d,\s]+\]", " ", answer)
    if any(n not in source for n in re.findall(r"\d+(?:[.,]\d+)?", text)):
        return []
    asked = set(content_words(question))
    new = [w for w in content_words(text) if w not in asked and not w.isdigit()]
    if new and sum(w in known for w in new) < GROUNDED_SHARE * len(new):
        return []
    return cited
