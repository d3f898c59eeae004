"""The gate every request of ``isotope serve`` passes before the app reads a byte of its
body: a plain ASGI middleware, outermost, over every route (``/mcp`` included).

In order:

1. **Host.** A request naming another host than the server's own is refused (421): a
   web page that rebinds its own DNS name to 127.0.0.1 must not read a local server.
   The server's own names are the loopback names and the address it listens on, plus
   the ``allowed_hosts`` setting (``*``: any; the default for a server listening on
   every address, which needs API keys anyway).
2. **Origin.** A browser request sent from a page of another origin (an ``Origin`` that
   is not this server's, or ``Sec-Fetch-Site`` ``cross-site`` / ``same-site``) is
   refused (403) unless the ``allowed_origins`` setting lists it: a page elsewhere must
   not write to a server, nor read a key-less one. A listed origin gets CORS: its
   preflight (``OPTIONS``) is answered before any key is asked for, and every reply to
   it (errors too) carries ``Access-Control-Allow-Origin``. The search page served at ``/`` is
   of this origin and keeps working; programs (curl, the Client, agents) send neither
   header.
3. **Key.** With API keys, a request without a valid one is refused (401) before its
   body is read, and a read-only key on a route that writes (403); the key's scope and
   principal (who it is: :mod:`isotope.server.auth`) are left in ``scope["state"]``
   (``isotope.scope``, ``isotope.principal``) for the route. The keys file is read again
   when it changes; one that no longer reads refuses every request (503). ``/``, ``/app.js``,
   ``/health``, ``/docs`` and ``/openapi.json`` need no key.
4. **Body.** A body over ``max_bytes`` is refused (413) as soon as it passes the limit,
   whether declared (``Content-Length``) or streamed (``Transfer-Encoding: chunked``);
   a client that stops sending its body for ``body_timeout`` seconds is answered 408
   and let go.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from collections.abc import Awaitable, Callable, Collection, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from isotope.access import Principal
from isotope.server.auth import Keys

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGI = Callable[[Message, Receive, Send], Awaitable[None]]

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
OPEN_PATHS = frozenset({"/", "/app.js", "/health", "/docs", "/openapi.json",
                        "/favicon.ico"})
"""Paths served without a key (the page and its script, liveness, the API's schema)."""
OPEN_PREFIXES = ("/docs/",)
STATIC = frozenset({"/", "/app.js", "/favicon.ico", "/docs", "/openapi.json"})
"""Paths that hold no data of the index: a page elsewhere may link to them (a top-level
navigation from another site is not refused); everything they call is checked."""
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def host_name(value: str) -> str:
    """The host of a ``Host`` header or an origin's authority, lowercase, without port or
    brackets (``[::1]:8000`` -> ``::1``)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    if value.count(":") > 1:  # a bare IPv6 address
        return value
    return value.rsplit(":", 1)[0] if ":" in value else value


def own_hosts(listen: str, allowed: Collection[str], keyed: bool) -> frozenset[str] | None:
    """The host names a server listening on ``listen`` answers to (None: any): the
    loopback names, ``listen`` itself, and ``allowed`` (``*`` in it: any, only with
    keys: a key-less server answering any name is open to DNS rebinding). A server on
    every address (``0.0.0.0``, ``::``) with keys and no ``allowed`` answers to any."""
    from isotope.errors import SettingsError

    names = {host_name(n) for n in allowed}
    if "*" in names:
        if not keyed:
            raise SettingsError("allowed_hosts = * needs API keys (a key-less server that "
                                "answers any host name can be read and written by any web "
                                "page through DNS rebinding); name the hosts, or set "
                                "api_keys")
        return None
    try:
        wildcard = ipaddress.ip_address(listen).is_unspecified
    except ValueError:
        wildcard = False
    if wildcard and keyed and not names:
        return None
    names.update(LOOPBACK_NAMES)
    if not wildcard:
        names.add(host_name(listen))
    return frozenset(names)


@dataclass
class Gate:
    """The ASGI middleware (see the module docstring). ``writes(method, path)`` says
    whether a route writes (so a read-only key is refused before its body is read)."""

    app: ASGI
    keys: Keys
    max_bytes: int
    hosts: frozenset[str] | None = frozenset(LOOPBACK_NAMES)
    origins: frozenset[str] = field(default_factory=frozenset)
    body_timeout: float = 30.0
    writes: Callable[[str, str], bool] = lambda method, path: False
    project: str | None = None
    """The project of the unprefixed routes (others are at ``/p/NAME/``)."""

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # (the API has none: never reached unchecked)
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        method, path = scope.get("method", "GET"), scope.get("path", "/")
        host = headers.get("host")
        if self.hosts is not None and host is not None and host_name(host) not in self.hosts:
            await reply(send, 421, f"this server does not answer to the host {host!r}; "
                        "use its address, or list the name in the allowed_hosts setting")
            return
        origin = headers.get("origin")
        if origin is not None and origin in self.origins:
            # a page of an allowed origin: CORS, so that its browser lets it send JSON and
            # a key and read the answers (errors included)
            send = _with_cors(send, origin)
            if method == "OPTIONS" and "access-control-request-method" in headers:
                await send({"type": "http.response.start", "status": 204, "headers": [
                    (b"access-control-allow-methods", b"GET, POST, PUT, DELETE"),
                    (b"access-control-allow-headers",
                     b"authorization, content-type, accept, mcp-session-id, "
                     b"mcp-protocol-version, last-event-id"),
                    (b"access-control-max-age", b"600")]})
                await send({"type": "http.response.body", "body": b""})
                return
        inner = unprefixed(path)  # (a project's page and schema are open as the first's)
        static = method in ("GET", "HEAD") and (inner in STATIC or inner.startswith(
            OPEN_PREFIXES))
        if not static and self._foreign(headers, host):
            await reply(send, 403, "a request from a page of another site is refused; "
                        "open the page this server serves at /, or list that origin in "
                        "the allowed_origins setting")
            return
        if any(k.lower() in ("api_key", "key", "token", "access_token")
               for k in _query_names(scope)):
            await reply(send, 400, "send the API key in the Authorization header "
                        "(Authorization: Bearer KEY), never in the URL")
            return
        access, principal = "write", None
        keys = self.keys = self.keys.fresh()  # (the keys file, read again if it changed)
        if keys and not (inner in OPEN_PATHS or inner.startswith(OPEN_PREFIXES)):
            if keys.broken:  # (why, with the file and line, is in the server's log only)
                await reply(send, 503, "the server's API keys file is invalid; every "
                            "request is refused until it is fixed (the server's log says "
                            "why)")
                return
            kind, _, token = headers.get("authorization", "").partition(" ")
            found = keys.lookup(token.strip()) if kind.lower() == "bearer" else None
            if found is None:
                await reply(send, 401, "a valid API key is needed: Authorization: Bearer KEY",
                            [(b"www-authenticate", b"Bearer")])
                return
            scoped, principal, projects = found
            if projects is not None and project_of(path, self.project) not in projects:
                # (as a project that does not exist: the key learns nothing of it)
                await reply(send, 404, f"no route {path}; the routes are listed at /docs")
                return
            if scoped != "write" and method in WRITE_METHODS and self.writes(method, path):
                await reply(send, 403, "this API key may only read")
                return
            access = scoped
        prefix = f"/p/{self.project}"
        if self.project and (path == prefix or path.startswith(prefix + "/")):
            # the first project is also at /p/NAME/: its routes, unprefixed
            scope["path"] = path[len(prefix):] or "/"
            raw = scope.get("raw_path")
            if isinstance(raw, bytes) and raw.startswith(prefix.encode()):
                scope["raw_path"] = raw[len(prefix):] or b"/"
        state = scope.setdefault("state", {})
        state["isotope.scope"] = access
        state["isotope.principal"] = principal  # (None: no keys, the owner)
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._too_large(send)
            return
        await self._limited(scope, receive, send)

    def _foreign(self, headers: dict[str, str], host: str | None) -> bool:
        """Whether a browser sent the request from a page of another origin."""
        origin = headers.get("origin")
        if origin is not None:
            if origin in self.origins:
                return False
            scheme, _, authority = origin.partition("://")
            return not (authority and host and authority.lower() == host.lower()
                        and scheme in ("http", "https"))
        return headers.get("sec-fetch-site") in ("cross-site", "same-site")

    async def _too_large(self, send: Send) -> None:
        await reply(send, 413, f"the request body is over {self.max_bytes} bytes (the "
                    "max_upload_mb setting)")

    async def _limited(self, scope: Message, receive: Receive, send: Send) -> None:
        """The app, with its body counted as it arrives and its stalls timed. Once the
        body is whole, ``receive`` is the server's own again: a streamed reply (``/ask``,
        MCP's event streams) listens on it for the client leaving, for as long as it
        runs, and must not be cut at ``body_timeout``. The gate answers only while the
        app has sent nothing."""
        received = 0
        whole = False  # the body has arrived: no more limits or deadlines
        answered = False  # by the gate: the app's own reply is dropped
        started = False  # the app began its reply: the gate can no longer answer

        async def refuse(status: int, message: str) -> Message:
            nonlocal answered
            if not started:
                answered = True
                await reply(send, status, message)
            return {"type": "http.disconnect"}

        async def counted() -> Message:
            nonlocal received, whole
            if answered:
                return {"type": "http.disconnect"}
            if whole:
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.body_timeout)
            except TimeoutError:
                return await refuse(408, f"the request body stalled for "
                                    f"{self.body_timeout:g} s; send it whole")
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    return await refuse(413, f"the request body is over {self.max_bytes} "
                                        "bytes (the max_upload_mb setting)")
                whole = not message.get("more_body", False)
            return message

        async def sent(message: Message) -> None:
            nonlocal started
            if not answered:
                started = True
                await send(message)

        await self.app(scope, counted, sent)


def principal_in(scope: Message) -> Principal | None:
    """The principal the gate found for a request's key (None: a server without keys,
    whose caller is the index's owner)."""
    found = (scope.get("state") or {}).get("isotope.principal")
    return found if isinstance(found, Principal) else None


def scope_in(scope: Message) -> str:
    """The scope (``read`` or ``write``) of a request's key; ``write`` on a server without
    keys (its caller is the index's owner)."""
    return str((scope.get("state") or {}).get("isotope.scope") or "write")


def unprefixed(path: str) -> str:
    """A path with its project's prefix (``/p/NAME``) taken off."""
    if path.startswith("/p/"):
        return "/" + path.split("/", 3)[3] if path.count("/") >= 3 else "/"
    return path


def project_of(path: str, default: str | None) -> str | None:
    """The project a request's path is for: ``/p/NAME/...`` is NAME's, any other the
    default project's."""
    if path.startswith("/p/"):
        return path.split("/")[2]
    return default


def _with_cors(send: Send, origin: str) -> Send:
    """``send`` with the CORS headers that let a page of ``origin`` read the reply."""
    extra = [(b"access-control-allow-origin", origin.encode("latin-1")),
             (b"access-control-expose-headers", b"mcp-session-id, www-authenticate"),
             (b"vary", b"Origin")]

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return sending


def _headers(scope: Message) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1")
            for k, v in scope.get("headers", [])}


def _query_names(scope: Message) -> list[str]:
    from urllib.parse import parse_qsl

    raw = scope.get("query_string", b"").decode("latin-1")
    return [name for name, _ in parse_qsl(raw, keep_blank_values=True)]


async def reply(send: Send, status: int, message: str,
                headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """Answer ``{"error": message}`` with ``status`` (the API's one form of error)."""
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close"),  # the body was not read
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


__all__ = ["LOOPBACK_NAMES", "Gate", "host_name", "own_hosts", "principal_in", "reply",
           "unprefixed"]
