"""Retrieval: the query is embedded, matched against the stored questions (question to
question), and the hits are mapped to distinct chunks. A chunk's score is the cosine
similarity of its best matching question; its matched questions come along. The
statements' and chunks' dense signals read the query's vector through the index's query
adapter where one is in use (:mod:`isotope.search.adapter`); ``hybrid`` fuses every
signal."""

from __future__ import annotations

import copy
import math
import re
import time
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from isotope.embedders import Embedder, Vectors
from isotope.ingest.questions import STOPWORDS
from isotope.models import (
    Action,
    Chunk,
    MatchedQuestion,
    QueryResponse,
    SearchResult,
    best_first,
)
from isotope.prompts import PROMPTS, PromptSpec
from isotope.providers import Prompt
from isotope.search.adapter import Adapter
from isotope.search.filters import Condition
from isotope.search.graph_signal import SHOWN_PATHS
from isotope.settings import Aggregate, Fusion, RetrievalSettings
from isotope.stores import Hit, Kind, Store

MATCHES_PER_CHUNK = 3


TRANSFORM_PROMPT_VERSION = PROMPTS["transform"].version


def transform_prompt(query: str, spec: PromptSpec = PROMPTS["transform"]) -> Prompt:
    return spec.render(query=query)


def search_many(
    store: Store, embedder: Embedder, query: str, rewrites: list[str], k: int,
    mode: str = "questions-dense", **options: Any,
) -> QueryResponse:
    """Search the query and its rewrites, and fuse: a chunk keeps its best score over all
    of them (and that search's ``explain``, with the graph's paths of every search that
    reached it), and the matched questions of each."""
    responses = [search(store, embedder, q, k, mode, **options) for q in [query, *rewrites]]
    best: dict[str, SearchResult] = {}
    for response in responses:
        for result in response.results:
            seen = best.get(result.chunk.id)
            if seen is None:
                best[result.chunk.id] = result.model_copy(deep=True)
                continue
            texts = {m.text for m in seen.matched_questions}
            seen.matched_questions.extend(
                m for m in result.matched_questions if m.text not in texts)
            seen.matched_questions.sort(key=lambda m: best_first(m.score, m.text))
            del seen.matched_questions[MATCHES_PER_CHUNK:]
            wins = result.score > seen.score  # (the winning search's paths first)
            paths = [*graph_paths(result), *graph_paths(seen)] if wins else \
                [*graph_paths(seen), *graph_paths(result)]
            if wins:
                seen.explain = copy.deepcopy(result.explain)
            seen.score = max(seen.score, result.score)
            if paths and seen.explain is not None:  # (as many as one search shows)
                graph = seen.explain.setdefault("signals", {}).setdefault("graph", {})
                graph["paths"] = list(dict.fromkeys(paths))[:SHOWN_PATHS]
    ranked = sorted(best.values(), key=lambda r: best_first(r.score, r.chunk.id))[:k]
    for rank, result in enumerate(ranked, start=1):
        result.rank = rank
    timings = {name: sum(r.timings.get(name, 0.0) for r in responses)
               for name in ("embed", "search")}
    return QueryResponse(query=query, mode=mode, results=ranked, rewrites=rewrites,
                         timings=timings)


def graph_paths(result: SearchResult) -> list[str]:
    """The paths by which the graph signal reached ``result`` (its ``explain``)."""
    return list((result.explain or {}).get("signals", {}).get("graph", {}).get("paths") or [])


@dataclass(frozen=True)
class Signal:
    """One of ``hybrid``'s signals, and a mode of its own: its ``name``, the kind of item
    it reads (``questions``, ``atoms`` or ``chunks``), how it scores (``dense``: cosine
    similarity of embeddings; ``bm25``: keywords), and its weight in ``hybrid`` when no
    setting gives one (None: ``alpha`` for a dense signal, ``1 - alpha`` for a keyword
    one)."""

    name: str
    kind: Kind
    how: Literal["dense", "bm25", "graph"]
    weight: float | None = None


REGISTRY: tuple[Signal, ...] = (
    Signal("questions-dense", "questions", "dense"),
    # (keyword search over the questions added nothing the atom and chunk keyword signals
    # did not already bring: see DEFAULT_WEIGHTS)
    Signal("questions-bm25", "questions", "bm25", weight=0.0),
    Signal("atoms-dense", "atoms", "dense"),
    Signal("atoms-bm25", "atoms", "bm25"),
    Signal("chunks-dense", "chunks", "dense"),
    Signal("chunks-bm25", "chunks", "bm25"),
    # chunks reached through the knowledge graph (setting graph): off in hybrid until a
    # weight is given (ISOTOPE_WEIGHTS='{"graph": 0.5}') or fitted from users' marks
    Signal("graph", "chunks", "graph", weight=0.0),
)
"""The signals, from which the modes (:data:`Mode`, :data:`MODES`: each signal, and
``hybrid``), the weights (:func:`signal_weights`), MCP's list of modes and ``--explain``'s
signals are derived."""
Mode = Literal[
    "questions-dense", "questions-bm25", "atoms-dense", "atoms-bm25", "chunks-dense",
    "chunks-bm25", "graph", "hybrid",
]
MODES: tuple[str, ...] = (*(s.name for s in REGISTRY), "hybrid")
SIGNALS: dict[str, tuple[Kind, str]] = {s.name: (s.kind, s.how) for s in REGISTRY}
"""Each signal's (kind, how it scores), by name."""
_KEYWORD_STOPWORDS = STOPWORDS | {"i", "me", "my", "we", "our", "you", "your", "it", "its", "they",
                      "them", "their", "this", "that", "these", "those", "he", "she", "his",
                      "her", "s", "t"}


@dataclass
class Candidate:
    """A chunk found by one signal: its raw score and the hits behind it."""

    chunk_id: str
    score: float
    hits: list[Hit]


def keyword_query(query: str) -> str:
    """The query's terms for BM25, without question words and stopwords (all terms if
    nothing else is left)."""
    terms = re.findall(r"\w+", query.lower())
    kept = [t for t in terms if t not in _KEYWORD_STOPWORDS]
    return " ".join(kept or terms)


def aggregated(scores: list[float], how: Aggregate) -> float:
    if how == "max" or len(scores) == 1:
        return scores[0]
    # A soft maximum: several good matches lift a chunk a little above its best one.
    top = max(scores)
    return top + SOFTSUM_TEMPERATURE * math.log(
        sum(math.exp((s - top) / SOFTSUM_TEMPERATURE) for s in scores))


SOFTSUM_TEMPERATURE = 0.05


ADAPTED = frozenset({"atoms-dense", "chunks-dense"})
"""The signals that read the query's vector through the index's query adapter, when it
has one in use (:mod:`isotope.search.adapter`); question-to-question matching and the
graph read it as embedded."""


def signal(store: Store, mode: str, query: str, vector: Vectors, pool: int,
           aggregate: Aggregate = "max", filters: Sequence[Condition] = (), *,
           adapted: Vectors | None = None) -> list[Candidate]:
    """The chunks one signal finds, best first. ``adapted``: the query's vector through
    the index's query adapter (read by the signals of :data:`ADAPTED`)."""
    kind, how = SIGNALS[mode]
    if adapted is not None and mode in ADAPTED:
        vector = adapted
    if how == "graph":
        from isotope.search.graph_signal import graph_hits

        return [Candidate(c, score, hits)
                for c, score, hits in graph_hits(store, query, vector, pool, filters)]
    if how == "dense":
        grouped = store.search_by_chunk(kind, vector, pool, MATCHES_PER_CHUNK, filters)
    else:
        hits = store.keyword_search(kind, keyword_query(query), pool * MATCHES_PER_CHUNK,
                                    filters)
        by_chunk: dict[str, list[Hit]] = {}
        for hit in hits:
            group = by_chunk.setdefault(hit.chunk_id, [])
            if len(group) < MATCHES_PER_CHUNK:
                group.append(hit)
        grouped = list(by_chunk.items())[:pool]
    found = [Candidate(c, aggregated([h.score for h in hits], aggregate),
                       sorted(hits, key=lambda h: best_first(h.score, h.text)))
             for c, hits in grouped]
    found.sort(key=lambda c: best_first(c.score, c.chunk_id))
    return found


def zscore(found: list[Candidate], chunks: AbstractSet[str],
           reference: list[Candidate] | None = None) -> dict[str, float]:
    """Each candidate's standard score over the signal's candidates (or over
    ``reference``'s, when given: those of the search without its filters); a chunk of
    ``chunks`` the signal did not find counts as the lowest."""
    values = [c.score for c in (reference or found)]
    mean = sum(values) / len(values)
    spread = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)) or 1.0
    # (the lowest of all: a weak match found is never below a chunk not found at all)
    floor = (min([*values, *(c.score for c in found)]) - mean) / spread
    seen = {c.chunk_id: (c.score - mean) / spread for c in found}
    return {chunk_id: seen.get(chunk_id, floor) for chunk_id in chunks}


def rrf(found: list[Candidate], chunks: AbstractSet[str]) -> dict[str, float]:
    """Reciprocal rank fusion's part (k = 60) of each candidate; nothing for the rest."""
    return {c.chunk_id: 1 / (60 + rank) for rank, c in enumerate(found, start=1)
            if c.chunk_id in chunks}


FUSIONS: dict[str, Callable[[list[Candidate], AbstractSet[str]], dict[str, float]]] = {
    "zscore": zscore, "rrf": rrf}
"""The ``fusion`` setting's choices: a signal's candidates (best first) and the chunks
to score -> each chunk's part, weighted and summed by :func:`fuse`."""


def fuse(signals: dict[str, list[Candidate]], weights: dict[str, float],
         method: Fusion = "zscore", waiting: AbstractSet[str] = frozenset(),
         parts: dict[str, dict[str, float]] | None = None,
         reference: dict[str, list[Candidate]] | None = None) -> list[tuple[str, float]]:
    """Fused chunk scores, best first: each signal's parts (:data:`FUSIONS`), weighted and
    summed (``parts``, when given, gets each chunk's part of each signal, before its
    weight, and ``"*"``: the factor a waiting chunk's sum was scaled by).

    Chunks ``waiting`` for their questions are scored by the other signals alone, scaled
    up to the whole weight (the question signals could not find them: they are neither
    rewarded nor penalised for it).

    ``reference``: each signal's candidates without the search's filters (z-scores only):
    their spread standardises the filtered candidates, so that a score means the same
    with a filter and without (:func:`unfiltered`)."""
    part_of = FUSIONS[method]
    chunks = {c.chunk_id for found in signals.values() for c in found}
    fused = dict.fromkeys(chunks, 0.0)
    total = applied = 0.0  # the weight of the signals used, and of those without questions
    for name, found in signals.items():
        weight = weights.get(name, 0.0)
        if not found or not weight:
            continue
        total += weight
        asks_questions = name.startswith("questions")
        applied += 0.0 if asks_questions else weight
        scored = chunks - waiting if asks_questions else chunks
        parted = (zscore(found, scored, reference.get(name)) if reference is not None
                  and method == "zscore" else part_of(found, scored))
        for chunk_id, part in parted.items():
            fused[chunk_id] += weight * part
            if parts is not None:
                parts.setdefault(chunk_id, {})[name] = part
    if waiting and applied:
        for chunk_id in waiting & chunks:
            fused[chunk_id] *= total / applied
            if parts is not None:
                parts.setdefault(chunk_id, {})["*"] = total / applied
    return sorted(fused.items(), key=lambda item: best_first(item[1], item[0]))


DEFAULT_WEIGHTS: dict[str, float] = {s.name: s.weight for s in REGISTRY
                                     if s.weight is not None}
"""Signals ``hybrid`` leaves out unless ``weights`` brings them back: on the first 300
passages of SQuAD dev, keyword search over the questions added nothing the atom and chunk
keyword signals did not already bring (R@1 79.7 without it, 78.3 with; R@5 96.5 and
95.8; both halves of the questions agree) and cost a fifth of the query time."""


def signal_weights(alpha: float, weights: dict[str, float] | None = None) -> dict[str, float]:
    """Per-signal weights: ``alpha`` for each dense signal, ``1 - alpha`` for each keyword
    signal, then :data:`DEFAULT_WEIGHTS`, unless ``weights`` names a signal's weight."""
    out = {mode: alpha if how == "dense" else 1 - alpha for mode, (_, how) in SIGNALS.items()}
    out.update(DEFAULT_WEIGHTS)
    unknown = set(weights or {}) - set(SIGNALS)
    if unknown:
        from isotope.errors import IsotopeError

        raise IsotopeError(f"unknown signal(s) in weights: {', '.join(sorted(unknown))}; "
                           f"signals: {', '.join(SIGNALS)}")
    out.update(weights or {})
    return out


def normalized(mode: str, score: float, total_weight: float = 1.0) -> float:
    """A score in 0..1: cosine clipped at 0 for dense modes, ``s / (s + 5)`` for BM25,
    and the logistic of the fused score (per unit of weight) for ``hybrid``."""
    if mode == "hybrid":
        return 1 / (1 + math.exp(-score / max(total_weight, 1e-9)))
    if SIGNALS[mode][1] in ("dense", "graph"):
        return max(0.0, min(1.0, score))
    return score / (score + 5) if score > 0 else 0.0


def fusion_options(settings: RetrievalSettings, weights: dict[str, float] | None = None,
                   fitted: dict[str, float] | None = None) -> dict[str, Any]:
    """How :func:`search` fuses, from the ``retrieval`` settings (``weights`` over the
    setting's, over the weights ``fitted`` from users' marks)."""
    return {"alpha": settings.alpha, "fusion": settings.fusion,
            "weights": {**(fitted or {}), **settings.weights, **(weights or {})},
            "aggregate": settings.aggregate}


def weights_in_use(settings: RetrievalSettings, fitted: dict[str, float] | None = None
                   ) -> dict[str, float]:
    """Each hybrid signal's weight as :func:`search` fuses with it: the ``weights``
    setting over the weights ``fitted`` from users' marks, over the defaults."""
    return signal_weights(settings.alpha, fusion_options(settings, None, fitted)["weights"])


CONFIRMING = ("user", "manual")
"""The origins of confirmed questions: learned from a useful mark, or added by hand."""


def search(store: Store, embedder: Embedder, query: str, k: int,
           mode: str = "questions-dense", *, alpha: float = 0.5,
           weights: dict[str, float] | None = None, fusion: Fusion = "zscore",
           aggregate: Aggregate = "max", pool: int = 50,
           filters: Sequence[Condition] = (), explain: bool = False,
           confirmed_by: tuple[str, ...] = CONFIRMING,
           adapter: Adapter | None = None) -> QueryResponse:
    """The ``k`` best chunks for ``query`` in a retrieval mode (see :data:`MODES`), among
    the chunks that meet ``filters``. All reads see one committed state of the index.
    With ``explain``, each result says how its score was made (:func:`explained`).
    ``confirmed_by``: the origins of the questions whose match raises their chunk (see
    :func:`confirmed_raise`; ``manual`` alone for one who may not see learned ones).
    ``adapter``: the index's query adapter, applied to the query's vector for the
    signals of :data:`ADAPTED`."""
    if mode not in MODES:
        from isotope.errors import IsotopeError

        raise IsotopeError(f"unknown retrieval mode {mode!r}; choose from: {', '.join(MODES)}")
    started = time.perf_counter()
    vector = embedder.embed_one(query)
    adapted = adapter.apply(vector) if adapter is not None else None
    embedded = time.perf_counter()
    told: dict[str, dict[str, Any]] | None = {} if explain else None
    similar: dict[str, dict[str, float]] = {}

    def read() -> tuple[list[tuple[str, float, list[Hit]]], dict[str, Chunk], set[str],
                        dict[str, Any]]:
        with store.snapshot():
            if told is not None:
                told.clear()
            similar.clear()
            scored, chunks = _ranked(store, query, vector, k, mode, alpha, weights, fusion,
                                     aggregate, pool, filters, told, confirmed_by, similar,
                                     adapted)
            waiting = store.without_questions(list(chunks))
            described = {uri: store.get_source(uri)
                         for uri in {chunks[c].source for c, _, _ in scored if c in chunks}}
        return scored, chunks, waiting, described

    # (made again on another replica, or the primary, if its replica stops answering)
    scored, chunks, waiting, described = store.reading(read)
    results = [
        _similar(similar.get(chunk_id, {}), SearchResult(
            rank=rank,
            score=round(score, 6),
            chunk=chunks[chunk_id],
            matched_questions=[
                MatchedQuestion(text=h.text, score=round(h.score, 6), atom=h.atom,
                                origin=h.origin or "generated")  # type: ignore[arg-type]
                for h in hits if h.kind == "questions"
            ],
            has_questions=chunk_id not in waiting,
            explain=None if told is None else told.get(chunk_id),
            source_metadata=dict(getattr(described.get(chunks[chunk_id].source),
                                         "metadata", None) or {}),
        ))
        for rank, (chunk_id, score, hits) in enumerate(scored, start=1)
        if chunk_id in chunks
    ]
    done = time.perf_counter()
    return QueryResponse(
        query=query,
        mode=mode,
        results=results,
        timings={"embed": embedded - started, "search": done - embedded},
    )


def _ranked(
    store: Store, query: str, vector: Vectors, k: int, mode: str, alpha: float,
    weights: dict[str, float] | None, fusion: Fusion, aggregate: Aggregate, pool: int,
    filters: Sequence[Condition], told: dict[str, dict[str, Any]] | None = None,
    confirmed_by: tuple[str, ...] = CONFIRMING,
    similar: dict[str, dict[str, float]] | None = None, adapted: Vectors | None = None,
) -> tuple[list[tuple[str, float, list[Hit]]], dict[str, Chunk]]:
    """(chunk id, normalised score, hits) best first, and the chunks; ``told``, when
    given, gets each result's explanation (:func:`explained`); ``similar``, the cosine
    similarity of each hybrid candidate's best atom and of its text (kind to score);
    ``adapted``: the query's vector through the index's adapter (:func:`signal`)."""
    scored: list[tuple[str, float, list[Hit]]]
    if mode == "hybrid":
        used = {m: w for m, w in signal_weights(alpha, weights).items() if w}
        found = {m: _seen(signal(store, m, query, vector, max(pool, k), aggregate, filters,
                                 adapted=adapted), m, aggregate, confirmed_by) for m in used}
        waiting = store.without_questions(
            list({c.chunk_id for candidates in found.values() for c in candidates}))
        parts: dict[str, dict[str, float]] | None = {} if told is not None else None
        total = sum(used.values())
        reference = (unfiltered(store, query, vector, max(pool, k), aggregate, filters, used,
                                adapted) if fusion == "zscore" else None)  # (RRF: ranks)
        ranked = confirmed_raise(found, fuse(found, used, fusion, waiting, parts, reference),
                                 total, parts, fusion, confirmed_by)[:k]
        if similar is not None:
            for name in ("atoms-dense", "chunks-dense"):
                for candidate in found.get(name, []):
                    similar.setdefault(candidate.chunk_id, {})[name] = candidate.score
        hits_of: dict[str, list[Hit]] = {}
        for name in sorted(found, key=lambda m: not m.startswith("questions")):
            for candidate in found[name]:
                hits_of.setdefault(candidate.chunk_id, candidate.hits)
        scored = [(c, normalized(mode, s, total), hits_of[c]) for c, s in ranked]
        if told is not None and parts is not None:
            for chunk_id, fused in ranked:
                told[chunk_id] = explained(chunk_id, found, used, parts.get(chunk_id, {}),
                                           fused, normalized(mode, fused, total), fusion)
    else:
        found_one = _seen(signal(store, mode, query, vector, k, aggregate, filters,
                                 adapted=adapted), mode, aggregate, confirmed_by)[:k]
        scored = [(c.chunk_id, normalized(mode, c.score), c.hits) for c in found_one]
        if told is not None:
            for chunk_id, score, _ in scored:
                told[chunk_id] = explained(chunk_id, {mode: found_one}, {mode: 1.0},
                                           {}, None, score, None)
    return scored, store.get_chunks([chunk_id for chunk_id, _, _ in scored])


def _similar(similar: dict[str, float], result: SearchResult) -> SearchResult:
    """``result`` knowing how similar the query is to its best atom and its text (what
    :func:`assess` reads for a chunk that waits for its questions)."""
    result._similar = similar
    return result


def _seen(found: list[Candidate], mode: str, aggregate: Aggregate,
          confirmed_by: tuple[str, ...]) -> list[Candidate]:
    """A question signal's candidates without the learned questions (other users'
    queries) when the principal may not see them (``user`` not in ``confirmed_by``): their
    match would tell whether someone asked the query (a repeated query scores 1.0)."""
    if "user" in confirmed_by or not mode.startswith("questions"):
        return found
    kept = []
    for candidate in found:
        hits = [h for h in candidate.hits if h.origin != "user"]
        if hits:
            kept.append(Candidate(candidate.chunk_id,
                                  aggregated([h.score for h in hits], aggregate), hits))
    kept.sort(key=lambda c: best_first(c.score, c.chunk_id))
    return kept


def unfiltered(store: Store, query: str, vector: Vectors, pool: int, aggregate: Aggregate,
               filters: Sequence[Condition], used: dict[str, float],
               adapted: Vectors | None = None) -> dict[str, list[Candidate]] | None:
    """For a search narrowed by filters, each signal's candidates among all the principal
    may see (its access condition kept: nothing it may not see shapes a score): their
    spread standardises the narrowed candidates' scores as the search without filters
    would (a filter that leaves two chunks gave them z-scores of +1 and -1, and so fixed
    scores of 0.646 and 0.354, whatever they were). None: no filter narrows it."""
    from isotope.models import ACCESS_KEY

    if not any(c.key != ACCESS_KEY for c in filters):
        return None
    access = [c for c in filters if c.key == ACCESS_KEY]
    return {m: signal(store, m, query, vector, pool, aggregate, access, adapted=adapted)
            for m in used}


CONFIRMED_MATCH = 0.7
"""A chunk with a question users confirmed (a learned question: a past query marked
useful for the chunk; or one written by hand) that is closer to the query than this
cosine is raised in ``hybrid`` by :data:`CONFIRMED_GAIN` for each unit of cosine above it:
the fusion of signals would otherwise let the atoms and chunks outvote a match people
have confirmed."""
CONFIRMED_GAIN = 4.8
"""The raise, per unit of cosine above :data:`CONFIRMED_MATCH`, per unit of the signals'
total weight (so it keeps its strength whatever the weights). Chosen on
benchmarks/learning.py with :data:`CONFIRMED_MATCH` (benchmarks/history/2026-11.md,
"Learning from use"):
reworded questions reach R@1 >= 90 after their originals were learned (67.0 before), a
learned query asked again is first every time, and the held-out half gains 2 points or
more with the weights fitted from the marks (:mod:`isotope.search.weights`)."""


RRF_SCALE = 1 / 200
"""The raise under ``fusion = "rrf"``, whose fused scores span about 1/200 of z-scores'
(a best of about 1/61 per unit of weight)."""
CONFIRMED_SAME = 0.97
"""A query this close to a confirmed question is that question asked again: its chunk
comes first, whatever the other signals say."""


def confirmed_raise(found: dict[str, list[Candidate]], fused: list[tuple[str, float]],
                    total: float, parts: dict[str, dict[str, float]] | None = None,
                    fusion: Fusion = "zscore", origins: tuple[str, ...] = ("user", "manual"),
                    ) -> list[tuple[str, float]]:
    """``fused`` (best first) with each chunk whose confirmed question (origin ``user``
    or ``manual``) is within :data:`CONFIRMED_MATCH` of the query raised (see
    :data:`CONFIRMED_GAIN`), and the chunk of one the query repeats
    (:data:`CONFIRMED_SAME`) first; best first (``parts[chunk]["confirmed"]``: by how
    much each was raised)."""
    nearest: dict[str, float] = {}
    for candidate in found.get("questions-dense", []):
        for hit in candidate.hits:
            if hit.origin in origins and hit.score > CONFIRMED_MATCH:
                nearest[candidate.chunk_id] = max(nearest.get(candidate.chunk_id, -1.0),
                                                  hit.score)
    if not nearest:
        return fused
    # (RRF's parts are 1 / (60 + rank), about 1/100 of a z-score's spread of ~3)
    gain = CONFIRMED_GAIN * total * (RRF_SCALE if fusion == "rrf" else 1.0)
    raised = []
    for chunk_id, score in fused:
        extra = gain * (nearest.get(chunk_id, CONFIRMED_MATCH) - CONFIRMED_MATCH)
        raised.append((chunk_id, score + extra, extra))
    raised.sort(key=lambda item: best_first(item[1], item[0]))
    same = max(nearest, key=lambda c: nearest[c])
    at = next((i for i, (c, _, _) in enumerate(raised) if c == same), None)
    if nearest[same] >= CONFIRMED_SAME and at:  # the query asked again: its chunk first
        chunk_id, score, extra = raised.pop(at)
        lift = raised[0][1] + 1e-3 - score
        raised.insert(0, (chunk_id, score + lift, extra + lift))
    if parts is not None:
        for chunk_id, _, extra in raised:
            if extra > 0:
                parts.setdefault(chunk_id, {})["confirmed"] = extra
    return [(chunk_id, score) for chunk_id, score, _ in raised]


def explained(chunk_id: str, found: dict[str, list[Candidate]], weights: dict[str, float],
              parts: dict[str, float], fused: float | None, score: float,
              fusion: Fusion | None) -> dict[str, Any]:
    """How one result's score was made: for each signal, the chunk's ``rank`` among its
    candidates (None: not found), its ``raw`` score (cosine or BM25, None: not found),
    its ``standardized`` part (the fusion's: a z-score over the signal's candidates, or
    RRF's 1 / (60 + rank)), the signal's ``weight`` and its ``contribution`` (weight x
    part). ``fused`` is the sum of the contributions (times ``scale`` for a chunk still
    waiting for its questions) plus ``confirmed`` (the raise of a chunk with a question
    users confirmed near the query, see :func:`confirmed_raise`), ``score`` the
    result's score; with the questions and atoms that matched."""
    signals: dict[str, dict[str, Any]] = {}
    questions: list[str] = []
    atoms: list[str] = []
    for name, candidates in found.items():
        rank = next((i for i, c in enumerate(candidates, start=1) if c.chunk_id == chunk_id),
                    None)
        candidate = candidates[rank - 1] if rank else None
        part = parts.get(name, 0.0) if fused is not None else None
        weight = weights.get(name, 0.0)
        signals[name] = {
            "rank": rank, "raw": None if candidate is None else round(candidate.score, 6),
            "standardized": None if part is None else round(part, 6), "weight": weight,
            "contribution": None if part is None else round(weight * part, 6)}
        if name == "graph" and candidate is not None:  # (how the graph reached it)
            signals[name]["paths"] = [hit.text for hit in candidate.hits]
            continue
        for hit in candidate.hits if candidate else []:
            if hit.kind == "questions" and hit.origin != "user" and hit.text not in questions:
                questions.append(hit.text)
            if hit.kind == "atoms" and hit.text not in atoms:
                atoms.append(hit.text)
            if hit.kind == "questions" and hit.atom and hit.atom not in atoms:
                atoms.append(hit.atom)
    return {"fusion": fusion, "fused": None if fused is None else round(fused, 6),
            "scale": parts.get("*", 1.0), "confirmed": round(parts.get("confirmed", 0.0), 6),
            "score": round(score, 6), "signals": signals,
            "matched_questions": questions, "matched_atoms": atoms}


CONFIDENCE: dict[str, tuple[float, float]] = {
    # (deliver from, refine under) per mode, calibrated with `calibrate` (isotope.search.evaluation;
    # benchmarks/calibrate.py) on the first 300 passages of SQuAD dev queried with their
    # 1,868 questions and the 1,496 of the next 300 passages (whose answer is not in the
    # index). From `deliver` on, the first result was right for 90% of the questions; just
    # under `refine`, the right passage was among the first five for fewer than half.
    # Under hybrid's `refine` fall 79% of the unanswerable questions and 18% of the
    # answerable ones (benchmarks/history/). BM25 and hybrid scores depend on the
    # index's size: `isotope eval` suggests thresholds for your own data.
    "questions-dense": (0.94, 0.64),
    "questions-bm25": (0.83, 0.71),
    "atoms-dense": (0.84, 0.52),
    "atoms-bm25": (0.81, 0.70),
    "chunks-dense": (0.77, 0.47),
    "chunks-bm25": (0.81, 0.69),
    "hybrid": (0.965, 0.91),
}


HYBRID_BY_SIZE: tuple[tuple[int, float, float], ...] = (
    (3, 0.733, 0.647), (4, 0.733, 0.688), (5, 0.733, 0.716), (10, 0.837, 0.748),
    (20, 0.871, 0.808), (50, 0.927, 0.880), (100, 0.943, 0.884), (300, *CONFIDENCE["hybrid"]))
"""``hybrid``'s (deliver, refine) thresholds by the index's size in chunks: its scores
are standardised over a query's candidates, so a small index's right chunk scores lower.
Calibrated on the 300-passage index cut to its first N passages, each cut queried with
its passages' questions and as many whose answer is not in it (benchmarks/calibrate.py
--sizes; benchmarks/history/2026-11.md, "Confidence by index size"), with
:func:`isotope.search.evaluation.calibrate`. ``deliver`` (from 5 passages): the first
result is right for 90% of the questions scoring as high; below 5 chunks the value at 5
(measured 0.692 at 3 and 0.715 at 4, but on three of the example files, questions on
their subject that they do not answer scored 0.69-0.70). ``refine`` (from 3 passages): where,
just under it, fewer than half of the questions find their passage among the first
five (on a few chunks, where the questions the index cannot answer outnumber the
others), but never above the score under which fall 5% of the questions whose first
result is right (:data:`~isotope.search.evaluation.REFINE_RIGHT`): a right first result
is told to rephrase at most one time in twenty by its score. At 300 chunks and above,
the thresholds of CONFIDENCE (calibrated for every mode without that bound, which would
put ``refine`` at 0.887 there). Between sizes, interpolated on the logarithm of the
size; below 3 the values at 3."""


def thresholds(mode: str, deliver: float | None = None,
               refine: float | None = None, *, chunks: int | None = None
               ) -> tuple[float, float]:
    """The (deliver, refine) thresholds of a mode: the settings' when given, else the
    calibrated defaults (for ``hybrid``, at the index's size in ``chunks``, when
    known)."""
    default_deliver, default_refine = CONFIDENCE.get(mode, (0.8, 0.5))
    if mode == "hybrid" and chunks is not None:
        sizes = [math.log(max(1, n)) for n, _, _ in HYBRID_BY_SIZE]
        at = math.log(max(1, chunks))
        default_deliver = float(np.interp(at, sizes, [d for _, d, _ in HYBRID_BY_SIZE]))
        default_refine = float(np.interp(at, sizes, [r for _, _, r in HYBRID_BY_SIZE]))
    chosen_refine = default_refine if refine is None else refine
    return (max(default_deliver, chosen_refine) if deliver is None else deliver,
            chosen_refine)


def action(top_score: float, deliver: float, refine: float) -> Action:
    if top_score >= deliver:
        return "deliver"
    return "query_more" if top_score >= refine else "refine_query"


_CONFIDENCE_ORDER: dict[str, int] = {"refine_query": 0, "query_more": 1, "deliver": 2}


def assess(response: QueryResponse, deliver: float | None = None,
           refine: float | None = None, *, chunks: int | None = None) -> QueryResponse:
    """Fill in the response's confidence fields from its scores.

    ``hybrid`` scores are standardised over a query's candidates, so they depend on the
    index's size (on a few documents even the right chunk scores low): unless thresholds
    are given, its thresholds are those calibrated for an index of ``chunks`` chunks
    (:data:`HYBRID_BY_SIZE`), and it gets the most confident of its score's action and
    those that cosine similarities give the first result (they depend neither on the
    index's size nor on the search's filters): its best matched question's, by the
    ``questions-dense`` thresholds, and, while it waits for its questions, its best
    atom's and its text's, by ``atoms-dense``'s and ``chunks-dense``'s."""
    scores = [r.score for r in response.results]
    response.top_score = scores[0] if scores else 0.0
    response.score_spread = round(scores[0] - scores[1], 6) if len(scores) > 1 else (
        response.top_score)
    high, low = thresholds(response.mode, deliver, refine, chunks=chunks)
    suggested = action(response.top_score, high, low)
    if response.mode == "hybrid" and deliver is None and refine is None and response.results:
        first = response.results[0]
        similar = {"questions-dense": max(q.score for q in first.matched_questions)
                   } if first.matched_questions else {}
        if not first.has_questions:  # (its atoms and text are all there is to match)
            similar.update(first._similar)
        for name, similarity in similar.items():
            dense = action(similarity, *thresholds(name))
            suggested = max(suggested, dense, key=_CONFIDENCE_ORDER.__getitem__)
    response.suggested_action = suggested
    response.has_high_confidence = suggested == "deliver"
    return response
