"""How good the answers of ``ask`` are, on question/passage/answer sets (SQuAD's
``answers``): ``isotope eval ... --answers`` and ``benchmarks/answers.py``.

Per question, ``ask`` runs as a user would call it (search, then the answer model over
the first ``answer_k`` results) and the answer is scored against the gold answers,
normalised as SQuAD's official script does (lower case, no punctuation, no articles,
single spaces):

- ``contains_gold``: the share of all questions whose answer contains a gold answer;
- ``f1``: the mean of SQuAD's token F1 (the best over the gold answers; 0 when declined);
- ``declined``: the share declined (``answer_kind`` ``declined``);
- ``declined_with_gold``: of the questions whose gold passage was among the passages
  given to the model, the share declined;
- ``citation_is_gold``: of the questions answered (not declined), the share whose
  citations include the gold passage;
- ``wrong``: the share answered without a gold answer in the answer;
- ``latency_p50_s``: the median time of ``ask`` (search and answer);
- with questions whose answer is in no passage (``unanswerable``): the share of them
  declined (``unanswerable_declined``);
- ``generated_precision``: of the answers shown as ``generated`` (answerable questions
  and unanswerable ones alike), the share that contains a gold answer (an unanswerable
  question has none); ``generated_share``, ``quoted_share``, ``declined_share``: the share
  of answerable questions given each kind;
- ``reliability``: the answers given (not declined) by ``answer_confidence`` in bins of
  0.2, each with how many fell there and the share of them that contains a gold answer
  (a calibrated confidence has each bin's share within it).
"""

from __future__ import annotations

import re
import statistics
import string
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from isotope.index import Isotope
    from isotope.models import Chunk, QueryResponse


def normalize(text: str) -> str:
    """SQuAD's normalisation: lower case, punctuation and articles removed, whitespace
    collapsed."""
    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def f1(prediction: str, gold: str) -> float:
    """SQuAD's token F1 of one prediction against one gold answer."""
    said, truth = normalize(prediction).split(), normalize(gold).split()
    common = Counter(said) & Counter(truth)
    same = sum(common.values())
    if not same:
        return 0.0
    precision, recall = same / len(said), same / len(truth)
    return 2 * precision * recall / (precision + recall)


def contains(prediction: str, golds: Sequence[str]) -> bool:
    """Whether the prediction, normalised, contains a gold answer, normalised."""
    said = f" {normalize(prediction)} "
    return any(f" {normalize(g)} " in said for g in golds if normalize(g))


@dataclass
class AnswerScores:
    """What :func:`evaluate_answers` measured (see the module docstring); shares in %."""

    questions: int
    contains_gold: float
    f1: float
    declined: float
    declined_with_gold: float
    citation_is_gold: float
    wrong: float
    latency_p50_s: float
    kinds: dict[str, float] = field(default_factory=dict)
    """The share of each ``answer_kind``."""
    gold_given: int = 0
    """Questions whose gold passage was given to the model."""
    unanswerable: int = 0
    unanswerable_declined: float | None = None
    swapped: int = 0
    """Unanswerable questions made from answerable ones by swapping a name or a year
    (``swapped``: ``"France -> Japan"``): their answer, as asked, is in no passage."""
    swapped_declined: float | None = None
    swapped_asserted: float | None = None
    """The share of them answered (``generated``) with the swapped-in name or year: a
    wrong answer shown as checked."""
    first_token_p50_s: float | None = None
    """Median time from the results to the answer's first streamed piece."""
    generated_precision: float | None = None
    """Of the answers shown as ``generated`` (unanswerable questions' too), the share
    that contains a gold answer."""
    generated_share: float = 0.0
    quoted_share: float = 0.0
    declined_share: float = 0.0
    reliability: list[dict[str, Any]] = field(default_factory=list)
    """``answer_confidence`` in bins of 0.2 (``bin``: "0.8-1.0"): ``answers`` given in
    it (not declined) and ``right``, the share of them containing a gold answer."""
    examples: list[dict[str, Any]] = field(default_factory=list)
    """Each question with its answer, kind, citations and whether it was right."""


def pick(queries: Sequence[dict[str, Any]], limit: int | None) -> list[dict[str, Any]]:
    """``limit`` queries spread evenly over ``queries`` (all of them without a limit)."""
    if limit is None or limit >= len(queries):
        return list(queries)
    step = len(queries) / limit
    return [queries[int(i * step)] for i in range(limit)]


def evaluate_answers(iso: Isotope, queries: Sequence[dict[str, Any]], *,
                     source_of: Callable[[Chunk], str] | None = None,
                     unanswerable: Sequence[dict[str, Any]] = (),
                     progress: Callable[[int, int], None] | None = None) -> AnswerScores:
    """``ask`` each query (``question``, ``gold_pid``, ``answers``: a list of strings or
    SQuAD's ``{"text": [...]}``) and each ``unanswerable`` one (``question``), and score
    the answers (see the module docstring)."""
    from isotope.search.evaluation import passage_id

    source_of = source_of or passage_id
    rows: list[dict[str, Any]] = []
    latency: list[float] = []
    first_token: list[float] = []
    total = len(queries) + len(unanswerable)
    for n, query in enumerate([*queries, *unanswerable]):
        started = time.perf_counter()
        pieces: list[float] = []
        found = iso.search(query["question"], for_answer=True)
        searched = time.perf_counter()
        answered = iso.answer(found, on_token=_timer(pieces))
        latency.append(time.perf_counter() - started)
        if pieces:
            first_token.append(pieces[0] - searched)
        rows.append(_scored(query, answered, source_of, n >= len(queries)))
        if progress:
            progress(n + 1, total)
    return _summary(rows, latency, first_token)


def _timer(times: list[float]) -> Callable[[str], None]:
    """An ``on_token`` callback noting when each piece arrived."""
    return lambda _: times.append(time.perf_counter())


def _golds(query: dict[str, Any]) -> list[str]:
    answers = query.get("answers") or []
    if isinstance(answers, dict):
        answers = answers.get("text", [])
    return [str(a) for a in answers]


def _scored(query: dict[str, Any], answered: QueryResponse,
            source_of: Callable[[Chunk], str], impossible: bool) -> dict[str, Any]:
    text = answered.answer or ""
    kind = answered.answer_kind or ("declined" if not answered.citations else "generated")
    given = [source_of(r.chunk) for r in answered.results]
    cited = [source_of(r.chunk) for r in answered.results if r.rank in answered.citations]
    golds = _golds(query)
    gold = str(query.get("gold_pid", ""))
    swapped_to = str(query.get("swapped", "")).partition(" -> ")[2]
    return {"question": query["question"], "answer": text, "kind": kind,
            "confidence": answered.answer_confidence,
            "impossible": impossible, "swapped": bool(swapped_to),
            "asserts_swap": bool(swapped_to) and kind == "generated" and (
                swapped_to.lower() in text.lower()), "gold_given": bool(gold) and gold in given,
            "cites_gold": bool(gold) and gold in cited,
            "contains_gold": kind != "declined" and contains(text, golds),
            "f1": 0.0 if kind == "declined" else max((f1(text, g) for g in golds),
                                                      default=0.0)}


def _summary(rows: list[dict[str, Any]], latency: list[float], first_token: list[float]
             ) -> AnswerScores:
    answerable = [r for r in rows if not r["impossible"]]
    impossible = [r for r in rows if r["impossible"]]
    swapped = [r for r in impossible if r["swapped"]]
    n = max(1, len(answerable))
    answered = [r for r in answerable if r["kind"] != "declined"]
    with_gold = [r for r in answerable if r["gold_given"]]

    def share(part: Sequence[Any], of: Sequence[Any]) -> float:
        return round(100 * len(part) / max(1, len(of)), 1)

    generated = [r for r in rows if r["kind"] == "generated"]
    given = [r for r in rows if r["kind"] != "declined" and r["confidence"] is not None]
    bins = []
    for low in (0.0, 0.2, 0.4, 0.6, 0.8):
        inside = [r for r in given
                  if low <= r["confidence"] < low + 0.2 or (low == 0.8 and r["confidence"] >= 1)]
        bins.append({"bin": f"{low:.1f}-{low + 0.2:.1f}", "answers": len(inside),
                     "right": share([r for r in inside if r["contains_gold"]], inside)
                     if inside else None})
    return AnswerScores(
        generated_precision=share([r for r in generated if r["contains_gold"]], generated)
        if generated else None,
        generated_share=share([r for r in answerable if r["kind"] == "generated"], answerable),
        quoted_share=share([r for r in answerable if r["kind"] == "quoted"], answerable),
        declined_share=share([r for r in answerable if r["kind"] == "declined"], answerable),
        reliability=bins,
        questions=len(answerable),
        contains_gold=share([r for r in answerable if r["contains_gold"]], answerable),
        f1=round(100 * sum(r["f1"] for r in answerable) / n, 1),
        declined=share([r for r in answerable if r["kind"] == "declined"], answerable),
        declined_with_gold=share([r for r in with_gold if r["kind"] == "declined"],
                                 with_gold),
        citation_is_gold=share([r for r in answered if r["cites_gold"]], answered),
        wrong=share([r for r in answered if not r["contains_gold"]], answerable),
        latency_p50_s=round(statistics.median(latency), 2) if latency else 0.0,
        kinds={kind: share([r for r in answerable if r["kind"] == kind], answerable)
               for kind in ("generated", "quoted", "declined")},
        gold_given=len(with_gold),
        unanswerable=len(impossible),
        unanswerable_declined=share([r for r in impossible if r["kind"] == "declined"],
                                    impossible) if impossible else None,
        swapped=len(swapped),
        swapped_declined=share([r for r in swapped if r["kind"] == "declined"], swapped)
        if swapped else None,
        swapped_asserted=share([r for r in swapped if r["asserts_swap"]], swapped)
        if swapped else None,
        first_token_p50_s=round(statistics.median(first_token), 2) if first_token else None,
        examples=rows)


__all__ = ["AnswerScores", "contains", "evaluate_answers", "f1", "normalize", "pick"]
