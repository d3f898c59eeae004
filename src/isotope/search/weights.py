"""Signal weights fitted from the marks users left: the weights ``hybrid`` fuses its
signals with, chosen so that the chunks marked useful come first for their queries.

Each useful mark is a query and the chunk that answered it. The fit searches every signal
once per marked query, leaving out the question the mark itself taught (else the
question signals would find every marked chunk by its own words and take all the weight),
then walks each signal's weight over :data:`STEPS`, one signal at a time, keeping a step
only where more marked chunks come first (R@1 on the marks), until no step helps. The
weights are adopted only when they place at least :data:`MIN_GAIN` of the marks better
than the weights in use; they are kept in the index (``isotope weights``), read by every
``hybrid`` search under the ``weights`` setting (which still wins, signal by signal) and
a search's own ``weights``.

On the first 300 passages of SQuAD dev (benchmarks/learning.py), the weights fitted from
half of each passage's questions raise the other half's hybrid R@1 beyond what the learned
questions alone give (benchmarks/history/2026-11.md, "Learning from use").

With ``questions``, the queries are a sample of the index's own kept questions instead,
each searched with its own question left out of the question signals, its chunk the one
to come first (issue 66). Measured by benchmarks/quality.py --adapter, and not offered by
``isotope weights fit``: the weights so fitted lowered hybrid's R@1 on real questions (a
chunk's keyword text holds its questions' words, so its own question finds it by
keywords and the fit leans on ``chunks-bm25``; benchmarks/history/2026-12.md, "Query adapter (issue
66)")."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel

from isotope.errors import InvalidArgument
from isotope.models import best_first
from isotope.search import learning, retrieval
from isotope.search.retrieval import SIGNALS, Candidate

if TYPE_CHECKING:
    from isotope.embedders import Embedder
    from isotope.search.adapter import Adapter
    from isotope.settings import RetrievalSettings
    from isotope.stores import Store

META_KEY = "fitted_weights"
MIN_MARKS = 50
"""Fewer useful marks than this are too few to fit on (:func:`fit` refuses)."""
MIN_GAIN = 0.01
"""The share of the marks the fitted weights must place first beyond those in use."""
MOST_MARKS = 5_000
"""The newest marks a fit reads (one search per mark)."""
QUESTIONS = 1_000
"""The index's own questions a fit from questions reads (one search each)."""
STEPS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5)
"""The weights each signal may take."""
ROUNDS = 4


class WeightFit(BaseModel):
    """What :func:`fit` found."""

    weights: dict[str, float]
    """The fitted weight of each signal (in use when ``adopted``)."""
    before: dict[str, float]
    """The weights in use before the fit."""
    marks: int
    """The useful marks fitted on (one per query and chunk), or the index's questions
    (``source`` ``questions``)."""
    source: Literal["marks", "questions"] = "marks"
    """What the queries were: users' useful marks, or the index's own questions."""
    left_out: int = 0
    """Useful marks not fitted on: pending review, rejected, never learned (``learn =
    off``), or beyond one user's share (:func:`learning.vetted`)."""
    first_before: float
    """The share of the marks whose chunk came first with the weights before (0..1)."""
    first_after: float
    """... and with the fitted weights."""
    adopted: bool
    at: str
    seconds: float = 0.0


Marked = tuple[dict[str, list[Candidate]], set[str], str]
"""A marked query's candidates per signal, the chunks among them waiting for their
questions, and the marked chunk."""


def fitted(store: Store) -> WeightFit | None:
    """The fit kept in the index, if any."""
    saved = store.get_meta(META_KEY)
    return WeightFit.model_validate(saved) if saved else None


def reset(store: Store) -> bool:
    """Forget the fitted weights (``hybrid`` goes back to the defaults); False: none."""
    if not store.get_meta(META_KEY):
        return False
    store.set_meta(META_KEY, None)
    return True


def fit(store: Store, embedder: Embedder, settings: RetrievalSettings, *,
        min_marks: int = MIN_MARKS, allow_zero: bool = False,
        progress: Callable[[int, int], None] | None = None,
        adapter: Adapter | None = None, questions: int = 0) -> WeightFit:
    """Fit ``hybrid``'s signal weights on the useful marks of the index that were learned
    or approved (:func:`learning.vetted`; see the module's text), or, with
    ``questions``, on that many of its own kept questions drawn at random (learned ones
    aside); ``adopted``: they help enough to be kept (:func:`keep`). A signal's weight
    goes to 0 only with ``allow_zero`` (an administrator's explicit choice: a weight of
    0 switches a signal off for everyone). ``adapter``: the index's query adapter in use
    (the searches fitted on are those ``hybrid`` makes)."""
    started = time.perf_counter()
    if questions:
        drawn = store.question_pairs(questions, seed=0, texts=True)
        asked = [i for i, origin in enumerate(drawn.origins) if origin != "user"]
        keys = [(learning.normalized(drawn.texts[i] or ""),
                 drawn.chunk_ids[drawn.chunk_of[i]]) for i in asked]
        marks = {key: drawn.texts[i] or "" for key, i in zip(keys, asked, strict=True)}
        own = {key: drawn.vectors[i] for key, i in zip(keys, asked, strict=True)}
        if len(marks) < min_marks:
            raise InvalidArgument(f"{len(marks)} kept question(s) to fit on; fitting the "
                                  f"weights needs at least {min_marks} (isotope enrich "
                                  "generates the questions of the chunks waiting for them)")
        left_out = 0
    else:
        read, left_out = learning.vetted(store, MOST_MARKS)
        marks = {(learning.normalized(m.query), m.chunk_id): m.query for m in read}
        own = {}
    if len(marks) < min_marks:
        raise InvalidArgument(f"{len(marks)} useful mark(s) to fit on ({left_out} left out: "
                              "pending review, rejected, never learned, or beyond one "
                              f"user's share); fitting the weights needs at least "
                              f"{min_marks} (isotope feedback QUERY_ID CHUNK_ID marks a "
                              "result useful; isotope questions review approves marks)")
    fixed = dict(settings.weights)  # the setting's weights win: not fitted
    if set(SIGNALS) <= set(fixed):
        raise InvalidArgument("the weights setting (ISOTOPE_WEIGHTS) gives every signal its "
                              "weight, and it wins over fitted weights: nothing to fit. "
                              "Leave out the signals the fit may weigh")
    if fixed.get("questions-dense") == 0:
        raise InvalidArgument("the weights setting (ISOTOPE_WEIGHTS) sets questions-dense to "
                              "0; fitted weights keep it above 0 (what users confirmed is "
                              "read through it): leave it out of the setting to fit")
    before = retrieval.weights_in_use(settings, fitted_weights(store))
    pool, aggregate = max(50, settings.top_k), settings.aggregate
    queries = list(marks.values())
    vectors = (np.asarray([own[key] for key in marks], dtype=np.float32) if own else
               np.asarray(embedder.embed(queries), dtype=np.float32))
    cases: list[Marked] = []
    for i, ((said, chunk_id), query) in enumerate(marks.items()):
        adapted = adapter.apply(vectors[i]) if adapter is not None else None
        with store.snapshot():  # (one per mark: no snapshot held for the whole fit)
            found = {m: retrieval.signal(store, m, query, vectors[i], pool, aggregate,
                                         adapted=adapted) for m in SIGNALS}
            waiting = store.without_questions(
                list({c.chunk_id for candidates in found.values() for c in candidates}))
        for m in ("questions-dense", "questions-bm25"):
            found[m] = _without_own(found[m], said, aggregate, dense=m == "questions-dense",
                                    chunk_id=chunk_id if questions else None)
        cases.append((found, waiting, chunk_id))
        if progress is not None:
            progress(i + 1, len(marks))
    first_before = _first(cases, before, settings.fusion)
    weights, first_after = dict(before), first_before
    for _ in range(ROUNDS):
        moved = False
        for name in SIGNALS:
            if name in fixed:
                continue
            for step in STEPS:
                trial = {**weights, name: step}
                if step == weights[name] or not trial.get("questions-dense"):
                    continue  # (the confirmed raise reads the questions-dense signal)
                if step == 0 and not allow_zero:
                    continue
                scored = _first(cases, trial, settings.fusion)
                if scored > first_after:
                    weights, first_after, moved = trial, scored, True
        if not moved:
            break
    adopted = first_after - first_before >= max(1.0, MIN_GAIN * len(cases))
    done = WeightFit(weights=weights, before=before, marks=len(cases), left_out=left_out,
                     first_before=round(first_before / len(cases), 4),
                     first_after=round(first_after / len(cases), 4), adopted=adopted,
                     at=datetime.now(UTC).isoformat(timespec="seconds"),
                     seconds=round(time.perf_counter() - started, 2),
                     source="questions" if questions else "marks")
    return done


def keep(store: Store, done: WeightFit) -> None:
    """Keep an adopted fit in the index: ``hybrid`` searches use its weights."""
    if done.adopted:
        store.set_meta(META_KEY, done.model_dump())


def fitted_weights(store: Store) -> dict[str, float] | None:
    """The adopted fitted weights, if any."""
    done = fitted(store)
    return done.weights if done is not None and done.adopted else None


def _without_own(found: list[Candidate], said: str, aggregate: Any, *, dense: bool,
                 chunk_id: str | None = None) -> list[Candidate]:
    """A question signal's candidates without what the mark itself taught: a learned
    question that is the marked query (the same words), or one the mark confirmed (its
    own words, or, ``dense``, a cosine within :data:`learning.DUPLICATE`); best first.
    ``chunk_id``: the query is that chunk's own question (``said``), left out alone."""
    kept = []
    for candidate in found:
        if chunk_id is not None:
            hits = [h for h in candidate.hits if candidate.chunk_id != chunk_id
                    or learning.normalized(h.text) != said]
        else:
            hits = [h for h in candidate.hits if not (h.origin in ("user", "manual") and (
                learning.normalized(h.text) == said
                or (dense and h.score >= learning.DUPLICATE)))]
        if len(hits) == len(candidate.hits):
            kept.append(candidate)
        elif hits:
            kept.append(Candidate(candidate.chunk_id,
                                  retrieval.aggregated([h.score for h in hits], aggregate),
                                  hits))
    return sorted(kept, key=lambda c: best_first(c.score, c.chunk_id))


def _first(cases: list[Marked], weights: dict[str, float], fusion: Any) -> int:
    """How many marked chunks ``hybrid`` ranks first with ``weights``."""
    used = {m: w for m, w in weights.items() if w}
    total = sum(used.values())
    first = 0
    for found, waiting, chunk_id in cases:
        signals = {m: found[m] for m in used}
        ranked = retrieval.confirmed_raise(
            signals, retrieval.fuse(signals, used, fusion, waiting), total, None, fusion)
        first += bool(ranked) and ranked[0][0] == chunk_id
    return first
