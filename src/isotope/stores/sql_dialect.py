"""How each SQL engine spells what the queries both share need (:class:`Dialect`), and
the two engines' dialects. Below the shared store (:mod:`isotope.stores.sql_core`) and
its parts (:mod:`isotope.stores.sql_questions`, :mod:`isotope.stores.sql_usage`), which
all read it."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Dialect:
    """How an engine's SQL spells what the shared queries need."""

    mark: str
    """A positional parameter (``?``, ``%s``)."""
    row: str
    """The column numbering rows in insertion order (``rowid``, ``row``)."""
    waiting_sql: str
    """The condition on ``chunks`` of a chunk still waiting for its questions (``{c}``:
    the table's alias and a dot, or nothing)."""
    true: str
    false: str
    binary_order: str
    """Appended to a text column to order it by its bytes, as SQLite does."""
    any_of: Callable[[str], str]
    """``column`` -> a condition that it is one of a list parameter's values."""
    many: Callable[[Sequence[Any]], Any]
    """A list as the parameter :attr:`any_of` takes (one parameter, any length)."""
    each: Callable[[str], str]
    """``alias`` -> a table of a text list parameter's values (:attr:`many`), one a row
    in column ``value``."""
    json_value: Callable[[Any], Any]
    """A JSON column's value as read -> the Python value."""
    json_param: Callable[[Any], Any]
    """A Python value -> the parameter a JSON column is written from."""
    text: Callable[[Any], Any]
    """A text (or a JSON value) as the engine can hold it."""
    lower: str
    """The function lowering a text's case, every letter's (SQLite's own ``lower`` knows
    only ASCII: the connection registers ``unicode_lower``)."""
    add_questions_count: str
    """Adds a parameter to a source's stored question count (``counts[2]``); its
    parameters: the number, the source's uri."""
    chunk_questions: str
    """The text of chunk ``{c}``'s questions, one a line in the order they were stored
    (what its ``questions_text`` holds), read through its atoms (indexed in both
    engines)."""

    def waiting(self, alias: str = "") -> str:
        return self.waiting_sql.format(c=f"{alias}." if alias else "")


def no_nul(value: Any) -> Any:
    """``value`` without NUL characters, which PostgreSQL's text and jsonb refuse (a PDF's
    extracted text may hold them; SQLite keeps them)."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN or Infinity (PostgreSQL's jsonb refuses them)
    if isinstance(value, dict):
        return {no_nul(k): no_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [no_nul(v) for v in value]
    return value


def _jsonb(value: Any) -> Any:
    from psycopg.types.json import Jsonb

    return Jsonb(no_nul(value))


SQLITE = Dialect(
    mark="?", row="rowid", waiting_sql="{c}enriched = 0", true="1", false="0",
    binary_order="",
    any_of=lambda column: f"{column} IN (SELECT value FROM json_each(?))",
    many=lambda values: json.dumps(list(values)), json_value=json.loads,
    each=lambda alias: f"json_each(?) AS {alias}", json_param=json.dumps,
    text=lambda value: value, lower="unicode_lower",
    add_questions_count="UPDATE sources SET counts = json_set(counts, '$[2]', "
    "json_extract(counts, '$[2]') + ?) WHERE uri = ? AND counts IS NOT NULL",
    # (group_concat takes the rows in the order of the subquery that reads them)
    chunk_questions="coalesce((SELECT group_concat(t, char(10)) FROM (SELECT q.text AS t "
    "FROM atoms a JOIN questions q ON q.atom_id = a.id AND q.chunk_id = a.chunk_id WHERE "
    "a.chunk_id = {c}.id ORDER BY q.rowid)), '')")
POSTGRES = Dialect(
    mark="%s", row="row", waiting_sql="NOT {c}enriched", true="true", false="false",
    binary_order=' COLLATE "C"', any_of=lambda column: f"{column} = ANY(%s)",
    many=list, each=lambda alias: f"unnest(%s::text[]) AS {alias}(value)",
    json_value=lambda value: value, json_param=_jsonb, text=no_nul, lower="lower",
    add_questions_count="UPDATE sources SET counts = jsonb_set(counts, '{2}', "
    "to_jsonb((counts->>2)::int + %s)) WHERE uri = %s AND counts IS NOT NULL",
    chunk_questions="coalesce((SELECT string_agg(q.text, E'\\n' ORDER BY q.row) FROM atoms "
    "a JOIN questions q ON q.atom_id = a.id AND q.chunk_id = a.chunk_id WHERE a.chunk_id = "
    "{c}.id), '')")
