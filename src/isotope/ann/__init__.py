"""Vector indexes: the vectors of one kind of item (questions, atoms or chunks), each with
an integer id and the id of its group (its chunk), searched by inner product (cosine, the
vectors being unit length). A store composes one per kind and stays the source of truth:
an index can always be rebuilt from the store's rows.

The contract is small (:class:`VectorIndex`): ``add``, ``remove``, ``search`` (top k,
optionally only among allowed groups), ``save``/``load`` (files named by a tag the store
chooses, such as its state id), ``items`` (for checking an index against the store).
Shared behaviour, such as grouping hits by chunk, lives once above it
(:func:`search_groups`). The exact numpy index (:mod:`isotope.ann.exact`) is the first
implementation; approximate ones are chosen by name (:func:`create`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from isotope.embedders import Vectors

Ids = npt.NDArray[np.int64]


class VectorIndex(ABC):
    """Vectors by id, each in a group, searched by inner product."""

    name: ClassVar[str] = ""
    exact: ClassVar[bool] = True
    """Whether :meth:`search` returns the true top k (an approximate index may miss some)."""

    @abstractmethod
    def add(self, ids: Ids, groups: Ids, vectors: Vectors) -> None:
        """Add items (an id already there is replaced)."""

    @abstractmethod
    def remove(self, ids: Ids) -> None:
        """Remove items by id (unknown ids are ignored)."""

    @abstractmethod
    def search(self, query: Vectors, k: int, allowed: Ids | None = None
               ) -> list[tuple[int, int, float]]:
        """Up to ``k`` items nearest to ``query`` as ``(id, group, score)``, best first;
        with ``allowed``, only items whose group is in it."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def items(self, positions: Sequence[int] | npt.NDArray[np.intp]
              ) -> tuple[Ids, Ids, Vectors]:
        """Ids, groups and vectors of the items at ``positions`` (0 to ``len - 1``), to
        check an index against the store it was built from."""

    @abstractmethod
    def save(self, folder: Path, tag: str) -> None:
        """Write the index into ``folder`` under ``tag``, atomically (raises OSError)."""

    @classmethod
    @abstractmethod
    def load(cls, folder: Path, tag: str) -> VectorIndex | None:
        """The index saved under ``tag``, or None if it is missing or damaged."""

    @classmethod
    def files(cls, folder: Path, tag: str) -> list[Path]:
        """The files :meth:`save` writes for ``tag``."""
        return sorted(folder.glob(f"{tag}.*"))


def search_groups(index: VectorIndex, query: Vectors, k: int, per_group: int,
                  allowed: Ids | None = None) -> list[tuple[int, list[tuple[int, float]]]]:
    """The ``k`` groups whose items are nearest to ``query``, best first, each with its up
    to ``per_group`` best ``(id, score)``: a search widened until ``k`` groups are found
    or every item was seen."""
    pool = max(64, 4 * k * per_group)
    while True:
        found = index.search(query, pool, allowed)
        picked: dict[int, list[tuple[int, float]]] = {}
        for item, group, score in found:
            hits = picked.get(group)
            if hits is None:
                if len(picked) < k:
                    picked[group] = [(item, score)]
            elif len(hits) < per_group:
                hits.append((item, score))
        if len(picked) >= k or len(found) < pool:
            return list(picked.items())
        pool *= 4


def create(name: str = "exact") -> VectorIndex:
    """An empty vector index of the implementation named ``name``."""
    return kinds()[name]()


def kinds() -> dict[str, type[VectorIndex]]:
    """The vector index implementations by name."""
    from isotope.ann.exact import ExactIndex

    return {ExactIndex.name: ExactIndex}
