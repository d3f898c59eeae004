"""Metadata filters for queries.

A filter is a dict, as in ``iso.search(q, filters={...})``:

- ``{"source": "docs/*.md"}``: sources matching a glob (absolute, relative to the working
  directory, or a file name pattern matched in any folder);
- ``{"type": "pdf"}``: the loader (``text``, ``markdown``, ``html``, ``pdf``, ``email``,
  ``latex``, ``docx``, ``chunks``);
- ``{"author": "Ada"}``: any metadata key of the chunk (``headings``, ``page``) or of its
  source (front matter, ``title``), equal to the value (for a list, e.g. ``headings``:
  containing it); a list of values means any of them;
- ``{"year": {"gte": 2020, "lt": 2024}}``, ``{"date": {"gte": "2024-01-01"}}``: ranges
  with ``gt``, ``gte``, ``lt``, ``lte`` (and ``ne``); numbers compare as numbers, other
  values as text, so ISO dates compare as dates;
- ``ingested_at`` and ``size`` are the source registry's columns.

All conditions must hold. The CLI's ``--where`` takes ``key=value``, ``key!=value``,
``key>=value``, ``key>value``, ``key<=value`` and ``key<value``. Values are always passed
to the database as bound parameters.

What a filter means is settled here, once, for every store: :func:`parse` resolves
``source`` patterns into globs (:func:`source_globs`), dates into ISO text and numbers
beyond a database integer into floats; a store only translates the resulting
:class:`Condition` list into its own query language.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any

from isotope.errors import IsotopeError
from isotope.models import Condition, Op

__all__ = ["Condition", "FilterError", "Op", "parse", "shown_text", "source_globs"]

OPS: tuple[str, ...] = ("eq", "ne", "gt", "gte", "lt", "lte")
SPECIAL = {"source", "type", "ingested_at", "size"}
_KEY = re.compile(r"^[^\"\\\x00-\x1f]{1,200}$")
_WHERE = re.compile(r"^\s*([^<>=!]+?)\s*(!=|>=|<=|=|>|<)\s*(.*?)\s*$", re.S)
_SYMBOL = {"=": "eq", "!=": "ne", ">=": "gte", ">": "gt", "<=": "lte", "<": "lt"}


class FilterError(IsotopeError):
    """A filter that cannot be applied; the message shows the accepted forms."""


MAX_KEYS = 32
"""Conditions a filter may hold."""
MAX_VALUES = 100
"""Values one condition may list (each is a test in the query: SQLite refuses an
expression deeper than 1,000)."""


def shown_text(value: Any) -> Any:
    """Text with undecodable bytes (lone surrogates, from a terminal in another encoding
    or an escaped JSON string) shown as U+FFFD, as queries are; anything else as it is."""
    if isinstance(value, str):
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in value)
    return value


def parse(filters: dict[str, Any] | None) -> list[Condition]:
    """Conditions from a filter dict (see the module docstring)."""
    conditions: list[Condition] = []
    if len(filters or {}) > MAX_KEYS:
        raise FilterError(f"a filter holds at most {MAX_KEYS} conditions, not "
                          f"{len(filters or {})}")
    for raw_key, raw_spec in (filters or {}).items():
        key = shown_text(raw_key)
        spec = ([shown_text(v) for v in raw_spec] if isinstance(raw_spec, list | tuple) else
                {k: shown_text(v) for k, v in raw_spec.items()} if isinstance(raw_spec, dict)
                else shown_text(raw_spec))
        if isinstance(spec, list) and len(spec) > MAX_VALUES:
            raise FilterError(f"filter {key!r}: at most {MAX_VALUES} values, not "
                              f"{len(spec)}")
        if not isinstance(key, str) or not _KEY.match(key):
            raise FilterError(f"invalid filter key {key!r}: no quotes, backslashes or "
                              "control characters")
        if key == "source":
            patterns = spec if isinstance(spec, list | tuple) else [spec]
            conditions.append(Condition(key, "glob", tuple(
                glob for p in patterns for glob in source_globs(str(p)))))
        elif isinstance(spec, dict):
            for op, value in spec.items():
                if op not in OPS:
                    raise FilterError(f"filter {key!r}: unknown operator {op!r}; use one of "
                                      f"{', '.join(OPS)}")
                if key == "type" and op not in ("eq", "ne"):
                    raise FilterError("filter 'type' takes a loader name: = or != only")
                if isinstance(value, bool) and op not in ("eq", "ne"):
                    raise FilterError(f"filter {key!r}: {op} compares with a number, a "
                                      f"date or text, not {str(value).lower()}")
                conditions.append(Condition(key, op, (_scalar(key, value),)))
        elif isinstance(spec, list | tuple):
            if not spec:
                raise FilterError(f"filter {key!r}: an empty list matches nothing")
            conditions.append(Condition(key, "eq", tuple(_scalar(key, v) for v in spec)))
        else:
            conditions.append(Condition(key, "eq", (_scalar(key, spec),)))
    return conditions


def source_globs(pattern: str) -> list[str]:
    """The globs a ``source`` pattern means, resolved here once so that every store only
    matches them: an absolute pattern as it is (``~`` expanded); a relative one against
    the working directory, and in any folder (``*/docs/*.md``), and as given (sources
    that are not files)."""
    expanded = os.path.expanduser(pattern)
    if os.path.isabs(expanded):
        return [expanded]
    return [os.path.join(os.getcwd(), expanded), f"*/{pattern}", pattern]


def _scalar(key: str, value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        raise FilterError(f"filter {key!r}: {value!r} is not a number to compare with")
    if isinstance(value, int) and not isinstance(value, bool) and not (
            -(2**63) <= value < 2**63):
        return float(value)  # beyond what a database integer holds; compared as a number
    if isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "isoformat"):  # date, datetime
        return value.isoformat()
    raise FilterError(f"filter {key!r}: a value must be a string, number or date, "
                      f"not {type(value).__name__}")


def parse_where(expressions: list[str]) -> dict[str, Any]:
    """A filter dict from ``--where`` expressions such as ``year>=2020``; repeated
    ``key=value`` for one key means any of the values."""
    filters: dict[str, Any] = {}
    for text in expressions:
        found = _WHERE.match(text)
        if not found or not found.group(1):
            raise FilterError(f"cannot read --where {text!r}; write key=value, key!=value, "
                              "key>=value, key>value, key<=value or key<value")
        key, symbol, raw = found.groups()
        value = _number(raw)
        op = _SYMBOL[symbol]
        if op == "eq" and key != "source":
            previous = filters.get(key)
            if previous is None:
                filters[key] = value
            elif isinstance(previous, list):
                previous.append(value)
            elif isinstance(previous, dict):
                raise FilterError(f"--where {key}: cannot mix = with a range")
            else:
                filters[key] = [previous, value]
        elif key == "source":
            if op != "eq":
                raise FilterError("--where source takes a glob: source=docs/*.md")
            filters.setdefault("source", []).append(raw)
        else:
            existing = filters.setdefault(key, {})
            if not isinstance(existing, dict):
                raise FilterError(f"--where {key}: cannot mix = with a range")
            existing[op] = value
    return filters


def _number(raw: str) -> Any:
    if re.fullmatch(r"[+-]?\d+", raw):
        return int(raw)
    if re.fullmatch(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?", raw):
        return float(raw)
    return raw
