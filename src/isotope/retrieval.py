"""Retrieval: the query is embedded, matched against the stored questions (question to
question), and the hits are mapped to distinct chunks. A chunk's score is the cosine
similarity of its best matching question; its matched questions come along."""

from __future__ import annotations

import time

from isotope.embedders import Embedder
from isotope.models import MatchedQuestion, QueryResponse, SearchResult
from isotope.providers import Prompt, messages
from isotope.stores import Store

MATCHES_PER_CHUNK = 3


TRANSFORM_PROMPT_VERSION = "t1"
TRANSFORM_SYSTEM = (
    "Rewrite the user's search query as one to three short, complete questions that a "
    "document could answer. Keep every name and number. Write one question per line and "
    "nothing else."
)


def transform_prompt(query: str) -> Prompt:
    return messages(TRANSFORM_SYSTEM, query)


def search_many(
    store: Store, embedder: Embedder, query: str, rewrites: list[str], k: int
) -> QueryResponse:
    """Search the query and its rewrites, and fuse: a chunk keeps its best score over all
    of them, and the matched questions of each."""
    responses = [search(store, embedder, q, k) for q in [query, *rewrites]]
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
            seen.matched_questions.sort(key=lambda m: -m.score)
            del seen.matched_questions[MATCHES_PER_CHUNK:]
            seen.score = max(seen.score, result.score)
    ranked = sorted(best.values(), key=lambda r: -r.score)[:k]
    for rank, result in enumerate(ranked, start=1):
        result.rank = rank
    timings = {name: sum(r.timings.get(name, 0.0) for r in responses)
               for name in ("embed", "search")}
    return QueryResponse(query=query, results=ranked, rewrites=rewrites, timings=timings)


def search(store: Store, embedder: Embedder, query: str, k: int) -> QueryResponse:
    started = time.perf_counter()
    vector = embedder.embed_one(query)
    embedded = time.perf_counter()
    ranked = store.search_by_chunk("questions", vector, k, MATCHES_PER_CHUNK)
    chunks = store.get_chunks([chunk_id for chunk_id, _ in ranked])
    results = [
        SearchResult(
            rank=rank,
            score=round(matched[0].score, 6),
            chunk=chunks[chunk_id],
            matched_questions=[
                MatchedQuestion(text=h.text, score=round(h.score, 6), atom=h.atom)
                for h in matched[:MATCHES_PER_CHUNK]
            ],
        )
        for rank, (chunk_id, matched) in enumerate(ranked, start=1)
        if chunk_id in chunks
    ]
    done = time.perf_counter()
    return QueryResponse(
        query=query,
        results=results,
        timings={"embed": embedded - started, "search": done - embedded},
    )
