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


_WH = re.compile(r"\b(what|which|who|whom|whose|when|where|why|how)\b(?:'s)?\s*([a-z]*)")
_WHAT_NOUN_KIND = {
    **dict.fromkeys("year date day month century centuries decade time era period".split(),
                    "when"),
    **dict.fromkeys("city cities country countries place location town region state "
                    "continent county province area address".split(), "where"),
    **dict.fromkeys("person individual".split(), "who"),
    **dict.fromkeys("number percentage percent proportion fraction share amount quantity "
                    "age size length distance height width depth weight speed cost price "
                    "temperature".split(), "quantity"),
}
_HOW_MEASURE = frozenset(
    """many much long far old big large small tall high low deep wide heavy often fast
    quickly frequently soon""".split()
)


def answer_kind(question: str) -> str | None:
    """The kind of answer an English question asks for, read from its first wh-word and
    the word after it: ``when`` (when; what/which/in what year, date, day, century...),
    ``who`` (who, whom, whose, which person), ``where`` (where; what/which city,
    country, place...), ``quantity`` (how many, how much, how long/far/old/big...,
    what number, percentage, age...), ``why``, ``how`` (how, followed by anything
    else: a way or a manner), ``what`` (what or which, followed by anything else).
    None when it has no English wh-word ("Is it open on Sundays?", a question in
    another language): a kind that is not known differs from none."""
    found = _WH.search(question.lower())
    if found is None:
        return None
    wh, after = found.groups()
    if wh in ("what", "which"):
        return _WHAT_NOUN_KIND.get(after, _WHAT_NOUN_KIND.get(after.removesuffix("s"), "what"))
    if wh == "how":
        return "quantity" if after in _HOW_MEASURE else "how"
    return "who" if wh in ("whom", "whose") else wh


def duplicates(vectors: Vectors, threshold: float | None,
               kinds: Sequence[str | None] | None = None) -> list[tuple[int, float] | None]:
    """Greedy diversity filter: for each vector, None when it is kept, else the position
    of the kept vector it is too close to (cosine above ``threshold``) and that
    similarity. ``threshold`` None keeps all. With ``kinds`` (each question's
    :func:`answer_kind`), a vector is compared only with the kept ones of the same kind
    or of no known kind: "When was the revision launched?" asks for another answer than
    "What is the current revision?", however close their vectors."""
    n = len(vectors)
    if threshold is None or n == 0:
        return [None] * n
    found: list[tuple[int, float] | None] = []
    kept: list[int] = []
    for i in range(n):
        same = [j for j in kept if kinds is None or kinds[i] is None or kinds[j] is None
                or kinds[i] == kinds[j]]
        if same:
            similarity = vectors[same] @ vectors[i]
            best = int(np.argmax(similarity))
            if float(similarity[best]) > threshold:
                found.append((same[best], float(similarity[best])))
                continue
        found.append(None)
        kept.append(i)
    return found
