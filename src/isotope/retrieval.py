"""Retrieval: the query is embedded, matched against the stored questions (question to
question), and the hits are mapped to distinct chunks. A chunk's score is the cosine
similarity of its best matching question; its matched questions come along."""

from __future__ import annotations

import time
from collections import defaultdict

from isotope.embedders import Embedder
from isotope.models import MatchedQuestion, QueryResponse, SearchResult
from isotope.stores import Hit, Store

MATCHES_PER_CHUNK = 3


def search(store: Store, embedder: Embedder, query: str, k: int) -> QueryResponse:
    started = time.perf_counter()
    vector = embedder.embed_one(query)
    embedded = time.perf_counter()
    pool = max(200, k * 20)
    while True:
        hits = store.search("questions", vector, pool)
        by_chunk: dict[str, list[Hit]] = defaultdict(list)
        for hit in hits:
            by_chunk[hit.chunk_id].append(hit)
        if len(by_chunk) >= k or len(hits) < pool:
            break
        pool *= 4
    ranked = sorted(by_chunk.items(), key=lambda item: -item[1][0].score)[:k]
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
