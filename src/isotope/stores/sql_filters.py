"""Filter conditions (settled by :mod:`isotope.search.filters`) as SQL over chunks ``c`` joined
to their sources ``s``, written once: :meth:`FilterSQL.where` walks the conditions, and
an engine says only how its SQL tests each kind of condition (a source glob, a loader
type, a registry column, a metadata value) and how it negates a test. Values and
metadata keys are always bound parameters.

What every engine must agree on (the contract suite checks both): ``!=`` keeps what has
no such value (a negated NULL is true); a list in metadata matches if any item does; a
value is compared by its own type (a number with numbers and with text that starts with
one, as SQLite's ``CAST AS REAL`` reads it; a boolean with booleans; text byte by byte)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from isotope.models import ACCESS_KEY, Condition

OPS = {"eq": "=", "ne": "=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
"""Each operator's SQL (``ne`` is ``=`` negated as a whole: no value may be equal)."""
COLUMNS = ("ingested_at", "size")
"""Filter keys that are columns of the source registry, not metadata."""

Test = tuple[str, list[Any]]
"""A condition's SQL and its parameters, in order."""


class FilterSQL(ABC):
    """An engine's spelling of the conditions; :meth:`where` is the same for all."""

    always = "1"
    """A condition that always holds (no filter)."""

    def where(self, conditions: Sequence[Condition]) -> Test:
        """SQL over chunks ``c`` joined to sources ``s`` meeting every condition."""
        parts: list[str] = []
        params: list[Any] = []
        for cond in conditions:
            if cond.key == ACCESS_KEY:  # who may see: see isotope.access.condition
                sql, values = self.access(bool(cond.values[0]), cond.values[1:])
            elif cond.key == "source":  # globs, resolved by isotope.search.filters
                sql, values = self.globs(cond.values)
            elif cond.key == "type":
                sql, values = self.loader(cond.values)
            elif cond.key in COLUMNS:
                sql, values = self.column(cond.key, OPS[cond.op], cond.values)
            else:  # a metadata value of the chunk or of its source
                sql, values = self.metadata(cond.key, OPS[cond.op], cond.values)
            parts.append(self.negate(sql) if cond.op == "ne" else sql)
            params += values
        return " AND ".join(parts) or self.always, params

    def negate(self, sql: str) -> str:
        """``sql`` negated, a NULL counting as false (so negated, as true)."""
        return f"NOT coalesce({sql}, false)"

    @abstractmethod
    def access(self, unlisted: bool, entries: Sequence[Any]) -> Test:
        """The source's access list ``s.access`` holds one of ``entries`` (or, with
        ``unlisted``, the source has no list)."""

    @abstractmethod
    def globs(self, globs: Sequence[Any]) -> Test:
        """The chunk's source matches one of ``globs`` (SQLite's GLOB syntax)."""

    @abstractmethod
    def loader(self, types: Sequence[Any]) -> Test:
        """The source's loader, or its metadata ``type``, is one of ``types``."""

    @abstractmethod
    def column(self, key: str, op: str, values: Sequence[Any]) -> Test:
        """The registry's column ``key`` compares by ``op`` with one of ``values``."""

    @abstractmethod
    def metadata(self, key: str, op: str, values: Sequence[Any]) -> Test:
        """A value of the chunk's or the source's metadata ``key`` (or an item of it)
        compares by ``op`` with one of ``values``."""
