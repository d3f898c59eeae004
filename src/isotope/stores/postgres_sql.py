"""SQL of the PostgreSQL store: its spelling of filter conditions
(:mod:`isotope.stores.sql_filters`), and BM25 computed from term statistics.

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

from isotope.stores.keywords import K1, MIN_IDF, B
from isotope.stores.sql_filters import FilterSQL, Test

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


class PostgresFilters(FilterSQL):
    """Filters in PostgreSQL's SQL, reading as SQLite's do: GLOB as an anchored regular
    expression, text compared byte by byte (``COLLATE "C"``), SQLite's number reading."""

    always = "true"

    def access(self, unlisted: bool, entries: Sequence[Any]) -> Test:
        # (never negated: a NULL list reads as false as it is; without coalesce the
        # planner estimates few sources, and reads their items through the indexes)
        listed = "s.access ?| %s::text[]"
        return (f"(s.access IS NULL OR {listed})" if unlisted else listed), [list(entries)]

    def globs(self, globs: Sequence[Any]) -> Test:
        return ("(" + " OR ".join("c.source ~ %s" for _ in globs) + ")",
                [glob_regex(str(v)) for v in globs])

    def loader(self, types: Sequence[Any]) -> Test:
        return ("(s.loader = ANY(%s) OR s.metadata->>'type' = ANY(%s))",
                [list(types), list(types)])

    def column(self, key: str, op: str, values: Sequence[Any]) -> Test:
        column, cast = _COLUMNS[key]
        return ("(" + " OR ".join(f"{column} {op} %s::{cast}" for _ in values) + ")",
                [_as(v, cast) for v in values])

    def metadata(self, key: str, op: str, values: Sequence[Any]) -> Test:
        # a list matches if any item does (an object: any of its values, as SQLite's
        # json_each walks it)
        test = " OR ".join(_value_test(v, op) for v in values)
        exists = " OR ".join(
            f"EXISTS (SELECT 1 FROM jsonb_array_elements(CASE jsonb_typeof({m}->%s) WHEN "
            f"'array' THEN {m}->%s WHEN 'object' THEN (SELECT coalesce(jsonb_agg(o.value), "
            f"'[]') FROM jsonb_each({m}->%s) o) ELSE jsonb_build_array({m}->%s) END) j(v) "
            f"WHERE {test})" for m in ("c.metadata", "s.metadata"))
        return f"({exists})", [key, key, key, key, *values] * 2


where = PostgresFilters().where


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
