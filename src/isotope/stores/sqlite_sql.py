"""SQL of the embedded store: filter conditions (settled by :mod:`isotope.filters`)
translated into a WHERE clause with bound parameters, and the queries ``check`` runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from isotope.filters import Condition
from isotope.stores import Kind

CHUNK_ROWID: dict[Kind, str] = {
    "questions": "(SELECT c.rowid FROM chunks c WHERE c.id = t.chunk_id)",
    "atoms": "(SELECT c.rowid FROM chunks c WHERE c.id = t.chunk_id)",
    "chunks": "t.rowid",
}
"""SQL for the rowid of the chunk of an item ``t`` of each kind."""

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

COUNTS = (
    "SELECT s.uri, s.counts, (SELECT COUNT(*) FROM chunks c WHERE c.source = s.uri), "
    "(SELECT COUNT(*) FROM atoms a JOIN chunks c ON a.chunk_id = c.id WHERE c.source = s.uri),"
    " (SELECT COUNT(*) FROM questions q JOIN chunks c ON q.chunk_id = c.id "
    "WHERE c.source = s.uri) FROM sources s")
"""Each source's stored counts (JSON, NULL before schema 4) and what it holds now."""

_OPS = {"eq": "=", "ne": "=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
_COLUMNS = {"ingested_at": "s.ingested_at", "size": "s.size"}


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


def where(conditions: Sequence[Condition]) -> tuple[str, list[Any]]:
    """SQL over chunks ``c`` joined to sources ``s`` meeting every condition; values
    (and metadata keys) are bound parameters."""
    parts: list[str] = []
    params: list[Any] = []
    for cond in conditions:
        if cond.key == "source":  # globs resolved by isotope.filters
            parts.append("(" + " OR ".join("c.source GLOB ?" for _ in cond.values) + ")")
            params += list(cond.values)
            continue
        if cond.key == "type":
            marks = ",".join("?" * len(cond.values))
            # coalesce: a source without a metadata type is not of that type (without
            # it, NOT (false OR NULL) dropped every such source from `type != X`)
            test = (f"(s.loader IN ({marks}) OR coalesce(json_extract(s.metadata, '$.type') "
                    f"IN ({marks}), 0))")
            parts.append(f"NOT {test}" if cond.op == "ne" else test)
            params += [*cond.values, *cond.values]
            continue
        op = _OPS[cond.op]
        if cond.key in _COLUMNS:
            column = _COLUMNS[cond.key]
            test = " OR ".join(f"{column} {op} ?" for _ in cond.values)
            parts.append(f"NOT ({test})" if cond.op == "ne" else f"({test})")
            params += list(cond.values)
            continue
        # A metadata value of the chunk or of its source; a list matches if any item does.
        # Each value is compared by its own type (a list may mix numbers and text).
        test = " OR ".join(_value_test(v, op) for v in cond.values)
        exists = (f"EXISTS (SELECT 1 FROM json_each(c.metadata, ?) j WHERE {test}) OR "
                  f"EXISTS (SELECT 1 FROM json_each(s.metadata, ?) j WHERE {test})")
        path = f'$."{cond.key}"'
        parts.append(f"NOT ({exists})" if cond.op == "ne" else f"({exists})")
        values = [int(v) if isinstance(v, bool) else v for v in cond.values]
        params += [path, *values, path, *values]
    return " AND ".join(parts) or "1", params
