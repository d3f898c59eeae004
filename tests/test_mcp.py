"""isotope as an MCP server, driven by the official SDK's client: over stdio
(``isotope mcp`` in its own process) and over streamable HTTP at ``/mcp`` of a real
uvicorn server on loopback, with its API keys."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from isotope import Isotope
from isotope._version import __version__
from isotope.embedders import Embedder
from isotope.settings import Settings

from conftest import served_on_loopback

mcp = pytest.importorskip("mcp", reason="pip install 'isotopedb[server]'")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from isotope.server.app import create_app  # noqa: E402
from isotope.server.auth import Keys  # noqa: E402

WRITE_KEY = "w" * 24
READ_KEY = "r" * 24
QUERY = "How many vacation days do new employees get?"


def _payload(result: Any) -> Any:
    """A tool result's JSON (structured content when given, else its text)."""
    if getattr(result, "structuredContent", None):
        content = result.structuredContent
        return content.get("result", content)
    return json.loads(result.content[0].text)


def test_stdio_tools_search_and_list(iso: Isotope, examples: Path, tmp_path: Path) -> None:
    iso.ingest(examples)
    index = str(iso.settings.index)
    iso.close()

    async def run() -> None:
        params = StdioServerParameters(command=sys.executable,
                                       args=["-m", "isotope", "mcp", "--index", index])
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            started = await s.initialize()
            assert started.serverInfo.version == __version__  # (it was the SDK's)
            for bad in (0, 51):  # one line, no validation dump with a link
                refused = await s.call_tool("search", {"query": QUERY, "k": bad})
                said = refused.content[0].text
                assert refused.isError and "from 1 to 50" in said and "http" not in said
            names = {t.name for t in (await s.list_tools()).tools}
            assert names == {"search", "ask", "feedback", "list_sources", "ingest", "graph",
                             "read_graph", "search_nodes", "open_nodes"}
            found = _payload(await s.call_tool("search", {"query": QUERY, "k": 3}))
            assert Path(found["results"][0]["source"]).name == "handbook.md"
            assert found["results"][0]["matched_questions"]
            listed = _payload(await s.call_tool("list_sources", {}))
            assert len(listed) == 4

    anyio.run(run)


def _connect(url: str, headers: dict[str, str]) -> Any:
    import httpx

    return streamable_http_client(url, http_client=httpx.AsyncClient(headers=headers))


@pytest.fixture
def http_server(iso: Isotope, examples: Path, tmp_path: Path) -> Iterator[str]:
    iso.ingest(examples / "handbook.md")
    keys = Keys.from_settings(Settings(api_keys=[WRITE_KEY, f"{READ_KEY}:read"]))
    with served_on_loopback(create_app(iso, keys=keys, roots=[examples.resolve()],
                                       max_bytes=1_000_000, uploads=tmp_path / "up")) as url:
        yield url + "/mcp/"


def test_http_tools_with_a_write_key(http_server: str, examples: Path) -> None:
    async def run() -> None:
        headers = {"Authorization": f"Bearer {WRITE_KEY}"}
        async with _connect(http_server, headers) as (read, write, _), \
                ClientSession(read, write) as s:
            await s.initialize()
            found = _payload(await s.call_tool("search", {"query": QUERY}))
            assert Path(found["results"][0]["source"]).name == "handbook.md"
            answered = _payload(await s.call_tool("ask", {"query": QUERY}))
            assert answered["answer"] and answered["citations"]
            done = _payload(await s.call_tool("ingest", {"paths": [str(examples / "faq.html")]}))
            assert done["ok"] and len(done["added"]) == 1
            outside = await s.call_tool("ingest", {"paths": ["/etc"]})
            assert outside.isError and "serve_roots" in outside.content[0].text
            assert len(_payload(await s.call_tool("list_sources", {}))) == 2

    anyio.run(run)


def test_http_read_key_cannot_ingest_and_no_key_gets_nothing(http_server: str,
                                                             examples: Path) -> None:
    import httpx

    async def run() -> None:
        headers = {"Authorization": f"Bearer {READ_KEY}"}
        async with _connect(http_server, headers) as (read, write, _), \
                ClientSession(read, write) as s:
            await s.initialize()
            assert _payload(await s.call_tool("search", {"query": QUERY}))["results"]
            with pytest.raises(mcp.McpError, match="may only read"):
                await s.call_tool("ingest", {"paths": [str(examples / "faq.html")]})
            assert _payload(await s.call_tool("list_sources", {}))  # the session goes on

    anyio.run(run)
    refused = httpx.post(http_server, json={"jsonrpc": "2.0", "id": 1, "method": "initialize"})
    assert refused.status_code == 401


def test_a_closed_http_session_logs_no_error(http_server: str,
                                             caplog: pytest.LogCaptureFixture) -> None:
    """The SDK logged every MCP-over-HTTP session that ended as ``ERROR ... Error in
    standalone SSE writer`` with a traceback."""
    import logging

    async def run() -> None:
        headers = {"Authorization": f"Bearer {READ_KEY}"}
        async with _connect(http_server, headers) as (read, write, _), \
                ClientSession(read, write) as s:
            await s.initialize()
            await s.list_tools()

    with caplog.at_level(logging.DEBUG, logger="mcp"):
        for _ in range(3):
            anyio.run(run)
        import time

        time.sleep(0.5)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


# -- what the server says it does (issue 64) --------------------------------------------
def test_the_help_and_the_instructions_name_every_tool_and_ingest_says_what_it_reads(
        iso: Isotope, examples: Path, tmp_path: Path) -> None:
    """`isotope mcp --help` listed 5 tools of 8, the instructions named none of the graph
    tools, and `ingest` said "only paths below serve_roots" where over stdio it reads any
    path: the help is made from the table the tools are registered from, and each
    transport's server describes its own rule, which its `ingest` then keeps."""
    from typer.testing import CliRunner

    from isotope.cli import app
    from isotope.server.mcp import create_mcp

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "note.md").write_text("# Note\n\nThe east door opens at seven.\n")

    def described(server: Any) -> tuple[str, dict[str, str]]:
        tools = anyio.run(server.list_tools)
        return server.instructions, {t.name: t.description for t in tools}

    said = " ".join(CliRunner().invoke(app, ["mcp", "--help"]).output.split())
    local, tools = described(create_mcp(iso))
    assert len(tools) == 9 and "graph" in tools
    for name in tools:
        assert f"`{name}`" in local, name
        assert name in said, name
    assert "any path" in tools["ingest"] and "any path" in local
    # over stdio without serve_roots it reads any path, as it says
    done = anyio.run(lambda: create_mcp(iso).call_tool("ingest", {"paths": [str(outside)]}))
    assert not done.isError and done.structuredContent["added"] == [
        str((outside / "note.md").resolve())]
    confined, tools = described(create_mcp(iso, roots=[examples.resolve()]))
    assert "only paths below" in tools["ingest"] and "only paths below" in confined
    remote, tools = described(create_mcp(iso, remote=True, roots=[examples.resolve()]))
    assert "only paths below" in tools["ingest"] and "only paths below" in remote
    off, tools = described(create_mcp(iso, remote=True))
    assert "off on this server" in tools["ingest"] and "off on this server" in off
    reader, tools = described(create_mcp(iso, writable=False))
    assert "ingest" not in tools and "`ingest`" not in reader
    assert all(f"`{name}`" in reader for name in tools)


def test_the_graph_tool_walks_hops_as_the_caller_may_see(tmp_path: Path,
                                                        embedder: Embedder) -> None:
    """The walk of `isotope graph --hops` as the MCP tool `graph`, in the Memory server's
    shapes, over HTTP: the administrator's key reaches the HR source's entities two hops
    away, a user's key outside HR none of them (nor their statements), and a name it may
    not see is not found, with no hidden name offered in its place."""
    import httpx

    from test_graph import EVE, _docs, _open

    admin, eve = "a" * 24, "e" * 24
    keys_file = tmp_path / "keys"
    keys_file.write_text(f"{admin}\n{eve} read user={EVE.user}\n")
    iso = _open(tmp_path / "index", embedder)
    iso.ingest(_docs(tmp_path / "docs"))
    app = create_app(iso, keys=Keys.from_settings(Settings(api_keys_file=keys_file)),
                     roots=[], max_bytes=1_000_000, uploads=tmp_path / "up")

    async def walk(key: str) -> dict[str, Any]:
        said: dict[str, Any] = {}
        async with _connect(url, {"Authorization": f"Bearer {key}"}) as (read, write, _), \
                ClientSession(read, write) as s:
            await s.initialize()
            said["one"] = _payload(await s.call_tool("graph", {"entity": "Sydney Opera House"}))
            said["two"] = _payload(await s.call_tool("graph", {"entity": "Sydney Opera House",
                                                               "hops": 2}))
            hidden = await s.call_tool("graph", {"entity": "Copenhagn"})
            said["hidden"] = hidden.content[0].text if hidden.isError else None
            said["far"] = (await s.call_tool("graph", {"entity": "Utzon", "hops": 4})).isError
            said["opened"] = _payload(await s.call_tool("open_nodes", {
                "names": ["Copenhagn", "Sydney Opera"]}))
        return said

    try:
        with served_on_loopback(app) as base:
            url = base + "/mcp/"
            full, seen = anyio.run(walk, admin), anyio.run(walk, eve)
            routed = httpx.get(base + "/graph/memory", params={  # (the walk over HTTP)
                "entity": "Sydney Opera House", "hops": 2},
                headers={"Authorization": f"Bearer {eve}"}).json()
    finally:
        iso.close()
    assert set(full["two"]) == {"center", "hops", "entities", "relations", "truncated"}
    assert full["two"]["center"] == "Sydney Opera House" and full["two"]["hops"] == 2
    names = {e["name"] for e in full["two"]["entities"]}
    assert {"Copenhagen", "Pritzker Prize"} <= names
    assert {"Copenhagen", "Pritzker Prize"}.isdisjoint(e["name"] for e in full["one"][
        "entities"])
    assert {"from": "Jørn Utzon", "to": "Copenhagen", "relationType": "was born in"} in (
        full["two"]["relations"])
    assert all(set(e) == {"name", "entityType", "observations"}
               for e in full["two"]["entities"])
    assert "did you mean 'Copenhagen'" in full["hidden"]
    assert full["far"] and seen["far"]
    # the user outside HR: the same walk holds nothing of the HR source
    shown = json.dumps(seen["two"])
    assert {e["name"] for e in seen["two"]["entities"]} == {"Sydney Opera House",
                                                            "Jørn Utzon"}
    assert "Copenhagen" not in shown and "1918" not in shown and "Pritzker" not in shown
    assert routed == seen["two"]
    assert "no entity named 'Copenhagn'" in seen["hidden"]
    assert "Copenhagen'" not in seen["hidden"]
    assert seen["opened"]["not_found"] == [
        {"name": "Copenhagn", "did_you_mean": []},
        {"name": "Sydney Opera", "did_you_mean": ["Sydney Opera House"]}]
    assert full["opened"]["not_found"][0] == {"name": "Copenhagn",
                                              "did_you_mean": ["Copenhagen"]}


def test_ingest_and_ask_send_progress_when_the_call_asks_for_it(http_server: str,
                                                                 examples: Path) -> None:
    """``ingest`` and ``ask`` said nothing until they ended (issue 64: an agent saw a
    minutes-long call without a word). A call carrying a ``progressToken`` gets
    ``notifications/progress``: each greater than the last, an ingest's files and then
    its chunks' questions, ask's search and then its answer."""
    seen: dict[str, list[tuple[float, float | None, str | None]]] = {"ingest": [], "ask": []}

    def noting(name: str) -> Any:
        async def note(progress: float, total: float | None, message: str | None) -> None:
            seen[name].append((progress, total, message))
        return note

    async def run() -> None:
        headers = {"Authorization": f"Bearer {WRITE_KEY}"}
        async with _connect(http_server, headers) as (read, write, _), \
                ClientSession(read, write) as s:
            await s.initialize()
            done = await s.call_tool("ingest", {"paths": [str(examples)]},
                                     progress_callback=noting("ingest"))
            assert not done.isError and _payload(done)["ok"]
            answered = await s.call_tool("ask", {"query": QUERY},
                                         progress_callback=noting("ask"))
            assert _payload(answered)["answer"]
            plain = await s.call_tool("search", {"query": QUERY})  # (none asked: none sent)
            assert not plain.isError

    anyio.run(run)
    for name, notes in seen.items():
        values = [v for v, _, _ in notes]
        assert values and values == sorted(set(values)), (name, notes)
    messages = [m or "" for _, _, m in seen["ingest"]]
    assert any(m.startswith("documents:") for m in messages), messages
    assert any(m.startswith("questions:") for m in messages), messages
    last, total, _ = seen["ingest"][-1]
    assert total is not None and last == total
    assert [(v, t) for v, t, _ in seen["ask"]] == [(0, 2), (1, 2), (2, 2)]
    assert "answered" in (seen["ask"][-1][2] or "")
