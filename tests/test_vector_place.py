"""A vector place is one class and one register line (issue 67): a minimal place that
keeps its vectors in memory (exact search in numpy), registered through
:func:`isotope.stores.vector_place.register_place` alone, keeps the whole store contract
(``tests/test_store_contract.py``, every case) on the embedded engine; and no engine
module names a particular place."""

from __future__ import annotations

import ast
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from isotope.ann import Ids
from isotope.embedders import Vectors
from isotope.models import Condition
from isotope.stores import KINDS, Kind, Store, VectorBackend
from isotope.stores.vector_place import Table, VectorPlace, register_place
from test_store_contract import *  # noqa: F403 - every case of the contract, run here
from test_store_contract import DOCS, _batch

from conftest import open_store


class MemoryPlace(VectorPlace):
    """Each kind's vectors in a dict, read from the engine's log of pending writes
    (``vector_log``: the rows' vectors written with them, their deletes logged by
    triggers) as each read begins; searched exactly."""

    name = "memory"

    def __init__(self, side: Any, made: Mapping[str, Any] | None,
                 options: Mapping[str, Any]) -> None:
        super().__init__(side, made, options)
        self.held: dict[Kind, dict[int, tuple[int, Vectors]]] = {k: {} for k in KINDS}
        self.seen = dict.fromkeys(KINDS, 0)

    @classmethod
    def new(cls, side: Any, backend: VectorBackend) -> dict[str, Any]:
        return {"name": cls.name, "owner": uuid.uuid4().hex}

    def _read(self, kind: Kind) -> dict[int, tuple[int, Vectors]]:
        held = self.held[kind]
        for seq, item, group, blob in self.side._conn().execute(
                "SELECT seq, item, grp, vector FROM vector_log WHERE kind = ? AND seq > ? "
                "ORDER BY seq", (kind, self.seen[kind])).fetchall():
            if blob is None:
                held.pop(int(item), None)
            elif len(blob):
                held[int(item)] = (int(group), np.frombuffer(blob, np.float16).astype(
                    np.float32))
            self.seen[kind] = int(seq)
        return held

    def searchable(self, kind: Kind, filters: Sequence[Condition]) -> _Exact:
        allowed = self.side._chunks_meeting(filters) if filters else None
        return _Exact(self._read(kind), allowed)

    def get(self, kind: Kind, rows: list[int]) -> dict[int, Vectors]:
        held = self._read(kind)
        return {row: held[row][1] for row in rows if row in held}

    def count(self, kind: Kind) -> int:
        return len(self._read(kind))

    def check(self, kind: Kind, table: Table) -> list[tuple[str, Ids]]:
        held = self._read(kind)
        rows, chunks = table
        wrong = [int(r) for r, c in zip(rows, chunks, strict=True)
                 if held.get(int(r), (None,))[0] != int(c)]
        extra = set(held) - {int(r) for r in rows}
        return [(f"{len(wrong) + len(extra)} vectors of {kind} are not its rows'",
                 np.array(wrong, dtype=np.int64))] if wrong or extra else []

    def rebuild(self, kind: Kind, table: Table,
                embed_rows: Callable[[Ids], Vectors] | None) -> int:
        held = self._read(kind)
        rows, chunks = table
        for gone in set(held) - {int(r) for r in rows}:
            del held[gone]
        lost = np.array([r for r, c in zip(rows, chunks, strict=True)
                         if held.get(int(r), (None,))[0] != int(c)], dtype=np.int64)
        if len(lost) and embed_rows is not None:
            for row, vector in zip(lost, embed_rows(lost), strict=True):
                held[int(row)] = (int(chunks[np.searchsorted(rows, row)]), vector)
            return 0
        return len(lost)


class _Exact:
    def __init__(self, held: dict[int, tuple[int, Vectors]], allowed: Ids | None) -> None:
        self._held, self._allowed = held, allowed

    def search(self, query: Vectors, k: int, allowed: Ids | None = None
               ) -> list[tuple[int, int, float]]:
        items = [(i, g, v) for i, (g, v) in self._held.items()
                 if self._allowed is None or np.isin(g, self._allowed)]
        if not items or k <= 0:
            return []
        scores = np.stack([v for _, _, v in items]) @ np.asarray(query, np.float32).ravel()
        best = sorted(range(len(items)), key=lambda n: (-scores[n], items[n][0]))[:k]
        return [(items[n][0], items[n][1], float(scores[n])) for n in best]


@pytest.fixture
def location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The embedded engine with its vectors in the registered in-memory place (the
    store contract's ``store`` fixture opens it with ``vector_backend = memory``)."""
    register_place("sqlite", "memory", MemoryPlace)
    monkeypatch.setenv("ISOTOPE_VECTOR_BACKEND", "memory")
    return str(tmp_path / "index")


def test_the_registered_place_holds_the_vectors(store: Store, embedder: Any) -> None:
    """The contract above ran on the memory place, not on the default one."""
    for uri, texts in DOCS.items():
        store.add(_batch(embedder, uri, texts))
    place = store._place  # type: ignore[attr-defined]
    assert isinstance(place, MemoryPlace) and place.count("chunks") == 4
    assert store.fixed_settings() == {"vector_backend": "memory"}
    reopened = open_store(str(store.where))  # (the index keeps the place it was made with)
    try:
        assert isinstance(reopened._place, MemoryPlace)  # type: ignore[attr-defined]
    finally:
        reopened.close()


ENGINES = ("sqlite.py", "postgres.py", "postgres_keywords.py", "sql_core.py")
PLACES = ("sqlite_usearch", "sqlite_vectors", "sqlite_chroma", "chroma_vectors",
          "chroma_place", "postgres_vectors", "postgres_chroma")


def test_no_engine_module_names_a_particular_place() -> None:
    """An engine holds one place and never asks which: it imports no place's module and
    names none (``_chroma`` was asked 59 times across the two engines)."""
    stores = Path(__file__).resolve().parent.parent / "src" / "isotope" / "stores"
    for name in ENGINES:
        text = (stores / name).read_text()
        imported = {node.module for node in ast.walk(ast.parse(text))
                    if isinstance(node, ast.ImportFrom) and node.module}
        assert not {f"isotope.stores.{p}" for p in PLACES} & imported, name
        assert "chroma" not in text.lower() and "usearch" not in text.lower(), name
