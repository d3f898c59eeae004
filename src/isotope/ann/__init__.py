"""Vector indexes: the vectors of one kind of item (questions, atoms or chunks), each with
an integer id and the id of its group (its chunk), searched by inner product (cosine, the
vectors being unit length). A store composes one per kind and stays the source of truth:
an index can always be rebuilt from the store's rows.

The contract is small (:class:`VectorIndex`): ``add``, ``remove``, ``search`` (top k,
optionally only among allowed groups), ``save``/``load`` (files named by a tag the store
chooses), ``get`` (the stored vectors of some ids) and ``ids`` (every id with its group,
for checking an index against the store). Shared behaviour, such as grouping hits by
chunk, lives once above it (:func:`search_groups`). Two implementations, chosen by name
(:func:`create`): the exact numpy index (:mod:`isotope.ann.exact`, float32) and HNSW
(:mod:`isotope.ann.hnsw`, usearch, int8), approximate, for large indexes.
"""

from __future__ import annotations

import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np
import numpy.typing as npt

from isotope.embedders import Vectors
from isotope.errors import StoreError

Ids = npt.NDArray[np.int64]


class VectorIndex(ABC):
    """Vectors by id, each in a group, searched by inner product."""

    name: ClassVar[str] = ""
    suffixes: ClassVar[tuple[str, ...]] = ()
    """The endings, after the tag, of the files :meth:`save` writes."""
    exact: ClassVar[bool] = True
    """Whether :meth:`search` returns the true top k (an approximate index may miss some)."""
    threads: int | None = None
    """Cores an :meth:`add` may use (None: all of them; an index that adds on one core
    ignores it)."""

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
    def ids(self) -> tuple[Ids, Ids]:
        """Every id, sorted, with its group."""

    @abstractmethod
    def get(self, ids: Ids) -> tuple[Ids, Vectors]:
        """The stored vectors (float32) of those of ``ids`` that are present, with their
        ids (an approximate index may store vectors at a lower precision)."""

    @abstractmethod
    def save(self, folder: Path, tag: str) -> None:
        """Write the index into ``folder`` under ``tag`` (raises OSError). Each file is
        written under a temporary name and renamed, so a crash leaves no partial file
        under the tag's name."""

    @classmethod
    @abstractmethod
    def load(cls, folder: Path, tag: str, *, writable: bool = False) -> VectorIndex | None:
        """The index saved under ``tag``, or None if it is missing or damaged. Unless
        ``writable``, it may be mapped from its files rather than read, and must not be
        changed."""

    @classmethod
    def files(cls, folder: Path, tag: str) -> list[Path]:
        """The files :meth:`save` wrote for ``tag`` (those there, by name)."""
        return sorted(p for p in (folder / f"{tag}{end}" for end in cls.suffixes)
                      if p.exists())


def write_file(path: Path, write: Callable[[Path], object]) -> None:
    """Make ``path`` by ``write(temporary)`` on a file beside it, flushed to disk, then
    renamed: a crash leaves no partial file under ``path`` (the temporary one, if any, ends
    in ``.tmp``). A write that fails (a full disk: usearch says only "Failed to
    serialize") is a :class:`StoreError` naming the file, with nothing of it kept."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    try:
        try:
            write(Path(tmp))
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except (OSError, RuntimeError) as exc:
            raise _write_error(path, exc) from exc
    finally:
        Path(tmp).unlink(missing_ok=True)


def _write_error(path: Path, exc: BaseException) -> StoreError:
    import errno
    import shutil

    reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        free = None
    full = getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or (
        free is not None and free < 64 * 1024 * 1024)
    fix = ("the disk is full: free some space, then run `isotope compact`" if full else
           "check that the folder is writable and the disk sound, then run `isotope "
           "compact`")
    return StoreError(f"cannot write {path} ({reason}); nothing of it was kept (the index "
                      f"still works from what it had); {fix}")


def narrow(ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64] | npt.NDArray[np.int32]:
    """Row ids as int32 when they fit (half the bytes on disk; loads widen them again)."""
    if not ids.size or (ids.min() >= 0 and ids.max() < 2**31):
        return ids.astype(np.int32)
    return ids


def write_array(path: Path, array: npt.NDArray[np.generic]) -> None:
    """Save ``array`` as ``.npy`` at ``path`` (never pickled), through :func:`write_file`."""

    def save(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            np.save(fh, array, allow_pickle=False)

    write_file(path, save)


class Searchable(Protocol):
    """What :func:`search_groups` widens: a vector index, or a store's search."""

    def search(self, query: Vectors, k: int, allowed: Ids | None = None
               ) -> list[tuple[int, int, float]]: ...


def search_groups(index: Searchable, query: Vectors, k: int, per_group: int,
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
    from isotope.ann.hnsw import HNSWIndex

    return {ExactIndex.name: ExactIndex, HNSWIndex.name: HNSWIndex}


def dot(vectors: npt.NDArray[Any], query: Vectors) -> npt.NDArray[np.float32]:
    """Each row of ``vectors`` times ``query``, as float32. A plain loop over the rows
    (numpy's ``einsum``), not BLAS: OpenBLAS's matrix-vector product starts its own
    threads on every call, and a process searching from several threads at once (a
    server) then lost most of its throughput to them: 16 threads made 16 hybrid
    searches/s against 88 without, on 2 cores; one thread is no slower this way (1.4 ms
    against 2.7 ms for 20,000 x 384)."""
    scores: npt.NDArray[np.float32] = np.einsum(
        "ij,j->i", vectors, np.asarray(query, dtype=np.float32), dtype=np.float32,
        casting="unsafe")
    return scores


def top_k(scores: npt.NDArray[np.float32], k: int) -> npt.NDArray[np.intp]:
    """Positions of the ``k`` highest finite scores, best first (ties in position order)."""
    k = min(k, len(scores))
    if k <= 0:
        return np.zeros(0, dtype=np.intp)
    top = np.argpartition(-scores, k - 1)[:k]
    top = top[np.argsort(-scores[top], kind="stable")]
    return top[np.isfinite(scores[top])]
