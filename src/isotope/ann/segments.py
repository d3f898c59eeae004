"""Saved vector indexes searched as one: the segments of a kind, oldest first, as an LSM
tree keeps them. Each segment holds the items added while it was the newest, and names
the ids it replaced or removed in older segments (``gone``); an id is read from the newest
segment that holds it and is not hidden there. Segments never change: the store merges
some of them into a new one (:mod:`isotope.stores.sqlite_vectors`), and a search asks
each for its top k of visible items and keeps the best k."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from isotope.ann import Ids, VectorIndex
from isotope.ann.layered import search_visible
from isotope.embedders import Vectors


class SegmentedIndex(VectorIndex):
    name = "segmented"

    def __init__(self, parts: list[tuple[VectorIndex, Ids]]) -> None:
        """``parts``: each segment, oldest first, with the ids it hides in older ones."""
        self.parts = [index for index, _ in parts]
        hidden: list[Ids] = []
        newer: Ids = np.zeros(0, dtype=np.int64)
        for _, gone in reversed(parts):
            hidden.append(newer)
            newer = np.union1d(newer, np.asarray(gone, dtype=np.int64))
        self.hidden = hidden[::-1]
        """Per segment, the ids newer segments hide in it (sorted)."""
        self._hidden_sets = [frozenset(h.tolist()) for h in self.hidden]
        self._ids: tuple[Ids, Ids] | None = None

    @property
    def exact(self) -> bool:  # type: ignore[override]
        return all(part.exact for part in self.parts)

    def visible(self, position: int) -> tuple[Ids, Ids]:
        """The ids (sorted) and groups of segment ``position`` that no newer one hides."""
        ids, groups = self.parts[position].ids()
        if not len(self.hidden[position]):
            return ids, groups
        keep = ~np.isin(ids, self.hidden[position])
        return ids[keep], groups[keep]

    def __len__(self) -> int:
        return len(self.ids()[0])

    def ids(self) -> tuple[Ids, Ids]:
        if self._ids is None:
            parts = [self.visible(i) for i in range(len(self.parts))]
            every = np.concatenate([p[0] for p in parts] or [np.zeros(0, np.int64)])
            groups = np.concatenate([p[1] for p in parts] or [np.zeros(0, np.int64)])
            order = np.argsort(every, kind="stable")
            self._ids = every[order].astype(np.int64), groups[order].astype(np.int64)
        return self._ids

    def search(self, query: Vectors, k: int, allowed: Ids | None = None
               ) -> list[tuple[int, int, float]]:
        if k <= 0:
            return []
        found: list[tuple[int, int, float]] = []
        for part, hidden in zip(self.parts, self._hidden_sets, strict=True):
            if len(part):
                found += search_visible(part, hidden, query, k, allowed)
        found.sort(key=lambda hit: -hit[2])
        return found[:k]

    def get(self, ids: Ids) -> tuple[Ids, Vectors]:
        wanted = np.asarray(ids, dtype=np.int64)
        found_ids: list[Ids] = []
        found_vectors: list[Vectors] = []
        for part, hidden in zip(reversed(self.parts), reversed(self.hidden), strict=True):
            ask = wanted[~np.isin(wanted, hidden)] if len(hidden) else wanted
            if not len(ask):
                continue
            got, vectors = part.get(ask)
            if len(got):
                found_ids.append(got)
                found_vectors.append(vectors)
                wanted = wanted[~np.isin(wanted, got)]
        if not found_ids:
            return wanted[:0], np.zeros((0, 0), dtype=np.float32)
        return np.concatenate(found_ids), np.vstack(found_vectors)

    def add(self, ids: Ids, groups: Ids, vectors: Vectors) -> None:
        raise RuntimeError("segments never change: the store folds changes into a new one")

    def remove(self, ids: Ids) -> None:
        raise RuntimeError("segments never change: the store folds changes into a new one")

    def save(self, folder: Path, tag: str) -> None:
        raise NotImplementedError("each segment is saved on its own")

    @classmethod
    def load(cls, folder: Path, tag: str, *, writable: bool = False) -> SegmentedIndex | None:
        raise NotImplementedError("load each segment and join them")


__all__ = ["SegmentedIndex"]
