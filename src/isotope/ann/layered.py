"""A saved vector index with the changes made since it was saved: the base is never
changed in place (it may be mapped from its files and shared by processes); items added
since live in a small exact index, and items removed or replaced since are hidden from the
base's results. Compaction (the store's) folds the changes into a new base."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from isotope.ann import Ids, VectorIndex
from isotope.ann.exact import ExactIndex
from isotope.embedders import Vectors


def search_visible(index: VectorIndex, hidden: set[int] | frozenset[int], query: Vectors,
                   k: int, allowed: Ids | None = None) -> list[tuple[int, int, float]]:
    """The top ``k`` of ``index`` leaving out the ids in ``hidden``: asks for more than k
    when some of its items are hidden, widening until k visible ones are found or the
    index has no more."""
    if not hidden:
        return index.search(query, k, allowed)
    want = k + min(len(hidden), 4 * k)
    while True:
        hits = index.search(query, want, allowed)
        visible = [h for h in hits if h[0] not in hidden]
        if len(visible) >= k or len(hits) < want or want >= len(index):
            return visible[:k]
        want *= 4


class LayeredIndex(VectorIndex):
    name = "layered"

    def __init__(self, base: VectorIndex | None = None) -> None:
        self.base = base
        self.delta = ExactIndex()
        self._hidden: set[int] = set()
        """Base ids removed or replaced since the base was saved."""
        self._hidden_array: Ids | None = None
        self._base_top: int | None = None
        """The base's largest id (an id above it is new: nothing of the base to hide)."""

    @property
    def exact(self) -> bool:  # type: ignore[override]
        return self.base is None or self.base.exact

    def copy(self) -> LayeredIndex:
        """The same base and changes, to change without touching this one (its arrays are
        never changed in place: every change makes new ones)."""
        made = LayeredIndex(self.base)
        made.delta = ExactIndex(self.delta.item_ids, self.delta.item_groups,
                                self.delta.vectors)
        made._hidden = set(self._hidden)
        made._base_top = self._base_top
        return made

    def __len__(self) -> int:
        base = len(self.base) if self.base is not None else 0
        return base - self._hidden_in_base() + len(self.delta)

    def _hidden_in_base(self) -> int:
        if self.base is None or not self._hidden:
            return 0
        return int(np.isin(self.base.ids()[0], self._hidden_ids()).sum())

    def _hidden_ids(self) -> Ids:
        if self._hidden_array is None:
            self._hidden_array = np.fromiter(self._hidden, dtype=np.int64,
                                             count=len(self._hidden))
        return self._hidden_array

    def add(self, ids: Ids, groups: Ids, vectors: Vectors) -> None:
        if not len(ids):
            return
        ids = np.asarray(ids, np.int64)
        self.delta.add(ids, np.asarray(groups, np.int64), vectors)
        self._hide(ids)

    def _top(self) -> int:
        if self._base_top is None:
            ids = self.base.ids()[0] if self.base is not None else np.empty(0, np.int64)
            self._base_top = int(ids.max()) if len(ids) else -1
        return self._base_top

    def remove(self, ids: Ids) -> None:
        self.delta.remove(np.asarray(ids, np.int64))
        self._hide(ids)

    def _hide(self, ids: Ids) -> None:
        """Hide the base's items among ``ids``: an id above the base's largest is new,
        nothing of the base (a hidden id makes every search ask the base for more: items
        added one by one, learned questions, would slow every search until the next
        compaction)."""
        if self.base is not None:
            ids = np.asarray(ids, np.int64)
            self._hidden.update(int(i) for i in ids[ids <= self._top()])
            self._hidden_array = None

    def search(self, query: Vectors, k: int, allowed: Ids | None = None
               ) -> list[tuple[int, int, float]]:
        if k <= 0:
            return []
        found = self.delta.search(query, k, allowed)
        if self.base is not None and len(self.base):
            visible = search_visible(self.base, self._hidden, query, k, allowed)
            found = sorted(found + visible, key=lambda hit: -hit[2])
        return found[:k]

    def ids(self) -> tuple[Ids, Ids]:
        parts_ids, parts_groups = [], []
        if self.base is not None:
            ids, groups = self.base.ids()
            keep = ~np.isin(ids, self._hidden_ids()) if self._hidden else slice(None)
            parts_ids.append(ids[keep])
            parts_groups.append(groups[keep])
        ids, groups = self.delta.ids()
        parts_ids.append(ids)
        parts_groups.append(groups)
        every = np.concatenate(parts_ids).astype(np.int64)
        order = np.argsort(every, kind="stable")
        return every[order], np.concatenate(parts_groups).astype(np.int64)[order]

    def get(self, ids: Ids) -> tuple[Ids, Vectors]:
        ids = np.asarray(ids, dtype=np.int64)
        found, vectors = self.delta.get(ids)
        if self.base is None:
            return found, vectors
        rest = ids[~np.isin(ids, found) & ~np.isin(ids, self._hidden_ids())]
        more, more_vectors = self.base.get(rest)
        if not len(more):
            return found, vectors
        if not len(found):
            return more, more_vectors
        return np.concatenate([found, more]), np.vstack([vectors, more_vectors])

    def save(self, folder: Path, tag: str) -> None:
        raise NotImplementedError("a layered index is compacted into a new base, not saved")

    @classmethod
    def load(cls, folder: Path, tag: str, *, writable: bool = False) -> LayeredIndex | None:
        raise NotImplementedError("load its base and wrap it")
