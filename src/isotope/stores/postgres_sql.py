"""SQL of the PostgreSQL store: filter conditions (settled by :mod:`isotope.filters`)
translated into a WHERE clause with bound parameters, and BM25 computed from term
statistics.

BM25 is computed the way the embedded store's FTS5 computes it, from the same terms
(FTS5's own tokenizer, :class:`isotope.stores.keywords.Tokenizer`), so both engines
rank alike: k1 = 1.2, b = 0.75, idf ``ln((N - n + 0.5) / (n + 0.5))`` floored at 1e-6,
N and the average length from ``kw_stats``, n counted from the postings of the query's
terms. PostgreSQL's own ``ts_rank`` is not BM25 (RESEARCH.md measured a top-10 overlap of
0.08 with it)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from isotope.filters import Condition
from isotope.stores.keywords import K1, MIN_IDF, B

_OPS = {"eq": "=", "ne": "=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
_COLUMNS = {"ingested_at": ('s.ingested_at COLLATE "C"', "text"), "size": ("s.size", "numeric")}
_MANTISSA = r"^\s*([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))"
_EXPONENT = r"^\s*[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE]([+-]?[0-9]{1,9})"
_TEXT = "j.v #>> '{}'"
_NUMERIC = (f"(CASE WHEN jsonb_typeof(j.v) = 'number' THEN (j.v::text)::numeric ELSE "
            f"coalesce(left(substring({_TEXT} from '{_MANTISSA}'), 1000)::numeric * "
            f"power(10::numeric, greatest(-400, least(400, coalesce(substring({_TEXT} from "
            f"'{_EXPONENT}')::bigint, 0)))), 0) END)")
"""A metadata value as a number, as SQLite's CAST(... AS REAL) reads it: a JSON number,
or the number a text starts with ('2022-05-01' is 2022, '-' is 0)."""


def glob_regex(glob: str) -> str:
    """SQLite's GLOB (``*``, ``?``, ``[...]``, ``[^...]``; case-sensitive) as an anchored
    POSIX regular expression."""
    out, i = ["^"], 0
    while i < len(glob):
        ch = glob[i]
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch == "[":
            start = i + 1
            start += glob[start:start + 1] == "^"
            start += glob[start:start + 1] == "]"  # a ] first in the set is itself
            end = glob.find("]", start)
            if end == -1:
                out.append(r"\[")
            else:
                body = glob[i + 1:end]
                negate = body.startswith("^")
                body = body[1:] if negate else body
                body = body.replace("\\", "\\\\").replace("[", "\\[")
                out.append("[" + ("^" if negate else "") + body + "]")
                i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out) + "$"


def _as(value: Any, cast: str) -> Any:
    """A filter value for a column of type ``cast``: text as text (SQLite compares a
    number with a text column as text), a number as itself (text that is no number
    matches nothing)."""
    if cast == "text":
        return str(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    return None


def _value_test(value: Any, op: str) -> str:
    """The test of one metadata value ``j.v`` against one filter value (as SQLite's: a
    number against numbers and text that reads as one, a boolean against booleans, text
    against text, byte by byte)."""
    if isinstance(value, bool):
        return f"(jsonb_typeof(j.v) = 'boolean' AND (j.v)::boolean {op} %s::boolean)"
    if isinstance(value, int | float):
        return ("((jsonb_typeof(j.v) = 'number' OR (jsonb_typeof(j.v) = 'string' AND "
                f"j.v #>> '{{}}' ~ '^\\s*[0-9+.-]')) AND {_NUMERIC} {op} %s::numeric)")
    return f"(jsonb_typeof(j.v) = 'string' AND (j.v #>> '{{}}') COLLATE \"C\" {op} %s::text)"


def where(conditions: Sequence[Condition]) -> tuple[str, list[Any]]:
    """SQL over chunks ``c`` joined to sources ``s`` meeting every condition; values and
    metadata keys are bound parameters."""
    parts: list[str] = []
    params: list[Any] = []
    for cond in conditions:
        if cond.key == "source":  # globs resolved by isotope.filters
            parts.append("(" + " OR ".join("c.source ~ %s" for _ in cond.values) + ")")
            params += [glob_regex(str(v)) for v in cond.values]
            continue
        if cond.key == "type":
            test = "(s.loader = ANY(%s) OR s.metadata->>'type' = ANY(%s))"
            parts.append(f"NOT coalesce({test}, false)" if cond.op == "ne" else test)
            params += [list(cond.values), list(cond.values)]
            continue
        op = _OPS[cond.op]
        if cond.key in _COLUMNS:
            column, cast = _COLUMNS[cond.key]
            test = " OR ".join(f"{column} {op} %s::{cast}" for _ in cond.values)
            parts.append(f"NOT coalesce({test}, false)" if cond.op == "ne" else f"({test})")
            params += [_as(v, cast) for v in cond.values]
            continue
        # A metadata value of the chunk or of its source; a list matches if any item does
        # (an object: any of its values, as SQLite's json_each walks it). Each value is
        # compared by its own type (a list may mix numbers and text).
        test = " OR ".join(_value_test(v, op) for v in cond.values)
        exists = " OR ".join(
            f"EXISTS (SELECT 1 FROM jsonb_array_elements(CASE jsonb_typeof({m}->%s) WHEN "
            f"'array' THEN {m}->%s WHEN 'object' THEN (SELECT coalesce(jsonb_agg(o.value), "
            f"'[]') FROM jsonb_each({m}->%s) o) ELSE jsonb_build_array({m}->%s) END) j(v) "
            f"WHERE {test})" for m in ("c.metadata", "s.metadata"))
        parts.append(f"NOT ({exists})" if cond.op == "ne" else f"({exists})")
        params += [cond.key, cond.key, cond.key, cond.key, *cond.values] * 2
    return " AND ".join(parts) or "true", params


ITEM_CHUNK = {"questions": "t.chunk_id", "atoms": "t.chunk_id", "chunks": "t.id"}
"""SQL for the chunk id of an item ``t`` of each kind."""


def bm25(kind: str, restrict: str = "") -> str:
    """BM25 of the items of ``kind`` holding any of the terms ``%(terms)s`` (a text
    array; each counted ``%(mult)s`` times), best first, at most ``%(k)s``; ``restrict``
    is an SQL condition on ``t``."""
    return f"""
        WITH st AS (SELECT sum(n) AS n, greatest(sum(total)::float8 / greatest(sum(n), 1),
                                                 1e-9) AS avgdl
                    FROM kw_stats WHERE kind = '{kind}'),
        qt AS (SELECT * FROM unnest(%(terms)s::text[], %(mult)s::int[]) AS qt(term, m)),
        df AS (SELECT p.term, count(*) AS n FROM {kind}_terms p
               WHERE p.term = ANY(%(terms)s) GROUP BY p.term),
        w AS (SELECT df.term, qt.m * greatest(ln((st.n - df.n + 0.5) / (df.n + 0.5)),
                                              {MIN_IDF}) AS idf
              FROM df JOIN qt ON qt.term = df.term CROSS JOIN st)
        SELECT p.item, sum(w.idf * p.tf * {K1 + 1} /
                           (p.tf + {K1} * ({1 - B} + {B} * p.ntok / st.avgdl))) AS score
        FROM {kind}_terms p JOIN w ON w.term = p.term CROSS JOIN st
        {f"WHERE p.item IN (SELECT t.row FROM {kind} t WHERE {restrict})" if restrict else ""}
        GROUP BY p.item ORDER BY score DESC, p.item LIMIT %(k)s"""
