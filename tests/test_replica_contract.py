"""The whole Store contract (tests/test_store_contract.py) against an index in PostgreSQL
whose location names two streaming standbys as read replicas (tests/replication.py):
every read of the suite goes to a replica that has replayed the suite's own writes."""

from __future__ import annotations

import itertools

import pytest

from replication import Cluster
from test_store_contract import *  # noqa: F403

_SCHEMAS = itertools.count(1)


@pytest.fixture
def location(replicated: Cluster) -> str:
    return replicated.location(f"contract{next(_SCHEMAS)}")


def test_the_suites_store_reads_from_its_replicas(location: str) -> None:
    from isotope import stores

    store = stores.open(location)
    try:
        assert [r["healthy"] for r in store.replicas()] == [True, True]
        with store.snapshot():  # a read: on a standby
            row = store.connection().execute("SELECT pg_is_in_recovery()").fetchone()
            assert row == (True,)
        assert store.connection().execute("SELECT pg_is_in_recovery()").fetchone() == (
            False,)  # the primary, outside a read
    finally:
        store.close()
