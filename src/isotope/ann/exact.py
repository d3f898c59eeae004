"""The exact vector index: every vector in one contiguous float32 matrix, scored with one
matrix product. The baseline every approximate index must beat (RESEARCH.md: 200k x 384-d
in 17.5 ms p50 on this machine). Saved as two ``.npy`` files (never pickle) and loaded
memory-mapped, so a new process starts without reading every vector into memory."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from isotope.ann import Ids, VectorIndex, dot, narrow, top_k, write_array
from isotope.embedders import Vectors


class ExactIndex(VectorIndex):
    name = "exact"
    suffixes = (".idx.npy", ".npy")
    exact = True

    def __init__(self, ids: Ids | None = None, groups: Ids | None = None,
                 vectors: Vectors | None = None) -> None:
        self.item_ids: Ids = ids if ids is not None else np.zeros(0, dtype=np.int64)
        self.item_groups: Ids = groups if groups is not None else np.zeros(0, dtype=np.int64)
        self.vectors: Vectors = (vectors if vectors is not None
                                 else np.zeros((0, 0), dtype=np.float32))

    def __len__(self) -> int:
        return len(self.item_ids)

    def add(self, ids: Ids, groups: Ids, vectors: Vectors) -> None:
        if not len(ids):
            return
        self.remove(ids)
        vectors = np.asarray(vectors, dtype=np.float32)
        self.item_ids = np.concatenate([self.item_ids, ids]).astype(np.int64)
        self.item_groups = np.concatenate([self.item_groups, groups]).astype(np.int64)
        self.vectors = vectors if not len(self.vectors) else np.vstack([self.vectors, vectors])

    def remove(self, ids: Ids) -> None:
        keep = ~np.isin(self.item_ids, ids)
        if not keep.all():
            self.item_ids, self.item_groups = self.item_ids[keep], self.item_groups[keep]
            self.vectors = np.asarray(self.vectors)[keep]

    def search(self, query: Vectors, k: int, allowed: Ids | None = None
               ) -> list[tuple[int, int, float]]:
        if not len(self.item_ids) or k <= 0:
            return []
        scores = dot(self.vectors, query)
        if allowed is not None:
            scores = np.where(np.isin(self.item_groups, allowed), scores, -np.inf).astype(
                np.float32)
        return [(int(self.item_ids[i]), int(self.item_groups[i]), float(scores[i]))
                for i in top_k(scores, k)]

    def ids(self) -> tuple[Ids, Ids]:
        order = np.argsort(self.item_ids, kind="stable")
        return self.item_ids[order], self.item_groups[order]

    def get(self, ids: Ids) -> tuple[Ids, Vectors]:
        present = np.isin(self.item_ids, ids)
        return self.item_ids[present], np.asarray(self.vectors[present], dtype=np.float32)

    def save(self, folder: Path, tag: str) -> None:
        folder.mkdir(exist_ok=True)
        write_array(folder / f"{tag}.idx.npy", narrow(np.vstack([self.item_ids, self.item_groups])))
        write_array(folder / f"{tag}.npy", np.asarray(self.vectors))

    @classmethod
    def load(cls, folder: Path, tag: str, *, writable: bool = False) -> ExactIndex | None:
        try:
            index = np.load(folder / f"{tag}.idx.npy")
            vectors = np.load(folder / f"{tag}.npy", mmap_mode="r")
        except Exception:  # missing, or any damage (a 0-byte file raises EOFError)
            return None
        if vectors.ndim != 2 or index.ndim != 2 or index.shape != (2, len(vectors)):
            return None
        return cls(index[0].astype(np.int64), index[1].astype(np.int64), vectors)
