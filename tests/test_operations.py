"""One table of what each operation may do (issue 43): isotope.server.operations names,
for every operation, whether it writes, whether it needs an administrator, and its HTTP
routes, MCP tool and CLI command. Here the table is checked against the shells (every
route, tool and command it names exists, and every route and tool of the shells is in
it), and walked whole with every kind of key (administrator, administrator read-only,
user, user read-only, a key of another project, none) over HTTP and MCP, so that a route
or tool that forgets its check fails. A real uvicorn server on loopback over two real
indexes (the fake model at the provider boundary)."""

from __future__ import annotations

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


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder
           ) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("operations")
    docs = tmp / "docs"
    docs.mkdir()
    (docs / "coffee.md").write_text("# Coffee\n\nThe alpha team brews cardamom coffee.\n")
    alpha = Isotope.open(tmp / "alpha", embedder=embedder, llm=FakeLLM(), cache=False)
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
    chunk = next(iter(alpha.store.stored_chunks(str((docs / "coffee.md").resolve()))))
    with served_on_loopback(app) as url:
        yield {"url": url, "app": app, "docs": docs, "chunk": chunk, "iso": alpha}
    alpha.close()
    beta.close()


def _request(op: Operation, method: str, route: str, server: dict[str, Any]
             ) -> dict[str, Any]:
    """A request the route's handler reaches (a valid body), doing as little as it can:
    a source or question that is not there, a search of one result."""
    path = (route.replace("{chunk_id}", server["chunk"])
            .replace("{question_id}", "f" * 16).replace("{source:path}", "no-such.md"))
    bodies: dict[str, dict[str, Any]] = {
        "search": {"json": {"query": "coffee", "k": 1}},
        "ask": {"json": {"query": "coffee", "k": 1}},
        "answer": {"json": {"query": "coffee"}},
        "questions": {"params": {"sample": 1}},
        "graph": {"params": {"entity": "coffee"}},
        "read_graph": {"params": {"query": "coffee"}},
        "feedback": {"json": {"query_id": "f" * 16, "chunk_id": server["chunk"]}},
        "delete": {"params": {"source": "/no-such.md"}} if "{" not in route else {},
        "add_question": {"json": {"text": "Which team brews cardamom coffee?"}},
        "edit_question": {"json": {"text": "Who brews cardamom coffee?"}},
        "ingest": {"files": {"files": ("tea.md", b"# Tea\n\nThe beta team drinks tea.\n")}},
        "sync": {"json": {"paths": [str(server["docs"])]}},
    }
    return {"method": method, "url": server["url"] + path, **bodies.get(op.name, {})}


def _refusal(op: Operation, key: str | None) -> tuple[int, str] | None:
    """The status and words the table says a key gets (None: let through)."""
    if key is None:
        return 401, "a valid API key is needed"
    if key == "another project's":
        return 404, "no route"
    if op.writes and key.endswith("read-only"):
        return 403, GATE_READ_ONLY
    if op.admin and key.startswith("user"):
        return 403, "needs an administrator's API key"
    return None


@pytest.mark.parametrize("key", [*KEYS, None])
def test_every_route_of_the_table_refuses_whom_the_table_says(server: dict[str, Any],
                                                              key: str | None) -> None:
    headers = {} if key is None else {"Authorization": f"Bearer {KEYS[key]}"}
    walked = 0
    for op in OPERATIONS:
        for method, route in op.http:
            reply = httpx.request(**_request(op, method, route, server), headers=headers,
                                  timeout=60)
            refused = _refusal(op, key)
            said = f"{op.name}: {method} {route} with {key}: {reply.status_code} {reply.text}"
            if refused is None:
                assert reply.status_code not in (401, 403, 404) or (
                    reply.status_code == 404 and "no route" not in reply.text), said
            else:
                assert reply.status_code == refused[0] and refused[1] in reply.text, said
                if refused[1] == GATE_READ_ONLY:  # (the gate's: before the body was read)
                    assert reply.json()["error"] == GATE_READ_ONLY, said
            walked += 1
    assert walked == sum(len(op.http) for op in OPERATIONS) >= 17


def _tool_calls(server: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {"search": {"query": "coffee", "k": 1}, "ask": {"query": "coffee", "k": 1},
            "feedback": {"query_id": "f" * 16, "chunk_id": server["chunk"]},
            "list_sources": {}, "ingest": {"paths": [str(server["docs"] / "coffee.md")]},
            "graph": {"entity": "coffee"}, "read_graph": {}, "search_nodes": {"query": "coffee"},
            "open_nodes": {"names": ["coffee"]}}


@pytest.mark.parametrize("key", [*KEYS, None])
def test_every_tool_of_the_table_refuses_whom_the_table_says(server: dict[str, Any],
                                                             key: str | None) -> None:
    import mcp

    headers = {} if key is None else {"Authorization": f"Bearer {KEYS[key]}"}
    calls = _tool_calls(server)
    if key in (None, "another project's"):  # refused before any tool is listed
        reply = httpx.post(server["url"] + "/mcp/", headers=headers, json={
            "jsonrpc": "2.0", "id": 1, "method": "initialize"})
        assert reply.status_code == (401 if key is None else 404)
        return

    async def walk() -> dict[str, str | None]:
        said: dict[str, str | None] = {}
        client = httpx.AsyncClient(headers=headers, timeout=60)
        async with streamable_http_client(server["url"] + "/mcp/", http_client=client) as (
                read, write, _), ClientSession(read, write) as session:
            await session.initialize()
            for name, arguments in calls.items():
                try:
                    done = await session.call_tool(name, arguments)
                except mcp.McpError as exc:  # (the guard's JSON-RPC error)
                    said[name] = str(exc)
                    continue
                said[name] = done.content[0].text if done.isError else None
        return said

    said = anyio.run(walk)
    assert set(said) == set(BY_TOOL)
    for name, error in said.items():
        refused = _refusal(BY_TOOL[name], key)
        if refused is None:
            assert error is None or not any(w in error for w in (
                "may only read", "administrator")), (name, key, error)
        else:
            assert error is not None and refused[1] in error, (name, key, error)
            if refused[1] == GATE_READ_ONLY:  # (the guard's, before the tool is called)
                assert f"{name} needs a read-write key" in error, (name, key, error)


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
    throwaway = docs.parent / "throwaway"
    throwaway.mkdir(exist_ok=True)
    headers = {"Authorization": f"Bearer {KEYS['admin']}"}
    missed = []
    for op in OPERATIONS:
        for method, route in op.http:
            request = _request(op, method, route, server)
            if op.name == "delete":  # (a source that is there, so the call is made)
                gone = throwaway / f"gone-{len(made)}.md"
                gone.write_text("# Gone\n\nA file to delete.\n")
                iso.ingest(gone, allow=["public"])
                source = str(gone.resolve())
                request = ({**request, "params": {"source": source}} if "{" not in route
                           else {**request, "url": server["url"] + "/sources/" +
                                 source.lstrip("/")})
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
