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
            assert names == {"search", "ask", "feedback", "list_sources", "ingest", "read_graph",
                             "search_nodes", "open_nodes"}
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
