"""A query adapter per index (issue 66): a linear map of the query's embedding, fitted
on the index's own questions, applied before the statements' and chunks' dense signals
(``atoms-dense``, ``chunks-dense``) search; question-to-question matching reads the query
as embedded. The stored vectors and their indexes are untouched, so it works the same on
every engine.

Every kept question is a query with a known answer: its chunk. The fit reads them (at
most :data:`MOST_PAIRS`, drawn at random), and the queries users confirmed (useful marks
learned or approved, no user's beyond a quarter of them: :func:`learning.vetted`), each
as a pair of its own with weight :data:`CONFIRMED_WEIGHT`, and learns a matrix ``W`` (from
the identity) so that ``normalise(q W)`` is nearest its own chunk's vector: a softmax over
the chunks of each batch (in-batch negatives, temperature :data:`TEMPERATURE`), Adam for
:data:`STEPS` steps of :data:`BATCH` pairs, in numpy. A tenth of the chunks
(:data:`HELD_OUT`) are held out of the fit with all their questions; the adapter is used
only when more of those questions find their chunk first with it than without it
(R@1 on the held-out questions, both reported). A regularised least-squares map toward
the chunk's vector was measured too and lost to the identity (benchmarks/adapter.py).

The fit is kept in the index (meta ``query_adapter``: when, on how many questions, the
held-out R@1; ``query_adapter_matrix``: the matrix, float32 in base64) and made again
when the index's kept questions grew by :data:`GROWTH` since (after ``ingest``, ``enrich``
or ``compact``, with the ``query_adapter`` setting on), or by ``isotope adapter fit``.
Measured in benchmarks/history/2026-12.md ("Query adapter (issue 66)")."""

from __future__ import annotations

import base64
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, get_args

import numpy as np
from pydantic import BaseModel

from isotope.errors import InvalidArgument
from isotope.search import learning
from isotope.settings import QueryAdapter

if TYPE_CHECKING:
    from isotope.embedders import Embedder, Vectors
    from isotope.stores import QuestionPairs, Store

log = logging.getLogger(__name__)

META_KEY = "query_adapter"
MATRIX_KEY = "query_adapter_matrix"
KINDS: tuple[str, ...] = tuple(k for k in get_args(QueryAdapter) if k != "off")
"""The adapters the ``query_adapter`` setting may name (besides ``off``)."""
MIN_QUESTIONS = 200
"""Fewer kept questions than this are too few to fit on."""
MIN_CHUNKS = 20
"""... and fewer chunks with questions (a tenth of them is held out)."""
HELD_OUT = 0.1
"""The share of the chunks whose questions are held out of the fit and score it."""
MOST_PAIRS = 50_000
"""The kept questions a fit reads at most (drawn at random among them)."""
MOST_HELD = 2_000
"""The held-out questions scored at most."""
MOST_MARKS = 5_000
"""The newest confirmed queries a fit reads."""
CONFIRMED_WEIGHT = 1.0
"""A confirmed query's weight in the fit, against a generated question's 1."""
GROWTH = 0.25
"""The adapter is fitted again when the kept questions grew by this share."""
STEPS = 100
BATCH = 256
LEARNING_RATE = 2e-4
TEMPERATURE = 0.05


class AdapterFit(BaseModel):
    """What :func:`fit` found (``isotope adapter fit --json``)."""

    kind: str = "linear"
    questions: int
    """The index's kept questions when it was fitted (it is fitted again at
    ``1 + GROWTH`` times as many)."""
    pairs: int
    """The (query, chunk) pairs fitted on: questions of the chunks not held out, and
    the confirmed queries of those chunks."""
    confirmed: int = 0
    """Users' confirmed queries among the pairs fitted on and held out."""
    left_out: int = 0
    """Useful marks not read: pending review, rejected, never learned, or beyond one
    user's share (:func:`learning.vetted`)."""
    held_out: int
    """The held-out questions scored."""
    r1_identity: float
    """The share of the held-out questions whose chunk the query as embedded finds
    first (chunks-dense, among the chunks read; 0..1)."""
    r1: float
    """... and the adapted query."""
    used: bool
    """Whether the adapter beats the identity on the held-out questions (only then is
    it applied)."""
    at: str
    seconds: float = 0.0
    fit_id: str = ""


@dataclass(frozen=True)
class Adapter:
    """A fitted linear map of query embeddings (``dim`` x ``dim``)."""

    matrix: Vectors
    fit_id: str = ""

    def apply(self, vector: Vectors) -> Vectors:
        """The query's vector mapped, of unit length (as every stored vector is)."""
        mapped = np.asarray(vector, dtype=np.float32).ravel() @ self.matrix
        return (mapped / max(float(np.linalg.norm(mapped)), 1e-12)).astype(np.float32)


def fitted(store: Store) -> AdapterFit | None:
    """The last fit kept in the index, used or not, if any."""
    saved = store.get_meta(META_KEY)
    return AdapterFit.model_validate(saved) if saved else None


def load(store: Store, known: Adapter | None = None) -> Adapter | None:
    """The adapter the index uses (its last fit beat the identity), None if none;
    ``known``: the one read before, kept when the fit is the same (its matrix is read
    only when it changed)."""
    done = fitted(store)
    if done is None or not done.used:
        return None
    if known is not None and known.fit_id == done.fit_id:
        return known
    saved = store.get_meta(MATRIX_KEY)
    if not saved or saved.get("fit_id") != done.fit_id:
        return known  # (being written by another process: the next read has it)
    dim = int(saved["dim"])
    matrix = np.frombuffer(base64.b64decode(saved["data"]), dtype=np.float32)
    return Adapter(matrix.reshape(dim, dim).copy(), done.fit_id)


def keep(store: Store, done: AdapterFit, adapter: Adapter) -> None:
    """Keep a fit in the index (its matrix only when it is used): searches read it."""
    matrix = adapter.matrix.astype(np.float32)
    store.set_meta(MATRIX_KEY, {"fit_id": done.fit_id, "dim": int(matrix.shape[0]),
                                "data": base64.b64encode(matrix.tobytes()).decode()}
                   if done.used else None)
    store.set_meta(META_KEY, done.model_dump())


def status(setting: str, done: AdapterFit | None) -> dict[str, Any]:
    """What ``isotope status`` says of the adapter: the ``setting``, whether searches
    apply it (``in_use``: the setting is on and the last fit, ``done``, beat none on its
    held-out questions), and that ``fit``."""
    return {"setting": setting, "in_use": setting != "off" and done is not None
            and done.used, "fit": None if done is None else done.model_dump()}


def summary(said: dict[str, Any]) -> str:
    """:func:`status` in one line."""
    done = said.get("fit")
    fitted = "never fitted" if not done else (
        f"fitted {done['at']} on {done['questions']:,} questions ({done['seconds']:g} s): "
        f"R@1 of the {done['held_out']:,} held out {100 * done['r1_identity']:.1f}% without "
        f"it, {100 * done['r1']:.1f}% with it")
    if said["setting"] == "off":
        return f"off ({fitted})"
    used = "in use" if said["in_use"] else (
        "not in use: it did not beat none on its held-out questions" if done else "not in use")
    return f"{said['setting']}, {used}; {fitted}"


def due(store: Store, questions: int) -> bool:
    """Whether an index holding ``questions`` kept questions is due a fit: enough of
    them and none before, or :data:`GROWTH` more than the last fit read."""
    if questions < MIN_QUESTIONS:
        return False
    done = fitted(store)
    return done is None or questions >= (1 + GROWTH) * done.questions


def refit(store: Store, embedder: Embedder, setting: str
          ) -> tuple[AdapterFit, Adapter] | None:
    """With the ``query_adapter`` ``setting`` on, fit the adapter again and keep it when
    :func:`due` (after an ingest, an enrichment or a compaction, inside its write); None
    when nothing was fitted."""
    if setting == "off" or not due(store, store.counts()["questions"]):
        return None
    try:
        done, fitted = fit(store, embedder)
    except InvalidArgument as exc:  # (too few chunks to hold a tenth out)
        log.info("the query adapter is not fitted: %s", exc)
        return None
    keep(store, done, fitted)
    return done, fitted


def fit(store: Store, embedder: Embedder, *, seed: int = 0,
        min_questions: int = MIN_QUESTIONS) -> tuple[AdapterFit, Adapter]:
    """Fit a query adapter on the index's kept questions and users' confirmed queries
    (see the module's text); ``used`` in the fit says whether it beat the identity on
    the held-out questions (:func:`keep` keeps it either way)."""
    started = time.perf_counter()
    pairs = store.question_pairs(MOST_PAIRS, seed)
    queries, chunk_of, weights, confirmed, left_out = _pairs(store, embedder, pairs)
    chunks = np.asarray(pairs.chunk_vectors, dtype=np.float32)
    if len(pairs.origins) < min_questions or len(pairs.chunk_ids) < MIN_CHUNKS:
        raise InvalidArgument(
            f"{len(pairs.origins)} kept question(s) over {len(pairs.chunk_ids)} chunk(s); "
            f"fitting a query adapter needs at least {min_questions} over {MIN_CHUNKS} "
            "chunks (isotope enrich generates the questions of the chunks waiting for them)")
    rng = np.random.default_rng(seed)
    held = np.zeros(len(pairs.chunk_ids), dtype=bool)
    held[rng.choice(len(held), max(1, round(HELD_OUT * len(held))), replace=False)] = True
    train = ~held[chunk_of]
    matrix = train_linear(queries[train], chunk_of[train], chunks, weights[train], seed=seed)
    scored = np.flatnonzero(~train)
    if len(scored) > MOST_HELD:
        scored = np.sort(rng.choice(scored, MOST_HELD, replace=False))
    before = first(queries[scored], chunk_of[scored], chunks, None)
    after = first(queries[scored], chunk_of[scored], chunks, matrix)
    done = AdapterFit(
        questions=pairs.total, pairs=int(train.sum()), confirmed=confirmed, left_out=left_out,
        held_out=len(scored), r1_identity=round(before / max(1, len(scored)), 4),
        r1=round(after / max(1, len(scored)), 4), used=after > before,
        at=datetime.now(UTC).isoformat(timespec="seconds"),
        seconds=round(time.perf_counter() - started, 2), fit_id=uuid.uuid4().hex)
    return done, Adapter(matrix, done.fit_id)


def _pairs(store: Store, embedder: Embedder, pairs: QuestionPairs
           ) -> tuple[Vectors, Any, Any, int, int]:
    """The queries fitted on (each a vector), each one's chunk (a position in
    ``pairs.chunk_ids``) and weight; how many are confirmed queries, and how many
    useful marks were left out. Learned questions (origin ``user``) count only as the
    confirmed queries :func:`learning.vetted` reads: a user's beyond a quarter of the
    marks, or one never approved, teaches nothing here."""
    marks, left_out = learning.vetted(store, MOST_MARKS)
    position = {chunk_id: i for i, chunk_id in enumerate(pairs.chunk_ids)}
    learned = {(learning.normalized(text), pairs.chunk_of[i]): i
               for i, text in enumerate(pairs.texts) if text is not None}
    own = [i for i, origin in enumerate(pairs.origins) if origin != "user"]
    vectors = [np.asarray(pairs.vectors, dtype=np.float32)[own]] if own else []
    chunk_of = [pairs.chunk_of[i] for i in own]
    weights = [1.0] * len(own)
    confirmed: dict[tuple[str, int], str] = {}
    for mark in marks:  # (a chunk none of whose questions was read is left out)
        if mark.chunk_id in position:
            confirmed.setdefault((learning.normalized(mark.query), position[mark.chunk_id]),
                                 mark.query)
    stored = [learned[key] for key in confirmed if key in learned]
    said = [(key, query) for key, query in confirmed.items() if key not in learned]
    if stored:
        vectors.append(np.asarray(pairs.vectors, dtype=np.float32)[stored])
        chunk_of += [pairs.chunk_of[i] for i in stored]
    if said:  # (confirmed, never stored as a question: the chunk had it, or learn = off)
        vectors.append(np.asarray(embedder.embed([query for _, query in said]),
                                  dtype=np.float32))
        chunk_of += [key[1] for key, _ in said]
    weights += [CONFIRMED_WEIGHT] * (len(stored) + len(said))
    dim = int(pairs.vectors.shape[1]) if pairs.vectors.size else embedder.dim
    queries = np.vstack(vectors) if vectors else np.zeros((0, dim), dtype=np.float32)
    return (queries, np.asarray(chunk_of, dtype=np.int64),
            np.asarray(weights, dtype=np.float32), len(stored) + len(said), left_out)


def train_linear(queries: Vectors, chunk_of: Any, chunks: Vectors, weights: Any, *,
                 steps: int = STEPS, batch: int = BATCH, rate: float = LEARNING_RATE,
                 temperature: float = TEMPERATURE, seed: int = 0) -> Vectors:
    """``W`` (from the identity) such that ``normalise(queries[i] W)`` is nearest
    ``chunks[chunk_of[i]]`` among the chunks of its batch: softmax cross-entropy over a
    batch's distinct chunks (in-batch negatives), each pair weighted, Adam."""
    rng = np.random.default_rng(seed)
    n, dim = queries.shape
    matrix = np.eye(dim, dtype=np.float32)
    moment, second = np.zeros_like(matrix), np.zeros_like(matrix)
    order, at = rng.permutation(n), 0
    for step in range(1, steps + 1):
        if at + batch > n:
            order, at = rng.permutation(n), 0
        rows = order[at : at + batch]
        at += batch
        q, weight = queries[rows], weights[rows]
        mapped = q @ matrix
        length = np.maximum(np.linalg.norm(mapped, axis=1, keepdims=True), 1e-12)
        unit = mapped / length
        among, label = np.unique(chunk_of[rows], return_inverse=True)
        targets = chunks[among]
        logits = (unit @ targets.T) / temperature
        logits -= logits.max(axis=1, keepdims=True)
        share = np.exp(logits)
        share /= share.sum(axis=1, keepdims=True)
        share[np.arange(len(rows)), label] -= 1.0  # (d loss / d logits)
        share *= (weight / weight.sum())[:, None]
        towards = (share @ targets) / temperature
        grad = q.T @ ((towards - unit * np.sum(towards * unit, axis=1, keepdims=True))
                      / length)
        moment = 0.9 * moment + 0.1 * grad
        second = 0.999 * second + 0.001 * grad * grad
        matrix -= rate * (moment / (1 - 0.9 ** step)) / (
            np.sqrt(second / (1 - 0.999 ** step)) + 1e-8)
    return matrix.astype(np.float32)


def first(queries: Vectors, chunk_of: Any, chunks: Vectors, matrix: Vectors | None,
          block: int = 256) -> int:
    """How many ``queries`` (mapped by ``matrix``, None: as they are) find their own
    chunk (``chunks[chunk_of[i]]``) first among ``chunks``."""
    found = 0
    for start in range(0, len(queries), block):
        q = queries[start : start + block]
        if matrix is not None:
            q = q @ matrix
            q = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
        found += int(np.sum(np.argmax(q @ chunks.T, axis=1)
                            == chunk_of[start : start + block]))
    return found
