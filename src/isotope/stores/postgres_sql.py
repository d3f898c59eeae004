"""SQL of the PostgreSQL store: its spelling of filter conditions
(:mod:`isotope.stores.sql_filters`) and the restriction of a search to the items whose
chunk meets them (:func:`restrict`, :func:`few`), the memory of an index build
(:func:`build_memory`), and BM25 computed from term statistics.

BM25 is computed the way the embedded store's FTS5 computes it, from the same terms
(FTS5's own tokenizer, :class:`isotope.stores.keywords.Tokenizer`), so both engines
rank alike: k1 = 1.2, b = 0.75, idf ``ln((N - n + 0.5) / (n + 0.5))`` floored at 1e-6,
N and the average length from ``kw_stats``, n from each term's ``{kind}_df`` (kept by
triggers on the postings). PostgreSQL's own ``ts_rank`` is not BM25 (RESEARCH.md measured
a top-10 overlap of 0.08 with it).

A query's common terms are not read whole (:func:`bm25_pruned`, MaxScore): the items
holding one of its rarest terms are scored with every term; an item holding none of them
scores at most the sum of the other terms' upper bounds (idf x (k1 + 1)), so when the
k-th score found is above that sum the top k is exact, and otherwise the next rarest term
joins the rare ones and the query is made again (at worst, with every term)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from isotope.models import Condition
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


def term_stats(kind: str) -> str:
    """(NULL, N, total length) of ``kind``, then (term, n) of each query term in
    ``%(terms)s`` that some item holds."""
    return f"""
        SELECT NULL, coalesce(sum(n), 0), coalesce(sum(total), 0) FROM kw_stats
        WHERE kind = '{kind}'
        UNION ALL
        SELECT term, sum(n), NULL FROM {kind}_df WHERE term = ANY(%(terms)s) GROUP BY term
        HAVING sum(n) > 0"""


def idf(n_items: int, n_holding: int, times: int = 1) -> float:
    """A term's weight as FTS5 makes it (``times``: how often the query says it)."""
    return times * max(math.log((n_items - n_holding + 0.5) / (n_holding + 0.5)), MIN_IDF)


def bm25_pruned(kind: str, restrict: str = "") -> str:
    """BM25 of the items of ``kind`` that hold any of ``%(rare)s``, scored with every
    term ``%(terms)s`` (weights ``%(idf)s``; average length ``%(avgdl)s``), best first, at
    most ``%(k)s``; ``restrict`` is an SQL condition on ``t``."""
    within = f" AND c.item IN (SELECT t.row FROM {kind} t WHERE {restrict})" if restrict else ""
    return f"""
        WITH w AS (SELECT * FROM unnest(%(terms)s::text[], %(idf)s::float8[]) AS w(term, idf)),
        c AS (SELECT DISTINCT c.item FROM {kind}_terms c WHERE c.term = ANY(%(rare)s){within})
        SELECT p.item, sum(w.idf * p.tf * {K1 + 1} /
                           (p.tf + {K1} * ({1 - B} + {B} * p.ntok / %(avgdl)s))) AS score
        FROM c JOIN {kind}_terms p ON p.item = c.item JOIN w ON w.term = p.term
        GROUP BY p.item ORDER BY score DESC, p.item LIMIT %(k)s"""


EXACT_CHUNKS = 1_000
"""A filtered search whose conditions at most this many chunks meet scores their items
exactly (at a million questions, a principal who sees 1% of the sources: 590 chunks)."""
BUILD_BYTES_PER_VECTOR = 1_200
"""About what one 384-dimension halfvec takes in an HNSW graph being built in memory
(its vector, its neighbour lists, pgvector's element); scaled by the dimension."""
BUILD_MEMORY = (64 << 20, 8 << 30)
"""The least and the most memory an ``auto`` HNSW build asks for (a graph that fits
builds several times faster than one pgvector has to spill to disk)."""


def restrict(kind: str, filters: Sequence[Condition], params: dict[str, Any]
             ) -> tuple[str, str]:
    """(the WHERE clause that keeps the items of ``kind`` whose chunk meets
    ``filters``, the query of those chunks' ids); their values go into ``params``."""
    clause, values = where(filters)
    # source first: a source's conditions (its access list) tested once per source
    meeting = (f"SELECT c.id FROM sources s JOIN chunks c ON c.source = s.uri "
               f"WHERE {named(clause, values, params)}")
    return f"WHERE {ITEM_CHUNK[kind]} IN ({meeting})", meeting


def few(rows: Callable[..., list[tuple[Any, ...]]], meeting: str, params: dict[str, Any]
        ) -> bool:
    """Whether at most :data:`EXACT_CHUNKS` chunks meet a search's conditions (``rows``:
    the store's reads)."""
    return bool(rows(f"SELECT count(*) FROM ({meeting} LIMIT {EXACT_CHUNKS + 1}) f",
                     params)[0][0] <= EXACT_CHUNKS)


def named(clause: str, values: list[Any], params: dict[str, Any]) -> str:
    """``clause`` with its positional ``%s`` turned into named parameters in ``params``."""
    parts = clause.split("%s")
    out = [parts[0]]
    for value, rest in zip(values, parts[1:], strict=True):
        name = f"f{len(params)}"
        params[name] = value
        out.append(f"%({name})s{rest}")
    return "".join(out)


def build_memory(setting: str, rows: int, dim: int) -> str:
    """The ``maintenance_work_mem`` of an index build over ``rows`` vectors: the
    ``hnsw_build_memory`` setting, or for ``auto`` an HNSW graph's estimated size with a
    quarter more (a graph that outgrows it is built on disk, many times slower), within
    :data:`BUILD_MEMORY`."""
    if setting != "auto":
        return setting
    wanted = rows * BUILD_BYTES_PER_VECTOR * max(dim, 1) / 384 * 1.25
    return f"{int(min(max(wanted, BUILD_MEMORY[0]), BUILD_MEMORY[1])) >> 20}MB"
