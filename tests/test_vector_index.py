"""The vector index contract (isotope.ann), run by every implementation by name; results
are checked against a brute-force reference over real embeddings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from isotope import ann
from isotope.ann import VectorIndex, search_groups
from isotope.embedders import Embedder

TEXTS = [f"Item {i} is about {topic}." for i, topic in enumerate(
    ["parking", "swimming", "rowing", "lunch", "invoices", "holidays", "printers", "wifi",
     "badges", "parking fees", "pool hours", "gym hours"])]


@pytest.fixture(params=sorted(ann.kinds()))
def index(request: pytest.FixtureRequest, embedder: Embedder) -> VectorIndex:
    made = ann.create(request.param)
    vectors = embedder.embed(TEXTS)
    made.add(np.arange(100, 112, dtype=np.int64), np.arange(12, dtype=np.int64) // 3,
             vectors)
    return made


def _reference(embedder: Embedder, query: str, allowed: set[int] | None = None
               ) -> list[int]:
    vectors = embedder.embed(TEXTS)
    scores = vectors @ embedder.embed_one(query)
    order = np.argsort(-scores, kind="stable")
    return [100 + int(i) for i in order if allowed is None or int(i) // 3 in allowed]


def test_search_matches_brute_force(index: VectorIndex, embedder: Embedder) -> None:
    found = index.search(embedder.embed_one("Where do I park?"), 5)
    assert [item for item, _, _ in found] == _reference(embedder, "Where do I park?")[:5]
    assert [s for _, _, s in found] == sorted((s for _, _, s in found), reverse=True)
    assert all(group == (item - 100) // 3 for item, group, _ in found)
    assert len(index) == 12 and index.search(embedder.embed_one("x"), 0) == []


def test_search_keeps_only_allowed_groups(index: VectorIndex, embedder: Embedder) -> None:
    found = index.search(embedder.embed_one("Where do I park?"), 20,
                         np.array([1, 3], dtype=np.int64))
    assert [item for item, _, _ in found] == _reference(embedder, "Where do I park?", {1, 3})
    assert index.search(embedder.embed_one("park"), 5, np.array([], dtype=np.int64)) == []


def test_remove_and_replace(index: VectorIndex, embedder: Embedder) -> None:
    index.remove(np.array([100, 109, 999], dtype=np.int64))
    found = {item for item, _, _ in index.search(embedder.embed_one("parking"), 20)}
    assert len(index) == 10 and not found & {100, 109}
    index.add(np.array([101], dtype=np.int64), np.array([7], dtype=np.int64),
              embedder.embed(["Item about parking garages."]))
    assert len(index) == 10
    top = index.search(embedder.embed_one("parking garage"), 1)[0]
    assert top[:2] == (101, 7)


def test_save_and_load(index: VectorIndex, embedder: Embedder, tmp_path: Path) -> None:
    index.save(tmp_path, "questions-abc")
    loaded = type(index).load(tmp_path, "questions-abc")
    assert loaded is not None and len(loaded) == len(index)
    assert list(loaded.ids()[0]) == list(index.ids()[0])
    query = embedder.embed_one("pool opening hours")
    assert loaded.search(query, 4) == index.search(query, 4)
    assert type(index).load(tmp_path, "other") is None
    for file in type(index).files(tmp_path, "questions-abc"):
        file.write_bytes(b"")  # a crash left them empty
    assert type(index).load(tmp_path, "questions-abc") is None


def test_ids_and_get_give_back_what_was_added(index: VectorIndex, embedder: Embedder
                                              ) -> None:
    ids, groups = index.ids()
    assert list(ids) == list(range(100, 112)) and list(groups[:4]) == [0, 0, 0, 1]
    found, vectors = index.get(np.array([111, 100, 5], dtype=np.int64))
    assert sorted(found) == [100, 111]
    expected = embedder.embed(TEXTS)[np.asarray(found) - 100]
    # the approximate index stores int8: a quantisation step of 1/127 per coordinate
    assert np.allclose(vectors, expected, atol=0 if index.exact else 0.01)


def test_search_groups_returns_k_groups_with_their_best_items(
    index: VectorIndex, embedder: Embedder
) -> None:
    grouped = search_groups(index, embedder.embed_one("parking"), 2, per_group=2)
    assert len(grouped) == 2 and all(1 <= len(hits) <= 2 for _, hits in grouped)
    assert all((item - 100) // 3 == group for group, hits in grouped for item, _ in hits)
