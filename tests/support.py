"""What tests reach below the public API for, in one place: an engine's own connection
(to damage an index, or read its rows as stored) and the saved keyword postings."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from isotope import Isotope
from isotope.stores import Kind, Store
from isotope.stores.sql_core import SQLStore
from isotope.stores.sqlite import SQLiteStore
from isotope.stores.sqlite_keywords import KeywordLayer


def connection(where: Isotope | Store) -> Any:
    """The store's own connection of this thread (``sqlite3`` or ``psycopg``)."""
    store = where.store if isinstance(where, Isotope) else where
    store = getattr(store, "_store", store)  # (a store seen as searches read it)
    assert isinstance(store, SQLStore), store
    return store.connection()


def keyword_layer(iso: Isotope, kind: Kind) -> KeywordLayer | None:
    """The saved keyword postings an embedded index searches ``kind`` with."""
    assert isinstance(iso.store, SQLiteStore), iso.store
    return iso.store.keyword_layer(kind)


def write_transaction(store: Store, *sources: str) -> AbstractContextManager[Any]:
    """A write transaction of a SQL store holding its locks on ``sources`` (to keep a
    writer in place while another one tries)."""
    assert isinstance(store, SQLStore), store
    return store._write(*sources)


def stale_compaction(iso: Isotope, kind: Kind) -> Callable[[], bool]:
    """A compaction of ``kind``'s vectors started now, from the base saved now: call the
    result later to finish it and try to commit it (True: it was committed)."""
    from isotope.stores import sqlite_vectors

    store = iso.store
    assert isinstance(store, SQLiteStore), store
    vectors = store._place.vectors
    info = vectors.bases().get(kind)
    stale = vectors._open_base(kind, info, writable=True) if info else None

    def commit() -> bool:
        made = sqlite_vectors._convert(stale, "hnsw")
        return bool(vectors._commit(kind, info, [], (made, np.zeros(0, np.int64)), 0,
                                    store._write))

    return commit
