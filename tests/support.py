"""What tests reach below the public API for, in one place: an engine's own connection
(to damage an index, or read its rows as stored) and the saved keyword postings."""

from __future__ import annotations

from typing import Any

from isotope import Isotope
from isotope.stores import Kind, Store
from isotope.stores.sql_core import SQLStore
from isotope.stores.sqlite import SQLiteStore
from isotope.stores.sqlite_keywords import KeywordLayer


def connection(where: Isotope | Store) -> Any:
    """The store's own connection of this thread (``sqlite3`` or ``psycopg``)."""
    store = where.store if isinstance(where, Isotope) else where
    assert isinstance(store, SQLStore), store
    return store.connection()


def keyword_layer(iso: Isotope, kind: Kind) -> KeywordLayer | None:
    """The saved keyword postings an embedded index searches ``kind`` with."""
    assert isinstance(iso.store, SQLiteStore), iso.store
    return iso.store.keyword_layer(kind)
