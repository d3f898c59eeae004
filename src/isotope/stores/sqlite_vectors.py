"""The embedded store's vector indexes, one per kind, and their cache on disk.

SQLite holds every vector; a kind's vectors are loaded into one exact index
(:class:`isotope.ann.exact.ExactIndex`), cached in ``vectors/`` beside the database in
files named by the index's state id: a random id that every write replaces, so a cache
file can only ever describe the one database state it was built from. A cache file is
spot-checked against the table when loaded and compared row by row by ``check``; a stale,
missing or wrong cache is rebuilt from SQLite."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import tempfile
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from isotope.ann.exact import ExactIndex
from isotope.stores import Kind
from isotope.stores.sqlite_sql import CHUNK_ROWID

log = logging.getLogger(__name__)


class VectorCache:
    """Each kind's vector index as of the database's current state: from memory, from
    ``vectors/``, or built from the tables."""

    def __init__(self, folder: Path, conn: Callable[[], sqlite3.Connection],
                 snapshot: Callable[[], AbstractContextManager[None]],
                 meta: Callable[[str], Any]) -> None:
        self.folder = folder
        self._conn, self._snapshot, self._meta = conn, snapshot, meta
        self._loaded: dict[Kind, tuple[str | None, ExactIndex]] = {}
        """Each kind's vector index with the state it is of."""

    def clear(self) -> None:
        """Forget every index, in memory and on disk (rebuilt when next needed)."""
        for path in self.folder.glob("*"):
            path.unlink(missing_ok=True)
        self._loaded.clear()

    def index(self, kind: Kind) -> ExactIndex:
        """The vector index of ``kind`` as of the index's current state: from memory,
        from ``vectors/`` (files named by state id, spot-checked against the table), or
        built from SQLite."""
        state = self._meta("state")
        cached = self._loaded.get(kind)
        if cached and state is not None and cached[0] == state:
            return cached[1]
        loaded = self._load_index(kind, state)
        if loaded is not None:
            self._loaded[kind] = (state, loaded)
            return loaded
        state, built = self._build_index(kind)
        if state is not None:
            self._save_index(kind, state, built)
        self._loaded[kind] = (state, built)
        return built

    def _build_index(self, kind: Kind) -> tuple[str | None, ExactIndex]:
        """Every sound vector of ``kind`` from the table, with the state it is of."""
        conn = self._conn()
        with self._snapshot():
            state = self._meta("state")
            data = conn.execute(f"SELECT t.rowid, {CHUNK_ROWID[kind]}, t.vector FROM {kind} t "
                                "ORDER BY t.rowid").fetchall()
        size = self._vector_bytes(data)
        sound = [r for r in data if len(r[2]) == size and r[1] is not None]
        if len(sound) < len(data):  # `check` names their sources, `repair` redoes them
            log.warning("%d %s of the index at %s are damaged (a vector of the wrong size, "
                        "or no chunk) and left out of search; run `isotope check`",
                        len(data) - len(sound), kind, self.folder.parent)
        index = ExactIndex()
        if sound:
            index.add(np.fromiter((r[0] for r in sound), dtype=np.int64, count=len(sound)),
                      np.fromiter((r[1] for r in sound), dtype=np.int64, count=len(sound)),
                      np.frombuffer(b"".join(r[2] for r in sound),
                                    dtype=np.float32).reshape(len(sound), -1))
        return state, index

    def _vector_bytes(self, data: Sequence[Sequence[Any]]) -> int:
        """The size of a sound vector: the index's dimension, else the commonest size."""
        dim = (self._meta("embedding") or {}).get("dim")
        if dim:
            return 4 * int(dim)
        sizes = [len(r[2]) for r in data]
        return max(set(sizes), key=sizes.count) if sizes else 0

    def _stamp(self, kind: Kind) -> str | None:
        """The state the saved vector index of ``kind`` is of (None: none saved, or its
        stamp is unreadable)."""
        try:
            stamp = json.loads((self.folder / f"{kind}.json").read_text())
            return str(stamp["state"])
        except Exception:
            return None

    def _saved_index(self, kind: Kind, state: str | None) -> ExactIndex | None:
        """The saved index of ``state``, if its stamp and files are there and readable."""
        if state is None or self._stamp(kind) != state:
            return None
        return ExactIndex.load(self.folder, f"{kind}-{state}")

    def _load_index(self, kind: Kind, state: str | None) -> ExactIndex | None:
        """The saved index of ``state`` if it agrees with the table on a sample of rows."""
        found = self._saved_index(kind, state)
        if found is None:
            return None
        rng = np.random.default_rng()
        sample = rng.choice(len(found), size=min(8, len(found)), replace=False)
        if self._differences(kind, found, sample):
            log.warning("the vector cache of %s in %s does not match the index; rebuilding it",
                        kind, self.folder)
            return None
        return found

    def _differences(self, kind: Kind, found: ExactIndex,
                     positions: Sequence[int] | npt.NDArray[np.intp]) -> list[int]:
        """SQLite rowids among ``positions`` of a vector index whose vector or chunk there
        differs from the table's."""
        if not len(positions):
            return []
        ids, groups, vectors = found.items(positions)
        rows = [int(i) for i in ids]
        marks = ",".join("?" * len(rows))
        stored = {r[0]: (r[1], r[2]) for r in self._conn().execute(
            f"SELECT t.rowid, {CHUNK_ROWID[kind]}, t.vector FROM {kind} t "
            f"WHERE t.rowid IN ({marks})", rows)}
        wrong = []
        for row, group, vector in zip(rows, groups, vectors, strict=True):
            chunk, blob = stored.get(row, (None, b""))
            if chunk != int(group) or blob != np.asarray(vector, dtype=np.float32).tobytes():
                wrong.append(row)
        return wrong

    def _save_index(self, kind: Kind, state: str, index: ExactIndex) -> None:
        folder = self.folder
        try:
            index.save(folder, f"{kind}-{state}")
            fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
            with os.fdopen(fd, "w") as fh:
                json.dump({"state": state}, fh)
            os.replace(tmp, folder / f"{kind}.json")
            for old in folder.glob(f"{kind}-*.npy"):  # other states
                if not old.name.startswith(f"{kind}-{state}."):
                    old.unlink(missing_ok=True)
        except OSError:  # a read-only index still answers, just without the cache
            log.debug("cannot write the vector cache in %s", folder, exc_info=True)

    def check(self, kind: Kind, rows: int) -> list[str]:
        """The saved vector index of the current state, if any, holds exactly the table's
        vectors (compared row by row, in slices)."""
        state = self._meta("state")
        if state is None or self._stamp(kind) != state:
            return []  # none, or stale: rebuilt from the tables when needed
        found = self._saved_index(kind, state)
        if found is None:
            return [f"vector cache of {kind} is unreadable (`isotope check --repair` drops "
                    "it; it is rebuilt on the next query)"]
        wrong = sum(len(self._differences(kind, found, range(a, min(len(found), a + 500))))
                    for a in range(0, len(found), 500))
        width = found.vectors.shape[1] if len(found) else 0
        sound = self._conn().execute(
            f"SELECT COUNT(*) FROM {kind} t WHERE length(t.vector) = ? AND "
            f"{CHUNK_ROWID[kind]} IS NOT NULL", (4 * width,)).fetchone()[0]
        if wrong or sound != len(found) or (not len(found) and rows):
            return [f"vector cache of {kind} disagrees with the table ({wrong} of "
                    f"{len(found)} rows differ; the table has {sound} sound rows): "
                    "`isotope check --repair` drops it, and it is rebuilt on the next query"]
        return []
