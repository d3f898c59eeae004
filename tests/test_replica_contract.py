"""The whole Store contract (tests/test_store_contract.py) against an index in PostgreSQL
whose location names two streaming standbys as read replicas (tests/replication.py):
every call is made as a search makes its reads (``Store.reading``), so each read of the
suite goes to a replica that has replayed the suite's own writes, and writes to the
primary."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import pytest

from isotope import stores
from replication import Cluster
from test_store_contract import *  # noqa: F403

_SCHEMAS = itertools.count(1)
_NOT_SEARCHES = ("inspect", "repair", "connection")
"""Not a search's reads (check and repair read the primary, as a test's own connection
writes behind the store's back, which no replica promises to have replayed)."""


class _AsSearchesRead:
    """A store whose every method runs inside ``reading()``, as a search's reads do."""

    def __init__(self, store: stores.Store) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._store, name)
        if not callable(found) or name.startswith("_") or name in _NOT_SEARCHES:
            return found
        return lambda *args, **kwargs: self._store.reading(lambda: found(*args, **kwargs))


@pytest.fixture
def location(replicated: Cluster) -> str:
    return replicated.location(f"contract{next(_SCHEMAS)}")


@pytest.fixture
def store(location: str) -> Iterator[Any]:
    opened = stores.open(location)
    yield _AsSearchesRead(opened)
    opened.close()


def test_the_suites_store_reads_from_its_replicas(location: str) -> None:
    store = stores.open(location)
    try:
        deadline = time.monotonic() + 30  # (the schema just made: replayed in a moment)
        while (shown := store.replicas()) and not all(r["healthy"] for r in shown):
            assert time.monotonic() < deadline, shown
            assert all(r["healthy"] or r["error"].startswith("catching up") for r in shown)
            time.sleep(0.05)
        assert len(shown) == 2

        def read() -> Any:
            with store.snapshot():  # a search's read: on a standby
                return store.connection().execute("SELECT pg_is_in_recovery()").fetchone()

        assert store.reading(read) == (True,)
        with store.snapshot():  # any other read (an ingest's, a copy's): the primary
            assert store.connection().execute("SELECT pg_is_in_recovery()").fetchone() == (
                False,)
    finally:
        store.close()
