"""SQL of the embedded store: its spelling of filter conditions
(:mod:`isotope.stores.sql_filters`), and the queries ``check`` runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from isotope.stores import Kind
from isotope.stores.sql_filters import FilterSQL, Test

CHUNK_ROWID: dict[Kind, str] = {
    "questions": "(SELECT c.rowid FROM chunks c WHERE c.id = t.chunk_id)",
    "atoms": "(SELECT c.rowid FROM chunks c WHERE c.id = t.chunk_id)",
    "chunks": "t.rowid",
}
"""SQL for the rowid of the chunk of an item ``t`` of each kind."""

ITEM_JOIN: dict[Kind, tuple[str, str]] = {
    "questions": ("t.rowid", " JOIN questions t ON t.chunk_id = c.id"),
    "atoms": ("t.rowid", " JOIN atoms t ON t.chunk_id = c.id"),
    "chunks": ("c.rowid", ""),
}
"""For each kind, its items' rowid and the join that reaches them from chunks ``c``."""

ORPHANS = {
    "questions without their atom": "SELECT c.source FROM questions q LEFT JOIN chunks c ON "
    "c.id = q.chunk_id WHERE NOT EXISTS (SELECT 1 FROM atoms a WHERE a.id = q.atom_id)",
    "questions without their chunk": "SELECT c.source FROM questions q LEFT JOIN chunks c ON "
    "c.id = q.chunk_id WHERE EXISTS (SELECT 1 FROM atoms a WHERE a.id = q.atom_id) AND NOT "
    "EXISTS (SELECT 1 FROM atoms a WHERE a.id = q.atom_id AND a.chunk_id = q.chunk_id)",
    "atoms without their chunk": "SELECT NULL FROM atoms a WHERE NOT EXISTS "
    "(SELECT 1 FROM chunks c WHERE c.id = a.chunk_id)",
    "chunks without their source": "SELECT c.source FROM chunks c WHERE NOT EXISTS "
    "(SELECT 1 FROM sources s WHERE s.uri = c.source)",
}
"""Rows whose parent is gone, each query giving the source involved (NULL if unknown)."""


class SQLiteFilters(FilterSQL):
    """Filters in SQLite's SQL: GLOB, ``json_extract``, ``json_each`` over a metadata
    value (a list's items, an object's values), and a value's JSON type."""

    def access(self, unlisted: bool, entries: Sequence[Any]) -> Test:
        marks = ",".join("?" * len(entries))
        listed = f"EXISTS (SELECT 1 FROM json_each(s.access) WHERE value IN ({marks}))"
        return (f"(s.access IS NULL OR {listed})" if unlisted else listed), list(entries)

    def globs(self, globs: Sequence[Any]) -> Test:
        return "(" + " OR ".join("c.source GLOB ?" for _ in globs) + ")", list(globs)

    def loader(self, types: Sequence[Any]) -> Test:
        marks = ",".join("?" * len(types))
        # coalesce: a source without a metadata type is not of that type
        return (f"(s.loader IN ({marks}) OR coalesce(json_extract(s.metadata, '$.type') "
                f"IN ({marks}), 0))", [*types, *types])

    def column(self, key: str, op: str, values: Sequence[Any]) -> Test:
        return "(" + " OR ".join(f"s.{key} {op} ?" for _ in values) + ")", list(values)

    def metadata(self, key: str, op: str, values: Sequence[Any]) -> Test:
        test = " OR ".join(_value_test(v, op) for v in values)
        path = f'$."{key}"'
        bound = [int(v) if isinstance(v, bool) else v for v in values]
        return (f"(EXISTS (SELECT 1 FROM json_each(c.metadata, ?) j WHERE {test}) OR "
                f"EXISTS (SELECT 1 FROM json_each(s.metadata, ?) j WHERE {test}))",
                [path, *bound, path, *bound])


def _value_test(value: Any, op: str) -> str:
    """The test of one metadata value ``j`` against one filter value: a number against
    numbers (and text that reads as one), true/false against JSON booleans, text against
    text."""
    if isinstance(value, bool):
        return f"(j.type IN ('true', 'false') AND j.value {op} ?)"
    if isinstance(value, int | float):
        return ("((j.type IN ('integer', 'real') OR (j.type = 'text' AND trim(j.value) GLOB "
                f"'[0-9+-.]*')) AND CAST(j.value AS REAL) {op} ?)")
    return f"(j.type = 'text' AND j.value {op} ?)"


where = SQLiteFilters().where
