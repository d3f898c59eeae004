"""Question generation: a versioned prompt, parsing of the model's reply, and the filters
that drop questions an atom cannot answer."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from isotope.embedders import Vectors
from isotope.ingest.language import in_language, language_of
from isotope.prompts import PROMPTS, PromptSpec
from isotope.providers import Prompt

PROMPT_VERSION = PROMPTS["questions"].version
"""The question prompt's version (see :mod:`isotope.prompts`)."""
SYSTEM = PROMPTS["questions"].system


def question_prompt(chunk: str, atom: str, n: int,
                    spec: PromptSpec = PROMPTS["questions"]) -> Prompt:
    """The prompt for ``n`` questions about ``atom``; the chunk comes first so that
    consecutive prompts for atoms of one chunk share their beginning (the model's cache);
    asked in the chunk's language when it is not English (:mod:`isotope.ingest.language`)."""
    return in_language(spec.render(chunk=chunk, atom=atom, n=n), language_of(chunk))


_PREFIX = re.compile(
    r"^\s*(?:[-*\u2022>]+\s*|\(?\d{1,2}[.):]\s*|\(?[a-z][.)]\s+|q(?:uestion)?\s*\d*\s*[:.)-]\s*)+",
    re.I,
)


def parse_questions(reply: str, limit: int) -> list[str]:
    """The questions in a model's reply: one per line, numbering and bullets removed,
    answers and commentary (lines that are not questions) dropped, duplicates removed."""
    found: list[str] = []
    seen: set[str] = set()
    for raw in reply.splitlines():
        line = _PREFIX.sub("", raw).strip().strip("*_\"'` ")
        if "?" not in line:
            continue
        line = line[: line.index("?") + 1].strip()
        line = re.sub(r"\s+", " ", line)
        if len(line) < 8 or len(line.split()) < 3:
            continue
        key = normalize_question(line)
        if key in seen:
            continue
        seen.add(key)
        found.append(line)
        if len(found) >= limit:
            break
    return found


def normalize_question(text: str) -> str:
    return re.sub(r"[^\w]+", " ", text.lower()).strip()


_PRONOUNS = frozenset(
    "he she it they him her them his hers its their theirs this that these those".split()
)
STOPWORDS = frozenset(
    """a an the of in on at to for from by with about as and or but is are was were be been
    being do does did has have had what which who whom whose when where why how whose will
    would can could should may might must shall not no yes there here than then so such
    into onto over under after before during between through up down out off again""".split()
)


def content_words(text: str) -> list[str]:
    return [w for w in re.findall(r"[\w']+", text.lower()) if w not in STOPWORDS | _PRONOUNS]


def is_pronoun_only(question: str) -> bool:
    """A question whose subject is only a pronoun: it has a pronoun and fewer than two
    other content words ("What did he do?", "When was it built?")."""
    words = re.findall(r"[\w']+", question.lower())
    return any(w in _PRONOUNS for w in words) and len(content_words(question)) < 2


def relevance_reasons(
    questions: Sequence[str],
    question_vectors: Vectors,
    atom_vector: Vectors,
    *,
    min_similarity: float,
) -> list[str]:
    """Why each question fails the relevance filter ("" when it passes): its subject is
    only a pronoun, or it is less than ``min_similarity`` (cosine) from its atom."""
    if not len(questions):
        return []
    similarity = question_vectors @ atom_vector
    return [
        "pronoun only: its subject is only a pronoun" if is_pronoun_only(q)
        else f"off its atom: similarity {float(sim):.2f} < min_similarity {min_similarity:.2f}"
        if float(sim) < min_similarity else ""
        for q, sim in zip(questions, similarity, strict=True)
    ]


def duplicates(vectors: Vectors, threshold: float | None) -> list[tuple[int, float] | None]:
    """Greedy diversity filter: for each vector, None when it is kept, else the position
    of the kept vector it is too close to (cosine above ``threshold``) and that
    similarity. ``threshold`` None keeps all."""
    n = len(vectors)
    if threshold is None or n == 0:
        return [None] * n
    found: list[tuple[int, float] | None] = []
    kept: list[int] = []
    for i in range(n):
        if kept:
            similarity = vectors[kept] @ vectors[i]
            best = int(np.argmax(similarity))
            if float(similarity[best]) > threshold:
                found.append((kept[best], float(similarity[best])))
                continue
        found.append(None)
        kept.append(i)
    return found
