"""One table of what each operation may do (issue 43): isotope.server.operations names,
for every operation, whether it writes, whether it needs an administrator, and its HTTP
routes, MCP tool and CLI command. Here the table is checked against the shells (every
route, tool and command it names exists, and every route and tool of the shells is in
it), and walked whole with every kind of key (administrator, administrator read-only,
user, user read-only, a key of another project, none) over HTTP and MCP against what the
test itself says each key may do (:data:`EXPECTED`), each call valid: a call allowed
must succeed (2xx, no error of any kind), one refused is refused as expected, so that a
route or tool that forgets its check, a row of the table changed, or a call that fails
for another reason fails the walk. A real uvicorn server on loopback over two real
indexes (the fake model at the provider boundary)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from isotope import Isotope
from isotope.embedders import Embedder
from isotope.settings import Settings

from conftest import FakeLLM, served_on_loopback

pytest.importorskip("fastapi", reason="pip install 'isotopedb[server]'")
pytest.importorskip("mcp", reason="pip install 'isotopedb[server]'")
import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from isotope.server.app import create_app
from isotope.server.auth import Keys
from isotope.server.gate import OPEN_PATHS
from isotope.server.mcp import create_mcp
from isotope.server.operations import BY_TOOL, OPERATIONS, Operation, permit, writes

KEYS = {"admin": "a" * 24, "admin read-only": "r" * 24, "user": "u" * 24,
        "user read-only": "v" * 24, "another project's": "o" * 24}
LINES = {"admin": "", "admin read-only": "read", "user": "write user=bob",
         "user read-only": "read user=bob", "another project's": "projects=beta"}
GATE_READ_ONLY = "this API key may only read"
NOT_ADMIN = "needs an administrator's API key"

# What each key of the project gets, written here and not read from the table under test
# (a walk whose refusals came from the table checked the table against itself): None, the
# call succeeds; READ_ONLY, the gate refuses a read-only key (403, or the JSON-RPC error
# of MCP's guard) before the call; ADMIN, a user's key is refused (403, an error result).
READ_ONLY, ADMIN = "read-only", "administrator"
ANYONE: dict[str, str | None] = {"admin": None, "admin read-only": None, "user": None,
                                 "user read-only": None}
ADMINS = {**ANYONE, "user": ADMIN, "user read-only": ADMIN}
ADMIN_WRITES = {**ANYONE, "admin read-only": READ_ONLY, "user": ADMIN,
                "user read-only": READ_ONLY}
EXPECTED: dict[str, dict[str, str | None]] = {
    **dict.fromkeys(("search", "ask", "answer", "questions", "chunk_questions", "sources",
                     "status", "entities", "graph", "read_graph", "search_nodes",
                     "open_nodes"), ANYONE),
    # (a mark writes to the query log, but any key may give one: it waits for review)
    "feedback": ANYONE,
    "log": ADMINS,  # (what every user asked)
    **dict.fromkeys(("delete", "add_question", "edit_question", "disable_question",
                     "enable_question", "ingest", "sync"), ADMIN_WRITES),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder
           ) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("operations")
    docs = tmp / "docs"
    docs.mkdir()
    (docs / "coffee.md").write_text("# Coffee\n\nThe alpha team brews cardamom coffee.\n")
    (tmp / "throwaway").mkdir()
    alpha = Isotope.open(tmp / "alpha", embedder=embedder, llm=FakeLLM(), cache=False,
                         graph=True)
    beta = Isotope.open(tmp / "beta", embedder=embedder, llm=FakeLLM(), cache=False)
    alpha.ingest(docs, allow=["public"])
    keys_file = tmp / "keys"
    keys_file.write_text("".join(f"{KEYS[k]} {LINES[k]}\n" for k in KEYS))
    keys = Keys.from_settings(Settings(api_keys_file=keys_file))
    options: dict[str, Any] = {"keys": keys, "roots": [docs.resolve()],
                               "max_bytes": 1_000_000}
    other = create_app(beta, uploads=tmp / "up-beta", gate=False, **options)
    app = create_app(alpha, uploads=tmp / "up-alpha", project="alpha",
                     projects={"beta": other}, **options)
    source = str((docs / "coffee.md").resolve())
    chunk = alpha.search("cardamom coffee", k=1).results[0].chunk.id
    with served_on_loopback(app) as url:
        yield {"url": url, "app": app, "docs": docs, "chunk": chunk, "iso": alpha, "keys": keys,
               "source": source, "throwaway": tmp / "throwaway", "made": itertools.count()}
    alpha.close()
    beta.close()


def _request(op: Operation, method: str, route: str, server: dict[str, Any],
             searched: dict[str, Any] | None = None) -> dict[str, Any]:
    """A valid request of the route, one that succeeds for a key that may make it: what
    it acts on is made for it (a source to delete, a question to edit, disable or
    enable, a new question's text), and it marks or answers ``searched`` (a reply of
    ``POST /search`` made with the same key)."""
    iso, n = server["iso"], next(server["made"])
    chunk, question, source = server["chunk"], "", ""
    if op.name in ("delete", "add_question", "edit_question", "disable_question",
                   "enable_question"):  # (a source of its own: no question twice)
        made = server["throwaway"] / f"made-{n}.md"
        made.write_text(f"# Made\n\nThe walk made file number {n} to change.\n")
        iso.ingest(made, allow=["public"])
        source = str(made.resolve())
        chunk = iso.store.export_source(source).chunks[0].id  # type: ignore[union-attr]
        question = iso.questions(chunk_id=chunk)[0].id
        if op.name == "enable_question":
            iso.disable_question(question)
    path = (route.replace("{chunk_id}", chunk).replace("{question_id}", question)
            .replace("{source:path}", source.lstrip("/")))
    searched = searched or {"query": "coffee"}
    marked = next((r["chunk"]["id"] for r in searched.get("results", [])), server["chunk"])
    bodies: dict[str, dict[str, Any]] = {
        "search": {"json": {"query": "coffee", "k": 1}},
        "ask": {"json": {"query": "coffee", "k": 1}},
        "answer": {"json": searched},
        "questions": {"params": {"sample": 1}},
        "graph": {"params": {"entity": "Coffee"}},
        "read_graph": {"params": {"query": "coffee"}},
        "feedback": {"json": {"query_id": searched.get("query_id") or "f" * 16,
                              "chunk_id": marked}},
        "delete": {"params": {"source": source}} if "{" not in route else {},
        "add_question": {"json": {"text": "Which file did the walk make to change?"}},
        "edit_question": {"json": {"text": "What did the walk make a file for?"}},
        "ingest": {"files": {"files": ("tea.md", b"# Tea\n\nThe beta team drinks tea.\n")}},
        "sync": {"json": {"paths": [str(server["docs"])]}},
    }
    return {"method": method, "url": server["url"] + path, **bodies.get(op.name, {})}


def _expected(op: Operation, key: str | None) -> str | None:
    """What ``key`` gets for ``op`` (:data:`EXPECTED`; no key: 401, another project's:
    404, before any route of this project)."""
    if key is None or key == "another project's":
        return key or "no key"
    return EXPECTED[op.name][key]


# What of a reply (or of an operation's work) each key of the project is given, for
# each row of isotope.access.ENTITLED, written here too: True, given (the owner's and an
# administrator's, whatever the key's scope); False, left out (a user's key).
SHOWN = {"admin": True, "admin read-only": True, "user": False, "user read-only": False}
SHAPED = {"search": {"learned_questions"}, "ask": {"learned_questions"},
          "questions": {"learned_questions"}, "chunk_questions": {"learned_questions"},
          "feedback": {"learning_at_once"}, "sources": {"access_lists"},
          "status": {"index_details"}, "delete": {"hidden_members"}}
"""The operations whose reply or work is shaped by whether the key is an
administrator's, and by what (the table's ``shapes``, written here)."""


def test_the_walk_has_a_row_for_every_operation() -> None:
    assert set(EXPECTED) == {op.name for op in OPERATIONS}
    assert all(set(row) == set(ANYONE) for row in EXPECTED.values())


@pytest.mark.parametrize("key", [*KEYS, None])
def test_every_route_of_the_table_does_what_the_key_may(server: dict[str, Any],
                                                        key: str | None) -> None:
    """Each route with a valid request: a key that may make it succeeds (2xx: a 404 of
    a thing not found, a 500, or a 422 is a failure), one that may not is refused as
    :data:`EXPECTED` says."""
    headers = {} if key is None else {"Authorization": f"Bearer {KEYS[key]}"}
    searched = httpx.post(server["url"] + "/search", json={"query": "coffee", "k": 1},
                          headers=headers, timeout=60)
    walked = 0
    for op in OPERATIONS:
        for method, route in op.http:
            reply = httpx.request(**_request(op, method, route, server, searched.json()
                                             if searched.is_success else None),
                                  headers=headers, timeout=60)
            expected = _expected(op, key)
            said = f"{op.name}: {method} {route} with {key}: {reply.status_code} {reply.text}"
            if expected is None:
                assert reply.is_success, said
            elif expected == "no key":
                assert reply.status_code == 401 and "a valid API key is needed" in reply.text, \
                    said
            elif expected == "another project's":
                assert reply.status_code == 404 and "no route" in reply.text, said
            elif expected == READ_ONLY:  # (the gate's: before the body was read)
                assert reply.status_code == 403 and reply.json()["error"] == GATE_READ_ONLY, \
                    said
            else:
                assert reply.status_code == 403 and NOT_ADMIN in reply.text, said
            walked += 1
    assert walked == sum(len(op.http) for op in OPERATIONS) >= 17


def _tool_calls(server: dict[str, Any], query_id: str = "f" * 16,
                chunk: str | None = None) -> dict[str, dict[str, Any]]:
    """Valid arguments of each tool (``query_id``, ``chunk``: a result of a search made
    with the same key, for ``feedback``)."""
    return {"search": {"query": "coffee", "k": 1}, "ask": {"query": "coffee", "k": 1},
            "feedback": {"query_id": query_id, "chunk_id": chunk or server["chunk"]},
            "list_sources": {}, "ingest": {"paths": [server["source"]]},
            "graph": {"entity": "coffee"}, "read_graph": {}, "search_nodes": {"query": "coffee"},
            "open_nodes": {"names": ["Coffee"]}}


@pytest.mark.parametrize("key", [*KEYS, None])
def test_every_tool_of_the_table_does_what_the_key_may(server: dict[str, Any],
                                                       key: str | None) -> None:
    """Each MCP tool with valid arguments: a key that may call it gets a result that is
    no error (any error, a ``ValueError`` a tool raised included, is a failure), one that
    may not is refused as :data:`EXPECTED` says."""
    import mcp

    headers = {} if key is None else {"Authorization": f"Bearer {KEYS[key]}"}
    if key in (None, "another project's"):  # refused before any tool is listed
        reply = httpx.post(server["url"] + "/mcp/", headers=headers, json={
            "jsonrpc": "2.0", "id": 1, "method": "initialize"})
        assert reply.status_code == (401 if key is None else 404)
        return

    async def walk() -> dict[str, tuple[str, str] | None]:
        said: dict[str, tuple[str, str] | None] = {}
        client = httpx.AsyncClient(headers=headers, timeout=60)
        async with streamable_http_client(server["url"] + "/mcp/", http_client=client) as (
                read, write, _), ClientSession(read, write) as session:
            await session.initialize()
            found = json.loads((await session.call_tool("search", {
                "query": "coffee", "k": 1})).content[0].text)
            for name, arguments in _tool_calls(server, found["query_id"], found[
                    "results"][0]["chunk_id"]).items():
                try:
                    done = await session.call_tool(name, arguments)
                except mcp.McpError as exc:  # (the guard's JSON-RPC error)
                    said[name] = ("JSON-RPC error", str(exc))
                    continue
                said[name] = ("error result", done.content[0].text) if done.isError \
                    else None
        return said

    said = anyio.run(walk)
    assert set(said) == set(BY_TOOL)
    for name, error in said.items():
        expected = _expected(BY_TOOL[name], key)
        if expected is None:
            assert error is None, (name, key, error)
        elif expected == READ_ONLY:  # (the guard's, before the tool is called)
            assert error == ("JSON-RPC error", f"{GATE_READ_ONLY}: {name} needs a "
                             "read-write key"), (name, key, error)
        else:
            assert error is not None and error[0] == "error result" and NOT_ADMIN in error[
                1], (name, key, error)


def test_the_table_and_the_shells_name_the_same_operations(server: dict[str, Any]) -> None:
    """Every route of the app is in the table (or open: the page, health, the schema),
    every route of the table is the app's; the same for the MCP tools and the CLI."""
    from typer.main import get_command

    from isotope.cli import app as cli

    routes = {(method.upper(), path) for path, methods in server["app"].openapi()[
        "paths"].items() for method in methods}  # (every route but the page's)
    listed = {(method, route.replace(":path", "")) for op in OPERATIONS
              for method, route in op.http}
    assert {r for r in routes if r[1] not in OPEN_PATHS} == listed
    tools = anyio.run(create_mcp(server["iso"], remote=True).list_tools)
    assert {t.name for t in tools} == set(BY_TOOL)
    group = get_command(cli)
    for op in OPERATIONS:
        if op.cli is not None:
            command: Any = group
            for word in op.cli.split():
                command = command.commands[word]  # type: ignore[union-attr]


def test_permit_and_the_gate_read_the_table() -> None:
    from isotope.access import Principal
    from isotope.server.operations import Forbidden

    bob = Principal.parse("user:bob")
    assert permit("search", bob, "read").name == "search"
    with pytest.raises(Forbidden, match="may only read: deleting a source"):
        permit("delete", None, "read")
    with pytest.raises(Forbidden, match="deleting a source needs an administrator"):
        permit("delete", bob, "write")
    assert writes("DELETE", "/sources/docs/a%23b.md") and writes("POST", "/chunks/x/questions")
    assert not writes("GET", "/chunks/x/questions") and not writes("POST", "/feedback")
    assert not writes("POST", "/chunks/x/y/questions") and not writes("POST", "/search")
    # as Starlette matches a route: a trailing newline, an empty path (the review found
    # both let a read-only key's body past the gate)
    assert writes("POST", "/chunks/x/questions\n") and writes("DELETE", "/sources/")


def test_http_and_mcp_search_answer_and_write_in_the_same_turns(
        server: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Only HTTP searches took the search slots, and each shell wrote its own answering
    in a slot: one ``Turns`` per served index now takes both shells' searches, answers
    and writes."""
    from isotope.server.work import Turns

    taken: list[tuple[int, str]] = []
    for name in ("search", "answer", "write"):
        real = getattr(Turns, name)

        async def counted(self: Turns, *args: Any, _real: Any = real, _name: str = name,
                          **kwargs: Any) -> Any:
            taken.append((id(self), _name))
            return await _real(self, *args, **kwargs)

        monkeypatch.setattr(Turns, name, counted)
    headers = {"Authorization": f"Bearer {KEYS['admin']}"}
    calls = _tool_calls(server)
    for name, path in (("search", "/search"), ("ask", "/ask"), ("feedback", "/feedback")):
        body = calls[name] if name != "feedback" else {**calls[name], "useful": True}
        httpx.post(server["url"] + path, json=body, headers=headers, timeout=60)
    over_http = list(taken)

    async def agent() -> None:
        client = httpx.AsyncClient(headers=headers, timeout=60)
        async with streamable_http_client(server["url"] + "/mcp/", http_client=client) as (
                read, write, _), ClientSession(read, write) as session:
            await session.initialize()
            for name in ("search", "ask", "feedback"):
                await session.call_tool(name, calls[name])

    anyio.run(agent)
    over_mcp = taken[len(over_http):]
    kinds = ["search", "search", "answer", "write"]  # (ask: its search, then its answer)
    assert [k for _, k in over_http] == kinds and [k for _, k in over_mcp] == kinds
    assert len({turns for turns, _ in taken}) == 1


def test_every_shell_makes_the_call_the_table_names(
        server: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The table names the method of ``Isotope`` each operation is; each shell is watched
    making that call for it, over HTTP (every route), MCP (every tool) and the CLI (every
    command), so docs/architecture.md's claim that a shell is one call of the library is
    checked, not only its names."""
    from typer.testing import CliRunner

    from isotope.cli import app as cli

    made: list[str] = []
    for name in {op.call for op in OPERATIONS}:
        real = getattr(Isotope, name)

        def watched(self: Isotope, *args: Any, _real: Any = real, _name: str = name,
                    **kwargs: Any) -> Any:
            made.append(_name)
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(Isotope, name, watched)
    iso, docs, chunk = server["iso"], server["docs"], server["chunk"]
    headers = {"Authorization": f"Bearer {KEYS['admin']}"}
    missed = []
    for op in OPERATIONS:
        for method, route in op.http:
            request = _request(op, method, route, server)  # (what it acts on is there)
            made.clear()
            reply = httpx.request(**request, headers=headers, timeout=60)
            if op.call not in made:
                missed.append(f"HTTP {method} {route}: {made} ({reply.status_code})")

    async def agent() -> dict[str, list[str]]:
        seen: dict[str, list[str]] = {}
        client = httpx.AsyncClient(headers=headers, timeout=60)
        async with streamable_http_client(server["url"] + "/mcp/", http_client=client) as (
                read, write, _), ClientSession(read, write) as session:
            await session.initialize()
            for tool, arguments in _tool_calls(server).items():
                made.clear()
                await session.call_tool(tool, arguments)
                seen[tool] = list(made)
        return seen

    for tool, seen in anyio.run(agent).items():
        if BY_TOOL[tool].call not in seen:
            missed.append(f"MCP {tool}: {seen}")
    monkeypatch.setenv("ISOTOPE_QUESTION_MODEL", "fake/echo")
    monkeypatch.setenv("ISOTOPE_ANSWER_MODEL", "fake/echo")
    index = str(iso.settings.index)
    source = str((docs / "coffee.md").resolve())
    arguments = {
        "query": ["coffee", "--raw"], "ask": ["coffee"], "questions show": [source],
        "feedback": ["f" * 16, chunk], "list": [], "status": [], "log": [],
        "delete": ["/no-such.md"], "questions add": [source, "Who brews coffee?"],
        "questions edit": ["f" * 16, "Who brews tea?"], "questions disable": ["f" * 16],
        "questions enable": ["f" * 16], "ingest": [source], "sync": [str(docs)],
        "entities": [], "graph show": ["coffee"], "graph export": [],
    }
    for op in OPERATIONS:
        if op.cli is None:
            continue
        made.clear()
        done = CliRunner().invoke(cli, [*op.cli.split(), *arguments[op.cli], "--index",
                                        index])
        if op.call not in made:
            missed.append(f"CLI {op.cli}: {made} ({done.exit_code}: {done.output[-300:]})")
    assert missed == []
    assert len({op.call for op in OPERATIONS}) >= 14


def test_every_decision_for_administrators_is_a_row_of_the_table() -> None:
    """Each "is this an administrator" decision of the library and the server is a row
    of ``access.ENTITLED``, named by the operations it shapes (their ``shapes``), and
    ``access.entitled`` answers it for every kind of key as :data:`SHOWN` says."""
    from isotope.access import ENTITLED, entitled

    assert {op.name: set(op.shapes) for op in OPERATIONS if op.shapes} == SHAPED
    assert set().union(*SHAPED.values()) == set(ENTITLED)
    with pytest.raises(KeyError):
        entitled("no such decision", None)
    assert all(entitled(what, None) for what in ENTITLED)  # (the owner: no key)


@pytest.mark.parametrize("key", list(SHOWN))
def test_every_shaped_reply_shows_what_the_key_may(server: dict[str, Any], key: str) -> None:
    """Each key kind over HTTP: a source's access lists (``GET /sources``), the index's
    details (``GET /status``), a chunk's learned questions (``GET /chunks/{id}/questions``,
    ``GET /questions``) are shown as :data:`SHOWN` says; and what no route of this server
    shows a user (it holds every mark for review, and deleting needs an administrator),
    asked of the library with the principal and scope the server gives the key: whether
    a learned question raises its chunk (``searching.confirming``) and a useful mark
    learns at once (``learning.learn_mode``)."""
    from isotope.search.learning import learn_mode
    from isotope.search.searching import confirming

    iso, n = server["iso"], next(server["made"])
    made = server["throwaway"] / f"learned-{n}.md"
    made.write_text(f"# Learned\n\nThe walk made file number {n} to learn from.\n")
    iso.ingest(made, allow=["public"])
    source = str(made.resolve())
    chunk = iso.store.export_source(source).chunks[0].id  # type: ignore[union-attr]
    asked = f"which file did walk {n} learn from"
    found = iso.search(asked, k=1, filters={"source": source})
    marked = iso.feedback(found.query_id or "", chunk, True)
    if marked.learned == "pending":
        iso.review_questions([f"{found.query_id}:{chunk}"])
    assert any(q.text == asked for q in iso.chunk_questions(chunk).questions)

    headers = {"Authorization": f"Bearer {KEYS[key]}"}

    def got(path: str, **params: Any) -> Any:
        reply = httpx.get(server["url"] + path, params=params, headers=headers, timeout=60)
        assert reply.is_success, (path, key, reply.text)
        return reply.json()

    listed = got("/sources")
    assert listed and all(("access" in s) is SHOWN[key] for s in listed), (key, listed)
    assert bool(got("/status")["index"]) is SHOWN[key]
    texts = [q["text"] for q in got(f"/chunks/{chunk}/questions")["questions"]]
    assert (asked in texts) is SHOWN[key], (key, texts)
    texts = [q["text"] for q in got("/questions", source=source)]
    assert (asked in texts) is SHOWN[key], (key, texts)
    _, principal, _ = server["keys"].lookup(KEYS[key])
    assert ("user" in confirming(principal, show_learned=False)) is SHOWN[key]
    assert (learn_mode(None, principal) == "auto") is SHOWN[key]


def test_every_tool_is_made_from_its_row(server: dict[str, Any]) -> None:
    """MCP's tools are the table's rows that name one (a server that may not write has
    none that writes), each described by its method and taking its arguments, never
    who asks (the check made for every tool gives it)."""
    from isotope.server.mcp import INGEST, Tools

    for writable in (True, False):
        tools = anyio.run(create_mcp(server["iso"], writable=writable).list_tools)
        assert [t.name for t in tools] == [op.mcp for op in OPERATIONS
                                           if op.mcp and (writable or not op.writes)]
        for tool in tools:
            assert "principal" not in tool.inputSchema["properties"]
            assert "ctx" not in tool.inputSchema["properties"]
            method = getattr(Tools, tool.name)
            assert tool.description == (method.__doc__ or INGEST + tool.description[len(
                INGEST):]), tool.name
