"""What each operation of the index may do, and who may do it: one table that every
shell reads (issue 43).

Each :class:`Operation` says whether it **writes** (a read-only key is refused, over
HTTP by the gate before the request's body is read), whether it needs an
**administrator** (a key that names no user: a user's key that wrote could reach
sources it may not see, to replace, relabel or learn of them from the report), what of
its reply or work only administrators are given (its **shapes**: rows of
:data:`isotope.access.ENTITLED`, answered by :func:`isotope.access.entitled`), and where
each shell offers it: its HTTP routes, its MCP tool, its CLI command. :func:`permit` is
the one check, :func:`refused` its read-only rule; the gate asks :func:`writes` of a
request and MCP's guard :func:`refused` of a tool call, the HTTP routes call
:func:`permit` with the key's principal and scope, and the MCP tools are made from the
rows that name one, each called through :func:`permit`.
``tests/test_operations.py`` walks the whole table with every kind of key over HTTP and
MCP against what it says each key may do and be shown (tables of its own), so a route or
tool that forgets its check, a reply shaped for the wrong key, or a row changed here,
fails a test.

The CLI runs as the index's owner (it holds the files), so it checks nothing; its
commands are named here so that each shell offers the same operations under one name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from isotope.access import Principal, sees_all
from isotope.errors import IsotopeError


class Forbidden(IsotopeError):
    """The key may not do this operation (HTTP 403; an error result over MCP)."""


@dataclass(frozen=True)
class Operation:
    name: str
    what: str
    """How a refusal names it (``deleting a source``)."""
    writes: bool = False
    """It changes the index: a read-only key is refused."""
    admin: bool = False
    """It needs an administrator's key (one that names no user)."""
    http: tuple[tuple[str, str], ...] = ()
    """Its routes: (method, path as the app spells it, ``{name}`` a segment,
    ``{name:path}`` the rest)."""
    mcp: str | None = None
    """Its MCP tool."""
    cli: str | None = None
    """Its CLI command (``questions add``: a command of a group)."""
    call: str = ""
    """The method of :class:`isotope.Isotope` that does it, whichever shell asks
    (``tests/test_operations.py`` watches each shell make the call)."""
    shapes: tuple[str, ...] = ()
    """What of its reply or its work only the owner and administrators are given: rows of
    :data:`isotope.access.ENTITLED`, each decided by :func:`isotope.access.entitled`
    (a user's key gets the reply without it)."""


OPERATIONS: tuple[Operation, ...] = (
    Operation("search", "searching", http=(("POST", "/search"),), mcp="search",
              cli="query", call="search", shapes=("learned_questions",)),
    Operation("ask", "asking", http=(("POST", "/ask"),), mcp="ask", cli="ask",
              call="answer", shapes=("learned_questions",)),
    Operation("answer", "answering a search", http=(("POST", "/answer"),), call="answer"),
    Operation("questions", "reading questions", http=(("GET", "/questions"),),
              cli="questions show", call="questions", shapes=("learned_questions",)),
    Operation("chunk_questions", "reading a chunk's questions",
              http=(("GET", "/chunks/{chunk_id}/questions"),), call="chunk_questions",
              shapes=("learned_questions",)),
    # (a mark writes to the query log's feedback, but a read-only key may give one: what
    # it would teach waits for an administrator's review)
    Operation("feedback", "marking a result", http=(("POST", "/feedback"),),
              mcp="feedback", cli="feedback", call="feedback", shapes=("learning_at_once",)),
    Operation("sources", "listing sources", http=(("GET", "/sources"),),
              mcp="list_sources", cli="list", call="sources", shapes=("access_lists",)),
    Operation("status", "reading the status", http=(("GET", "/status"),), cli="status",
              call="status", shapes=("index_details",)),
    Operation("entities", "listing entities", http=(("GET", "/entities"),), cli="entities",
              call="entities"),
    Operation("graph", "reading an entity's neighbourhood", http=(("GET", "/graph"),),
              mcp="graph", cli="graph show", call="graph"),
    # (the MCP Memory server's tools, in its shapes: an agent reads isotope's graph as it
    # reads that server's)
    Operation("read_graph", "reading the graph", http=(("GET", "/graph/memory"),),
              mcp="read_graph", cli="graph export", call="memory_graph"),
    Operation("search_nodes", "searching the graph", mcp="search_nodes",
              call="memory_graph"),
    Operation("open_nodes", "opening entities of the graph", mcp="open_nodes",
              call="memory_graph"),
    Operation("log", "reading the query log", admin=True, http=(("GET", "/log"),),
              cli="log", call="log_summary"),
    Operation("delete", "deleting a source", writes=True, admin=True,
              http=(("DELETE", "/sources"), ("DELETE", "/sources/{source:path}")),
              cli="delete", call="delete", shapes=("hidden_members",)),
    Operation("add_question", "adding a question", writes=True, admin=True,
              http=(("POST", "/chunks/{chunk_id}/questions"),), cli="questions add",
              call="add_question"),
    Operation("edit_question", "editing a question", writes=True, admin=True,
              http=(("PUT", "/questions/{question_id}"),), cli="questions edit",
              call="edit_question"),
    Operation("disable_question", "disabling a question", writes=True, admin=True,
              http=(("DELETE", "/questions/{question_id}"),), cli="questions disable",
              call="disable_question"),
    Operation("enable_question", "enabling a question", writes=True, admin=True,
              http=(("POST", "/questions/{question_id}/enable"),),
              cli="questions enable", call="enable_question"),
    Operation("ingest", "ingesting", writes=True, admin=True,
              http=(("POST", "/ingest"),), mcp="ingest", cli="ingest", call="ingest"),
    Operation("sync", "syncing", writes=True, admin=True, http=(("POST", "/sync"),),
              cli="sync", call="sync"),
)
BY_NAME = {op.name: op for op in OPERATIONS}
BY_TOOL = {op.mcp: op for op in OPERATIONS if op.mcp}


def permit(name: str, principal: Principal | None, scope: str = "write") -> Operation:
    """The operation ``name`` if a key of ``principal`` (None: no keys, the index's
    owner) and ``scope`` (``read`` or ``write``) may do it, else :class:`Forbidden`."""
    op = BY_NAME[name]
    if refused(op, scope):
        raise Forbidden(f"this API key may only read: {op.what} needs a read-write key")
    if op.admin and not sees_all(principal):
        raise Forbidden(f"{op.what} needs an administrator's API key (one that names no "
                        "user); this key is a user's")
    return op


def refused(op: Operation | None, scope: str) -> bool:
    """Whether a key of ``scope`` is refused ``op`` (None: no operation of the table) for
    reading only: the read-only rule, asked by :func:`permit`, by the gate (of a
    request: :func:`writes`) and by MCP's guard (of a tool call, before the tool runs)."""
    return op is not None and op.writes and scope != "write"


def route(method: str, path: str) -> Operation | None:
    """The operation a request of ``method`` on ``path`` (a project's prefix taken off)
    is, if any."""
    for op, by_method in _patterns():
        pattern = by_method.get(method)
        if pattern is not None and pattern.match(path):
            return op
    return None


def writes(method: str, path: str) -> bool:
    """Whether a request writes to the index (the gate refuses a read-only key before its
    body is read)."""
    found = route(method, path)
    return found is not None and found.writes


@lru_cache(maxsize=1)
def _patterns() -> tuple[tuple[Operation, dict[str, re.Pattern[str]]], ...]:
    """Each operation's routes as expressions, by method."""
    def compiled(template: str) -> str:  # (as Starlette's: a path may be empty)
        return re.sub(r"\\\{(\w+)(:path)?\\\}",
                      lambda m: ".*" if m.group(2) else "[^/]+", re.escape(template))

    found = []
    for op in OPERATIONS:
        by_method: dict[str, list[str]] = {}
        for method, template in op.http:
            by_method.setdefault(method, []).append(compiled(template))
        # ("$" as Starlette's routes end: a trailing newline matches too)
        found.append((op, {m: re.compile("^(?:" + "|".join(f"(?:{p})" for p in ps) + ")$")
                           for m, ps in by_method.items()}))
    return tuple(found)
