"""isotope as an MCP server for agents (the official ``mcp`` SDK): the tools ``search``,
``ask``, ``list_sources`` and, with write access, ``ingest``. ``isotope mcp`` serves them
over stdio; ``isotope serve`` also at ``/mcp`` (streamable HTTP), behind its API keys: a
read-only key cannot call ``ingest``.

The tools run the library in a worker thread, never on the event loop."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from isotope.reports import source_listing

if TYPE_CHECKING:
    from mcp.server.fastmcp import FastMCP

    from isotope.index import Isotope
    from isotope.server.auth import Keys

INSTRUCTIONS = (
    "A question-indexed search over the user's documents. Call `search` with a natural "
    "question; each result has the chunk, its source and the generated questions that "
    "matched. `suggested_action` says whether to deliver the first result, read several "
    "(query_more) or rephrase (refine_query). `ask` returns an answer citing the chunks.")


def create_mcp(iso: Isotope, *, roots: list[Path] | None = None, writable: bool = True,
               host: str = "127.0.0.1") -> FastMCP:
    """The MCP server over ``iso``. ``ingest`` only when ``writable``, and only for paths
    below ``roots`` when they are given. On a loopback ``host`` the HTTP transport checks
    the Host header (DNS rebinding: a web page must not reach a local server)."""
    from mcp.server.fastmcp import FastMCP
    from mcp.server.transport_security import TransportSecuritySettings

    local = host in ("127.0.0.1", "localhost", "::1")
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=local,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"] if local else [])
    server = FastMCP("isotope", instructions=INSTRUCTIONS, streamable_http_path="/",
                     host=host, transport_security=security)

    @server.tool()
    async def search(query: str, k: int = 5, mode: str | None = None,
                     filters: dict[str, Any] | None = None) -> dict[str, Any]:
        """Find the chunks that answer a question (with the questions that matched)."""
        found = await anyio.to_thread.run_sync(
            lambda: iso.search(query, k, mode=mode, filters=filters))
        return found.model_dump(mode="json")

    @server.tool()
    async def ask(query: str, k: int | None = None) -> dict[str, Any]:
        """Answer a question from the documents, citing the chunks used as [1], [2]."""
        answered = await anyio.to_thread.run_sync(lambda: iso.ask(query, k))
        return answered.model_dump(mode="json")

    @server.tool()
    async def list_sources() -> list[dict[str, Any]]:
        """The documents in the index, with their counts."""
        infos = await anyio.to_thread.run_sync(iso.sources)
        return [source_listing(info) for info in infos]

    if writable:
        @server.tool()
        async def ingest(paths: list[str]) -> dict[str, Any]:
            """Add files or folders to the index (a changed file replaces its old version)."""
            if any("\x00" in p for p in paths):
                raise ValueError("a path cannot hold a NUL character")
            wanted = [Path(p).expanduser().resolve() for p in paths]
            if roots is not None:
                outside = [str(p) for p in wanted
                           if not any(p == r or r in p.parents for r in roots)]
                if outside:
                    raise ValueError(f"not below the server's serve_roots: {outside}")
            report = await anyio.to_thread.run_sync(lambda: iso.ingest(wanted))
            return {"added": report.added, "replaced": report.replaced,
                    "unchanged": report.unchanged, "chunks": report.chunks,
                    "questions": report.questions,
                    "errors": [str(e) for e in report.errors], "ok": report.ok}

    return server


ASGI = Callable[[MutableMapping[str, Any], Callable[[], Awaitable[Any]],
                 Callable[[MutableMapping[str, Any]], Awaitable[None]]], Awaitable[None]]


def guard(inner: ASGI, keys: Keys, max_bytes: int = 1_000_000) -> ASGI:
    """``inner`` (the streamable HTTP app) behind the API keys: no key or a wrong one is
    401; a read-only key may list and call every tool but ``ingest`` (403)."""

    async def app(scope: MutableMapping[str, Any], receive: Callable[[], Awaitable[Any]],
                  send: Callable[[MutableMapping[str, Any]], Awaitable[None]]) -> None:
        if scope["type"] != "http" or not keys:
            await inner(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
        kind, _, token = headers.get("authorization", "").partition(" ")
        allowed = keys.scope(token.strip()) if kind.lower() == "bearer" else None
        if allowed is None:
            await _reply(send, 401, "a valid API key is needed: Authorization: Bearer KEY")
            return
        if allowed == "write" or scope.get("method") != "POST":
            await inner(scope, receive, send)
            return
        body, more = b"", True
        while more:  # read the request to see which tool it calls
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > max_bytes:
                await _reply(send, 413, "request too large")
                return
        try:
            calls = json.loads(body or b"null")
        except ValueError:
            calls = None
        for call in calls if isinstance(calls, list) else [calls]:
            if isinstance(call, dict) and call.get("method") == "tools/call" and (
                    call.get("params") or {}).get("name") == "ingest":
                # a JSON-RPC error for that call, which the agent's client reports as such
                await _reply(send, 200, None, {
                    "jsonrpc": "2.0", "id": call.get("id"),
                    "error": {"code": -32001, "message": "this API key may only read: "
                              "ingest needs a read-write key"}})
                return
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # type: ignore[no-any-return]

        await inner(scope, replay, send)

    return app


async def _reply(send: Callable[[MutableMapping[str, Any]], Awaitable[None]], status: int,
                 message: str | None, body: Any = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            *([(b"www-authenticate", b"Bearer")] if status == 401 else [])]})
    await send({"type": "http.response.body",
                "body": json.dumps(body if body is not None else {"error": message}).encode()})
