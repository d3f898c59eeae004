"""The approximate vector index for large indexes: an HNSW graph (usearch) over int8
vectors, a quarter of float32's size. A saved index is mapped from its file, not read, so a
new process searches at once; it is never changed in place (a changed one is saved under a
new tag).

The int8 vectors are quantized here, not by usearch: usearch scales a unit vector's
components by 127, which leaves the 3 to 5 bits the small components of a 384-d embedding
need (recall@10 of exact int8 search against float32 was 0.91 on the scale benchmark);
scaled by the index's own factor (127 over the 99.9th percentile of the components seen
first), exact int8 search keeps 0.98 of float32's top 10. Cosine is computed on the int8
vectors, so the factor cancels out.

Filtered search never silently returns fewer than ``k`` results when ``k`` match: when the
allowed groups hold few items, they are scored exactly; otherwise the graph is searched
for more candidates than ``k`` (in proportion to the share allowed), widened until ``k``
allowed ones are found, and scored exactly when widening stops paying. usearch cannot test
a condition while it walks the graph, and a walk's far candidates are not the allowed
set's nearest, so a saved index scores up to ``MAPPED_EXACT_LIMIT`` allowed items exactly
too: their rows are copied straight from the saved file's vector matrix (see
:func:`_saved_vectors`) and scored by usearch's SIMD kernels.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from isotope.ann import Ids, VectorIndex, dot, narrow, top_k, write_array, write_file
from isotope.embedders import Vectors

CONNECTIVITY = 16
EXPANSION_ADD = 48
EXPANSION_SEARCH = 768
"""Measured on the scale benchmark (2 cores), recall@10 against exact float32 search for
a query about a stored fact. At 100,000 questions: searching with 128 finds 0.955 in
0.5 ms, 256 0.968 in 0.95 ms, 512 0.976 in 1.6 ms, 1,024 0.981 in 2.8 ms (int8 itself
keeps 0.98). At 962,000: 384 finds 0.943 in 2.4 ms, 512 0.952 in 3.1 ms, 768 0.955 in
4.5 ms (the graph alone). Through the whole search (grouping by chunk, fetching rows), on
an index built from scratch at 962,000 (2026-11-26): 512 gave recall@10 0.942 and
questions-dense 3.1 ms p50, 768 gave 0.951 and 4.96 ms, the only one meeting both the
0.95 and the 5 ms targets (at their edges). Adding with expansion 48 builds about 8,000
vectors/s (32: 12,000/s and a point or two less recall; 128: 4,900/s). Connectivity 24
found little more for half the build rate and 12% more bytes."""
EXACT_LIMIT = 20_000
"""A filtered search whose allowed groups hold at most this many items scores them all."""
MAPPED_EXACT_LIMIT = 250_000
"""... and at most this many when the index was loaded from a file whose vectors can be
read in place: 96,000 of 962,000 questions (a principal who may see 10%) are copied in
8 ms and scored in 8 ms, where the graph walk for a hybrid search's pool (600 items, so
12,000 candidates at a 10% share) took longer and found 0.91 of the allowed top 10."""
COPIES_BYTES = 128 * 2**20
"""The most bytes of copied rows an index keeps for the next search among the same
groups."""


def _usearch() -> Any:
    from isotope.errors import IsotopeError

    try:
        from usearch.index import Index
    except ImportError as exc:  # a dependency of isotope: a broken installation
        raise IsotopeError(f"the HNSW vector index needs usearch, which failed to import "
                           f"({exc}); reinstall it: pip install --force-reinstall "
                           "'usearch>=2.26,<3'") from exc
    return Index


class HNSWIndex(VectorIndex):
    name = "hnsw"
    suffixes = (".ids.npy", ".scale.json", ".usearch")
    exact = False

    def __init__(self, dim: int = 0) -> None:
        self._graph: Any = None
        self._dim = dim
        self._ids: Ids = np.zeros(0, dtype=np.int64)  # sorted
        self._groups: Ids = np.zeros(0, dtype=np.int64)  # of each id
        self._by_group: tuple[Ids, Ids] | None = None  # (groups sorted, their positions)
        self._mapped = False
        self._scale = 0.0
        """int8 = round(component * scale), fixed by the first vectors added."""
        self._file: Path | None = None  # the file a mapped index was loaded from
        self._saved: tuple[np.ndarray, Ids] | None = None
        """(the file's vector matrix, the row of each id in ``_ids``) where it can be
        read in place; looked for at the first search that needs it."""
        self._saved_looked = False
        self._copies: OrderedDict[bytes, tuple[Ids, np.ndarray]] = OrderedDict()
        self._copies_lock = threading.Lock()

    def _quantize(self, vectors: Vectors) -> np.ndarray:
        vectors = np.asarray(vectors, dtype=np.float32)
        if not self._scale:
            top = float(np.percentile(np.abs(vectors), 99.9)) if vectors.size else 0.0
            self._scale = round(127.0 / top, 3) if top > 0 else 127.0
        quantized: np.ndarray = np.clip(np.rint(vectors * self._scale), -127, 127).astype(
            np.int8)
        return quantized

    def _new_graph(self, dim: int) -> Any:
        return _usearch()(ndim=dim, metric="cos", dtype="i8", connectivity=CONNECTIVITY,
                          expansion_add=EXPANSION_ADD, expansion_search=EXPANSION_SEARCH)

    def __len__(self) -> int:
        return len(self._ids)

    # -- changes -----------------------------------------------------------------------
    def add(self, ids: Ids, groups: Ids, vectors: Vectors) -> None:
        if not len(ids):
            return
        if self._mapped:
            raise RuntimeError("a mapped HNSW index cannot change; load it writable")
        self.remove(ids)
        dim = np.asarray(vectors).shape[1]
        if self._graph is None or (not len(self._ids) and dim != self._dim):
            self._dim = dim  # (an empty index saved without vectors has no dimension)
            self._graph = self._new_graph(dim)
        self._graph.add(np.asarray(ids, dtype=np.uint64), self._quantize(vectors),
                        threads=self.threads or os.cpu_count() or 1)
        ids = np.asarray(ids, dtype=np.int64)
        order = np.argsort(np.concatenate([self._ids, ids]), kind="stable")
        self._ids = np.concatenate([self._ids, ids])[order]
        self._groups = np.concatenate([self._groups, np.asarray(groups, np.int64)])[order]
        self._by_group = None

    def remove(self, ids: Ids) -> None:
        present = np.isin(self._ids, ids)
        if not present.any():
            return
        if self._mapped:
            raise RuntimeError("a mapped HNSW index cannot change; load it writable")
        self._graph.remove(self._ids[present].astype(np.uint64), compact=True)
        self._ids, self._groups = self._ids[~present], self._groups[~present]
        self._by_group = None

    # -- reads -------------------------------------------------------------------------
    def ids(self) -> tuple[Ids, Ids]:
        return self._ids, self._groups

    def _groups_of(self, ids: Ids) -> Ids:
        where = np.searchsorted(self._ids, ids)
        return self._groups[np.minimum(where, len(self._ids) - 1)]

    def get(self, ids: Ids) -> tuple[Ids, Vectors]:
        ids, found, norms = self._stored(ids)
        unit = (found / norms[:, None]).astype(np.float32)
        return ids, unit  # unit length, as embedded

    def _stored(self, ids: Ids) -> tuple[Ids, Vectors, Vectors]:
        """The ids held among ``ids``, their stored vectors (as quantized, not unit
        length) and those vectors' lengths (1 where 0)."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(self._ids):  # (sorted: a search per id, not a sort of every id held)
            at = np.minimum(np.searchsorted(self._ids, ids), len(self._ids) - 1)
            ids = ids[self._ids[at] == ids]
        else:
            ids = ids[:0]
        if not len(ids):
            return ids, np.zeros((0, self._dim), dtype=np.float32), np.zeros(0, np.float32)
        found = np.asarray(self._graph.get(ids.astype(np.uint64)), dtype=np.float32
                           ).reshape(len(ids), -1)
        norms = np.sqrt(np.einsum("ij,ij->i", found, found))
        return ids, found, np.where(norms > 0, norms, 1).astype(np.float32)

    def search(self, query: Vectors, k: int, allowed: Ids | None = None
               ) -> list[tuple[int, int, float]]:
        if not len(self._ids) or k <= 0:
            return []
        query = np.asarray(query, dtype=np.float32)
        if allowed is None:
            return self._graph_search(query, min(k, len(self._ids)))
        allowed = np.asarray(allowed, dtype=np.int64)
        at = self._items_of(allowed)  # (positions in ``_ids``)
        limit = MAPPED_EXACT_LIMIT if self._saved_rows() is not None else EXACT_LIMIT
        if len(at) <= max(limit, 4 * k):
            return self._exact(query, k, at, allowed)
        wanted = set(allowed.tolist())
        count = min(len(self._ids), math.ceil(2 * k * len(self._ids) / len(at)))
        while True:
            found = [hit for hit in self._graph_search(query, count) if hit[1] in wanted]
            if len(found) >= k:
                return found[:k]
            if count >= len(self._ids) or count > 8 * EXACT_LIMIT:
                return self._exact(query, k, at, allowed)
            count = min(len(self._ids), count * 4)

    def _graph_search(self, query: Vectors, count: int) -> list[tuple[int, int, float]]:
        found = self._graph.search(self._quantize(query), count, threads=1)
        keys = np.asarray(found.keys, dtype=np.int64)
        scores = 1.0 - np.asarray(found.distances, dtype=np.float32)
        groups = self._groups_of(keys)
        return [(int(i), int(g), float(s)) for i, g, s in zip(keys, groups, scores,
                                                              strict=True)]

    def _items_of(self, groups: Ids) -> Ids:
        """The positions in ``_ids`` of the items in ``groups``, group by group."""
        if self._by_group is None:
            order = np.argsort(self._groups, kind="stable")
            self._by_group = (self._groups[order], order)
        by_group, positions = self._by_group
        start = np.searchsorted(by_group, groups, side="left")
        sizes = np.searchsorted(by_group, groups, side="right") - start
        start, sizes = start[sizes > 0], sizes[sizes > 0]
        if not len(sizes):
            return np.zeros(0, dtype=np.int64)
        # each range start..start+size, end to end, without a Python loop
        steps = np.ones(int(sizes.sum()), dtype=np.int64)
        ends = np.cumsum(sizes)
        steps[0] = start[0]
        steps[ends[:-1]] = start[1:] - (start[:-1] + sizes[:-1] - 1)
        return positions[np.cumsum(steps)]

    def _exact(self, query: Vectors, k: int, at: Ids, allowed: Ids
               ) -> list[tuple[int, int, float]]:
        """The top ``k`` of the items at positions ``at`` (those of the groups
        ``allowed``) by their stored vectors."""
        saved = self._saved_rows()
        if saved is not None:
            return self._exact_saved(query, k, at, allowed, *saved)
        best: list[tuple[int, int, float]] = []
        unit = query / max(float(np.linalg.norm(query)), 1e-12)
        candidates = self._ids[at]
        for start in range(0, len(candidates), 65_536):  # (in slices)
            ids, vectors, norms = self._stored(candidates[start : start + 65_536])
            if not len(ids):
                continue
            scores = dot(vectors, unit) / norms  # (the cosine, without unit copies)
            groups = self._groups_of(ids)
            best += [(int(ids[i]), int(groups[i]), float(scores[i]))
                     for i in top_k(scores.astype(np.float32), k)]
        best.sort(key=lambda hit: -hit[2])
        return best[:k]

    def _exact_saved(self, query: Vectors, k: int, at: Ids, allowed: Ids,
                     matrix: np.ndarray, rows: Ids) -> list[tuple[int, int, float]]:
        """:meth:`_exact` on the saved file's rows, scored with the graph's own int8
        cosine. The rows are copied in file order (its pages are read once, in order),
        and the copy is kept for the next search among the same groups (a principal's
        next query), up to ``COPIES_BYTES`` of copies an index."""
        if not len(at):
            return []
        key = hashlib.blake2b(allowed.tobytes(), digest_size=16).digest()
        with self._copies_lock:
            kept = self._copies.get(key)
            if kept is not None:
                self._copies.move_to_end(key)
        if kept is None or len(kept[0]) != len(at):
            order = np.argsort(rows[at], kind="stable")
            kept = (at[order], matrix[rows[at[order]]])
            with self._copies_lock:
                self._copies[key] = kept
                while sum(c.nbytes for _, c in self._copies.values()) > COPIES_BYTES:
                    self._copies.popitem(last=False)
        positions, copy = kept
        found = _usearch_search()(copy, self._quantize(np.ravel(query)), min(k, len(copy)),
                                  "cos", exact=True, threads=1)
        picked = positions[np.asarray(found.keys, dtype=np.int64)]
        scores = 1.0 - np.asarray(found.distances, dtype=np.float32)
        return [(int(i), int(g), float(s)) for i, g, s in zip(
            self._ids[picked], self._groups[picked], scores, strict=True)]

    def _saved_rows(self) -> tuple[np.ndarray, Ids] | None:
        """The saved file's vector matrix and the row of each id, when the index is the
        file's (mapped, unchanged) and the file reads as expected."""
        if not self._saved_looked:
            found = _saved_vectors(self._file) if self._mapped and self._file else None
            rows = None
            if found is not None:
                matrix, keys = found
                order = np.argsort(keys, kind="stable")
                at = np.minimum(np.searchsorted(keys[order], self._ids.astype(np.uint64)),
                                len(keys) - 1)
                rows = order[at]
                if (len(matrix) != len(keys) or matrix.shape[1] != self._dim
                        or not np.array_equal(keys[rows], self._ids.astype(np.uint64))
                        or not self._rows_agree(matrix, rows)):
                    rows = None
            self._saved = (found[0], rows) if found is not None and rows is not None else None
            self._saved_looked = True
        return self._saved

    def _rows_agree(self, matrix: np.ndarray, rows: Ids) -> bool:
        """Whether the file's rows hold what the graph holds, for a sample of ids."""
        if not len(self._ids):
            return True
        sample = np.unique(np.linspace(0, len(self._ids) - 1, 64).astype(np.int64))
        held = np.asarray(self._graph.get(self._ids[sample].astype(np.uint64)),
                          dtype=np.int8).reshape(len(sample), -1)
        return bool(np.array_equal(held, matrix[rows[sample]]))

    # -- files -------------------------------------------------------------------------
    def save(self, folder: Path, tag: str) -> None:
        folder.mkdir(exist_ok=True)
        graph = self._graph if self._graph is not None else self._new_graph(self._dim or 1)
        write_file(folder / f"{tag}.usearch", lambda tmp: graph.save(str(tmp)))
        write_array(folder / f"{tag}.ids.npy", narrow(np.vstack([self._ids, self._groups])))
        settings = json.dumps({"scale": self._scale, "dim": self._dim})
        write_file(folder / f"{tag}.scale.json", lambda tmp: tmp.write_text(settings))

    @classmethod
    def load(cls, folder: Path, tag: str, *, writable: bool = False) -> HNSWIndex | None:
        Index = _usearch()
        path = folder / f"{tag}.usearch"
        try:
            table = np.load(folder / f"{tag}.ids.npy")
            meta = Index.metadata(str(path))
            scale = float(json.loads((folder / f"{tag}.scale.json").read_text())["scale"])
        except Exception:  # missing, or any damage
            return None
        if (not meta or table.ndim != 2 or table.shape[0] != 2
                or meta.get("count_present") != table.shape[1]
                or str(meta.get("kind_scalar")).split(".")[-1].lower() != "i8"
                or path.stat().st_size < table.shape[1] * meta.get("dimensions", 0)):
            return None
        index = cls(int(meta.get("dimensions", 0)))
        try:
            index._graph = Index.restore(str(path), view=not writable)
        except Exception:
            return None
        if index._graph is not None:  # search settings are not saved with the graph
            index._graph.expansion_search = EXPANSION_SEARCH
            index._graph.expansion_add = EXPANSION_ADD
        if index._graph is None or len(index._graph) != table.shape[1]:
            return None
        index._ids, index._groups = table[0].astype(np.int64), table[1].astype(np.int64)
        index._mapped = not writable
        index._file = path
        index._scale = scale
        return index


def _saved_vectors(path: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """The int8 vector matrix of a saved usearch file, mapped in place, and the key of
    each of its rows (``2**64 - 1`` for a removed one); None when the file does not read
    as the layout below (usearch 2's dense index), so a caller falls back to
    ``Index.get``. The layout: the matrix (rows and bytes per row as two uint32, then the
    rows in slot order), a 64-byte head starting ``usearch``, the graph's head (size,
    connectivity, base connectivity, top level, entry slot: five uint64), each node's
    level (int16), then the nodes in slot order, each its key (uint64), its level (int16)
    and its neighbour lists (a uint32 count and that many uint32 slots, base
    connectivity on level 0 and connectivity on each level above)."""
    try:
        raw = np.memmap(path, dtype=np.uint8, mode="r")
        rows, width = (int(x) for x in raw[:8].view(np.uint32))
        head = 8 + rows * width
        if raw[head : head + 7].tobytes() != b"usearch":
            return None
        graph = head + 64
        size, links, base_links, _, _ = (int(x) for x in raw[graph : graph + 40].view(np.uint64))
        if size != rows:
            return None
        levels = raw[graph + 40 : graph + 40 + 2 * size].view(np.int16).astype(np.int64)
        sizes = 8 + 2 + 4 + 4 * base_links + levels * (4 + 4 * links)
        starts = graph + 40 + 2 * size + np.concatenate([[0], np.cumsum(sizes)[:-1]])
        if size and starts[-1] + sizes[-1] != len(raw):
            return None
        keys = np.concatenate([  # (in slices: the byte positions take 64 bytes a key)
            np.ascontiguousarray(raw[part[:, None] + np.arange(8)]).view(np.uint64)
            for part in np.array_split(starts, max(1, size // 65_536))]).reshape(-1)
        matrix = raw[8:head].reshape(rows, width).view(np.int8)
        return matrix, keys
    except (OSError, ValueError, IndexError):
        return None


def _usearch_search() -> Any:
    from usearch.index import search

    return search


__all__ = ["HNSWIndex"]
