"""isotope as an MCP server for agents (the official ``mcp`` SDK). Its tools are made
from the table of operations (:data:`isotope.server.operations.OPERATIONS`) as the HTTP
routes are: each row that names a tool gets one (:func:`declared`), the method of
:class:`Tools` named for it, called only once :func:`isotope.server.operations.permit`
lets the caller do the operation: ``search``, ``ask``, ``feedback``, ``list_sources``, the
knowledge graph's ``graph`` (a walk from one entity) and ``read_graph``,
``search_nodes``, ``open_nodes`` (the MCP Memory server's), and, with write access,
``ingest`` (``isotope mcp --help`` lists them from the table). ``isotope mcp`` serves them
over stdio; ``isotope serve`` also at ``/mcp`` (streamable HTTP), behind its gate (Host,
Origin, API keys) and :func:`guard`, which refuses a read-only key's call of a tool that
writes (``ingest``) before the tool runs, by the table's one read-only rule
(:func:`isotope.server.operations.refused`).

``ingest`` reads paths of the machine the server runs on. Over HTTP it reads only below
the ``serve_roots`` setting (none: it is off), never following a link out of them; over
stdio (``isotope mcp``, started by the user as the user) it reads any path unless
``serve_roots`` is set.

Replies are compact JSON (the structured content is the same object). The tools run the
library in a worker thread, never on the event loop."""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import anyio
from mcp.server.fastmcp import Context
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from isotope._version import __version__
from isotope.access import Principal
from isotope.knowledge.facts import MAX_HOPS
from isotope.reports import source_listing
from isotope.search.retrieval import Mode
from isotope.server.gate import principal_in, scope_in
from isotope.server.operations import BY_TOOL, OPERATIONS, Operation, permit, refused
from isotope.server.work import Turns, below_roots, reported

if TYPE_CHECKING:
    from mcp.server.fastmcp import FastMCP

    from isotope.index import Isotope
    from isotope.models import QueryResponse

INSTRUCTIONS = (
    "A question-indexed search over the user's documents. Call `search` with a natural "
    "question; each result has the passage, its source and the questions it answers that "
    "matched. `suggested_action` says whether to deliver the first result, read several "
    "(query_more) or rephrase (refine_query). `ask` returns a written answer citing the "
    "passages; it runs a language model and can take many seconds: prefer `search` and "
    "read the passages yourself. When the user confirms a passage answered the question, "
    "or says it did not, call `feedback` with the search's `query_id` and the passage's "
    "`chunk_id`: the index learns from it. `list_sources` lists the documents. The "
    "knowledge graph (when the index makes one: the entities and relations its "
    "documents name): `graph` walks from one entity up to `hops` relations away, "
    "`read_graph`, `search_nodes` and `open_nodes` read it as the MCP Memory server's "
    "tools do (`open_nodes` says which names it did not find, with the closest ones).")


def instructions(ingest: str | None) -> str:
    """What the server tells an agent on connecting: :data:`INSTRUCTIONS`, and, when it
    offers ``ingest``, what that tool reads (``ingest``: :func:`ingest_reads`)."""
    if ingest is None:
        return INSTRUCTIONS
    return f"{INSTRUCTIONS} `ingest` adds files or folders to the index. {ingest}"


def ingest_reads(roots: Sequence[Path] | None, remote: bool) -> str:
    """Which paths the ``ingest`` tool reads, as it does on this transport (the rule is
    :func:`isotope.server.work.below_roots`'s)."""
    if roots:
        return ("It reads only paths below the folders of the server's serve_roots setting "
                "(links out of them are not followed).")
    if remote:
        return ("It is off on this server: the server has no serve_roots setting, so every "
                "path is refused.")
    return ("It reads any path the user who started this server may read (a local server "
            "over stdio; the serve_roots setting would confine it).")


FILTERS = (
    "Optional conditions on the passages' source and metadata, all of which must hold. "
    "Keys: `source` (a glob of the file path, e.g. \"*.md\" or \"docs/*\"), `type` (the "
    "loader: text, markdown, html, pdf, email, latex, docx), `title`, `page`, `headings`, "
    "email fields `from`, `to`, `subject`, `date`, and any front-matter key. A value "
    "matches equal values; a list matches any of them; an object compares: "
    "{\"gte\": 2020, \"lt\": 2024} (gt, gte, lt, lte, ne). Examples: {\"type\": \"pdf\"}, "
    "{\"from\": \"ceo@example.com\", \"date\": {\"gte\": \"2024-01-01\"}}.")
Query = Annotated[str, Field(min_length=1, max_length=10_000,
                             description="A natural question, or keywords")]
K = Annotated[int, Field(description="How many passages to return (1 to 50)",
                         json_schema_extra={"minimum": 1, "maximum": 50})]
"""(Bounds in the schema, checked by :func:`_within`: pydantic's own error is a raw
validation dump with a link.)"""


def _within(k: int, most: int) -> int:
    """``k``, or a one-line error saying the bounds."""
    if isinstance(k, bool) or not 1 <= k <= most:
        raise ValueError(f"k = {k!r}: the number of passages must be a whole number from 1 "
                         f"to {most}")
    return k
Filters = Annotated[dict[str, Any] | None, Field(description=FILTERS)]
ModeField = Annotated[Mode | None, Field(
    description="Retrieval mode (default hybrid, the best): questions-* match the "
    "questions each passage answers, atoms-* its statements, chunks-* the passage; "
    "-dense by meaning, -bm25 by words")]


def agent_view(response: QueryResponse) -> dict[str, Any]:
    """What an agent needs of a search or an answer: each passage with its source, place
    and the questions that matched; the confidence; the answer with its citations."""
    view: dict[str, Any] = {"suggested_action": response.suggested_action,
                            "top_score": round(response.top_score, 3)}
    if response.query_id:
        view["query_id"] = response.query_id
    if response.answer is not None:
        view.update(answer=response.answer, answer_kind=response.answer_kind,
                    answer_confidence=response.answer_confidence,
                    citations=response.citations)
    view["results"] = [{
        "rank": r.rank, "score": round(r.score, 3), "source": r.chunk.source,
        **{k: r.chunk.metadata[k] for k in ("page", "headings") if r.chunk.metadata.get(k)},
        "text": r.chunk.text,
        "matched_questions": [q.text for q in r.matched_questions],
        **({"bridge": r.bridge} if r.bridge else {}),
        "chunk_id": r.chunk.id} for r in response.results]
    return view


def _reply(data: Any) -> CallToolResult:
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    structured = data if isinstance(data, dict) else {"result": data}
    return CallToolResult(content=[TextContent(type="text", text=text)],
                          structuredContent=structured)


def create_mcp(iso: Isotope, *, roots: list[Path] | None = None, writable: bool = True,
               remote: bool = False, turns: Turns | None = None,
               principal: Principal | None = None) -> FastMCP:
    """The MCP server over ``iso``: a tool for each operation of the table that names one
    (:func:`declared`), ``ingest`` only when ``writable``; it reads below ``roots`` only
    (links out of them not followed), and with ``remote`` (HTTP) nothing at all without
    ``roots``. ``turns``: the server's (searches, answers and writes in turn, shared with
    its HTTP routes; default: this server's own); an ``ask`` whose call is cancelled
    stops its model. Each tool answers for the request's API key over HTTP (its
    principal), else for ``principal`` (stdio: None, the user who runs it, sees
    everything). Over HTTP it sits behind the server's gate, which checks Host and
    Origin (the SDK's own check is off: it knew neither ``allowed_hosts`` nor
    ``allowed_origins`` and answered in plain text)."""
    from mcp.server.fastmcp import FastMCP
    from mcp.server.transport_security import TransportSecuritySettings

    _quiet_closed_streams()
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    confine = roots or None
    reads = ingest_reads(confine, remote) if writable else None
    server = FastMCP("isotope", instructions=instructions(reads), streamable_http_path="/",
                     transport_security=security)
    server._mcp_server.version = __version__  # (serverInfo said the SDK's version)
    tools = Tools(iso, turns or Turns(iso), principal=principal, remote=remote,
                  confine=confine)
    for op in OPERATIONS:
        if op.mcp is not None and (writable or not op.writes):
            server.add_tool(declared(tools, op), name=op.mcp, description=(
                INGEST + (reads or "") if op.name == "ingest" else None))
    return server


INGEST = ("Add files or folders of the server's machine to the index (a changed file "
          "replaces its old version; unchanged ones are skipped). Supported: .md .txt "
          ".html .pdf .eml .mbox .tex .docx. ")
"""The ``ingest`` tool's description, before what it reads on this transport."""


def declared(tools: Tools, op: Operation) -> Callable[..., Awaitable[CallToolResult]]:
    """The MCP tool of ``op``, its row of the table: the method of ``tools`` named for
    its tool, called with who asks once :meth:`Tools.allowed` lets them do the
    operation (the one check, made here for every tool: none can forget it). Its
    arguments (the schema an agent reads) and description are the method's, ``principal``
    left out."""
    assert op.mcp is not None
    method = getattr(tools, op.mcp)
    signature = inspect.signature(method, eval_str=True)
    shown = [p for name, p in signature.parameters.items() if name != "principal"]

    async def tool(ctx: Context, **arguments: Any  # type: ignore[type-arg]
                   ) -> CallToolResult:
        return await method(ctx, tools.allowed(ctx, op.name), **arguments)  # type: ignore[no-any-return]

    tool.__signature__ = signature.replace(parameters=shown)  # type: ignore[attr-defined]
    tool.__annotations__ = {p.name: p.annotation for p in shown} | {
        "return": signature.return_annotation}
    tool.__name__, tool.__doc__ = op.mcp, method.__doc__
    return tool


class Tools:
    """The tools of one MCP server over ``iso``, each a method named for its tool (its
    docstring: what the agent reads of it) that takes the ``principal`` who asks (checked by
    :func:`declared`); ``principal`` given here (the default one: who runs a stdio server,
    or ``--as``) and ``remote``: as :func:`create_mcp` takes them;
    ``confine``: the folders ``ingest`` reads below (None: any)."""

    def __init__(self, iso: Isotope, turns: Turns, *, principal: Principal | None,
                 remote: bool, confine: list[Path] | None) -> None:
        self.iso, self.turns, self.principal = iso, turns, principal
        self.remote, self.confine = remote, confine

    def allowed(self, ctx: Context, name: str  # type: ignore[type-arg]
                ) -> Principal | None:
        """Who calls a tool (:func:`_caller_principal`), if the caller may do the operation ``name``
        (:func:`isotope.server.operations.permit`, with its key's scope over HTTP; over
        stdio the user who runs it writes, and a principal given with ``--as`` is held
        to what the table lets a user do, as a user's key is)."""
        principal = _caller_principal(ctx, self.principal, self.remote)
        permit(name, principal, _scope(ctx))
        return principal

    async def search(self, ctx: Context, principal: Principal | None,  # type: ignore[type-arg]
                     query: Query, k: K = 5, mode: ModeField = None,
                     filters: Filters = None) -> CallToolResult:
        """Find the passages of the user's documents that answer a question, best first,
        each with its source, its place (page, headings) and the generated questions of
        it that matched. Fast (tens of milliseconds). Read `suggested_action`: deliver
        (the first passage is very likely right), query_more (read several, or search
        again), refine_query (probably not found: rephrase or add detail)."""
        found = await self.turns.search(query, _within(k, 50), mode=mode, filters=filters,
                                        principal=principal)
        return _reply(agent_view(found))

    async def ask(self, ctx: Context, principal: Principal | None,  # type: ignore[type-arg]
                  query: Query, k: Annotated[int, Field(
            description="Passages given to the model (1 to 20)",
            json_schema_extra={"minimum": 1, "maximum": 20})] = 3,
            mode: ModeField = None, filters: Filters = None) -> CallToolResult:
        """Answer a question from the user's documents in a few sentences, citing the
        passages used as [1], [2] (`citations` are their ranks). Slow: a language model
        writes the answer (seconds on a GPU server, up to a minute on a laptop's CPU);
        `search` is faster when you can read passages yourself. `answer_kind` says how the
        answer was made: generated (checked against the cited passages), quoted (the
        passage's own sentence, quoted: the answer did not pass the check), or declined (the
        documents do not hold it); `answer_confidence` (0 to 1) how likely the answer is
        right: act on a generated answer without reading the passage only when it is
        high."""
        k = _within(k, 20)
        await _say(ctx, 0, 2, "searching the documents")
        found = await self.turns.search(query, k, mode=mode, filters=filters,
                                        for_answer=True, principal=principal)
        await _say(ctx, 1, 2, f"writing the answer from {len(found.results)} passage(s)")
        await self.turns.answer(found, principal)  # (the call cancelled: the model stops too)
        await _say(ctx, 2, 2, f"answered ({found.answer_kind}, confidence "
                                 f"{found.answer_confidence or 0:.2f})")
        return _reply(agent_view(found))

    async def feedback(self, ctx: Context, principal: Principal | None,  # type: ignore[type-arg]
                       query_id: Annotated[str, Field(
                           max_length=64, description="The search's query_id")],
                       chunk_id: Annotated[str, Field(
                           max_length=256, description="The chunk_id of one of its results")],
                       useful: Annotated[bool, Field(
                           description="false: the passage did not help")] = True,
                       ) -> CallToolResult:
        """Tell the index whether a passage a search returned answered the user's
        question: a useful passage learns the question (it is found first next time), a
        passage that did not help is not ranked first again for that question. Use it
        when the user confirms or rejects an answer."""
        reads = _scope(ctx) == "read"
        done = await self.turns.write(lambda: self.iso.feedback(
            query_id, chunk_id, useful, principal=principal, read_only=reads))
        return _reply(done.model_dump())

    async def list_sources(self, ctx: Context,  # type: ignore[type-arg]
                           principal: Principal | None) -> CallToolResult:
        """The documents in the index: each one's name (its path), type, title, state
        and how many passages, statements and questions it holds."""
        infos = await anyio.to_thread.run_sync(lambda: self.iso.sources(principal=principal))
        return _reply([{k: v for k, v in source_listing(info).items()
                        if k in ("uri", "loader", "state", "chunks", "atoms", "questions",
                                 "chunks_waiting") or k == "metadata"} for info in infos])

    # The MCP Memory server's tools, names and shapes: an agent that reads that server
    # reads isotope's graph (setting graph) the same way.
    async def _graph(self, principal: Principal | None, **asked: Any) -> CallToolResult:
        found = await anyio.to_thread.run_sync(
            lambda: self.iso.memory_graph(principal=principal, **asked))
        return _reply(found)

    async def graph(self, ctx: Context, principal: Principal | None,  # type: ignore[type-arg]
                    entity: Annotated[str, Field(
                        min_length=1, max_length=200,
                        description="An entity's name (or one of its aliases)")],
                    hops: Annotated[int, Field(
                        description=f"How many relations away to follow (1 to {MAX_HOPS})",
                        json_schema_extra={"minimum": 1, "maximum": MAX_HOPS})] = 1,
                    ) -> CallToolResult:
        """Walk the knowledge graph from one entity: the entities and relations up to
        `hops` relations away, in the MCP Memory server's shapes (entities: name,
        entityType, observations: up to 5 statements naming each; relations: from,
        to, relationType), with `center` (the entity's name) and `truncated` (more
        relations were within reach than shown: lower hops). A name that names no
        entity is an error that names the closest ones."""
        return await self._graph(principal, entity=entity, hops=hops)

    async def read_graph(self, ctx: Context,  # type: ignore[type-arg]
                         principal: Principal | None) -> CallToolResult:
        """Read the whole knowledge graph of the user's documents: entities (name,
        entityType, observations: the statements naming each) and relations (from, to,
        relationType), as the MCP Memory server's read_graph."""
        return await self._graph(principal)

    async def search_nodes(self, ctx: Context,  # type: ignore[type-arg]
                           principal: Principal | None,
                           query: Annotated[str, Field(
                               min_length=1, max_length=200,
                               description="Text to find in entity names, types and "
                               "observations (case ignored)")]) -> CallToolResult:
        """Find entities of the knowledge graph whose name, type or observations hold the
        query, with the relations that touch them (as the MCP Memory server's
        search_nodes)."""
        return await self._graph(principal, query=query)

    async def open_nodes(self, ctx: Context,  # type: ignore[type-arg]
                         principal: Principal | None,
                         names: Annotated[list[str], Field(
                             min_length=1, max_length=100,
                             description="Entity names (or aliases)")]) -> CallToolResult:
        """Open entities of the knowledge graph by name, with the relations that touch
        them (as the MCP Memory server's open_nodes), and `not_found`: each name that
        names no entity, with `did_you_mean` (the closest entity names)."""
        return await self._graph(principal, names=names)

    async def ingest(self, ctx: Context, principal: Principal | None,  # type: ignore[type-arg]
                     paths: Annotated[list[str], Field(
            min_length=1, max_length=100,
            description="Files or folders on the server's machine (absolute paths)")],
                     ) -> CallToolResult:
        # (its description, :data:`INGEST`, says which paths it reads on this transport)
        wanted = below_roots(paths, self.confine, what="ingest by path", remote=self.remote)
        missing = [str(p) for p in wanted if not p.exists()]
        if missing:
            raise ValueError(f"no such file or folder: {', '.join(missing)}")
        teller = _teller(ctx)
        told = None if teller is None else _ingest_progress(teller.tell)
        try:
            report = await self.turns.write(lambda: self.iso.ingest(
                wanted, confine=self.confine, progress=told))
        finally:
            if teller is not None:  # (every notification before the result)
                await teller.sent()
        done = reported(report, brief=True)
        if not report.ok:
            return CallToolResult(content=[TextContent(type="text", text=json.dumps(
                done, separators=(",", ":")))], structuredContent=done, isError=True)
        return _reply(done)


Tell = Callable[[float, "float | None", str], None]


def _progress_token(ctx: Context) -> Any:  # type: ignore[type-arg]
    """The ``progressToken`` a tool call carries (None: it asked for no progress)."""
    try:
        meta = ctx.request_context.meta
    except (LookupError, ValueError, AttributeError):
        return None
    return None if meta is None else meta.progressToken


async def _say(ctx: Context, progress: float, total: float | None,  # type: ignore[type-arg]
               message: str) -> None:
    """A ``notifications/progress`` of the call (the MCP specification's progress
    notifications), where it carries a ``progressToken``."""
    if _progress_token(ctx) is not None:
        await ctx.report_progress(progress, total, message)


class _Teller:
    """:func:`_say` for work running in another thread (an ingest): each value greater
    than the last, a value reaching its total always, the others at most every half
    second; :meth:`sent` waits until all are sent (none may follow the call's result)."""

    def __init__(self, ctx: Context, loop: Any) -> None:  # type: ignore[type-arg]
        import threading

        self.ctx, self.loop = ctx, loop
        self.lock, self.last = threading.Lock(), (-1.0, 0.0)  # (value, time sent)
        self.pending: list[Any] = []

    def tell(self, progress: float, total: float | None, message: str) -> None:
        import asyncio
        import time

        with self.lock:  # (sent in order: each is scheduled on the loop before the next)
            now = time.monotonic()
            value, when = self.last
            final = total is not None and progress >= total
            if progress <= value or (not final and value >= 0 and now - when < 0.5):
                return
            self.last = (progress, now)
            self.pending.append(asyncio.run_coroutine_threadsafe(
                self.ctx.report_progress(progress, total, message), self.loop))

    async def sent(self) -> None:
        import asyncio

        with self.lock:
            pending, self.pending = self.pending, []
        for future in pending:
            with contextlib.suppress(Exception):  # (a client gone: nothing to tell)
                await asyncio.wrap_future(future)


def _teller(ctx: Context) -> _Teller | None:  # type: ignore[type-arg]
    """A :class:`_Teller` of the call, where it asked for progress (None: it did not)."""
    import asyncio

    if _progress_token(ctx) is None:
        return None
    return _Teller(ctx, asyncio.get_running_loop())


def _ingest_progress(tell: Tell) -> Callable[[Any], None]:
    """An ingest's progress events (:class:`isotope.reports.Progress`) as MCP progress:
    files done while the documents are stored, then files and chunks done while their
    questions are written (each chunk as the model finishes it, with the tokens written
    and the time left)."""
    files = [0]

    def told(p: Any) -> None:
        if p.stage in ("generate", "wait"):
            total = files[0] + p.sources_total if p.sources_total else None
            tell(files[0] + p.sources_done, total,
                 f"questions: {p.sources_done}/{p.sources_total or '?'} chunks done, "
                 f"{p.questions} questions{p.model_work()}")
        elif p.stage == "done":
            return
        else:
            files[0] = max(files[0], p.sources_total)
            tell(p.sources_done, p.sources_total or None, f"documents: {p.sources_done}/"
                 f"{p.sources_total} files read, {p.chunks} chunks")
    return told


def _http_scope(ctx: Context) -> Any:  # type: ignore[type-arg]
    """The ASGI scope of a tool call's HTTP request (None: over stdio, or not found)."""
    try:
        request = ctx.request_context.request
    except (LookupError, ValueError, AttributeError):
        return None
    return None if request is None else (getattr(request, "scope", None) or {})


def _scope(ctx: Context) -> str:  # type: ignore[type-arg]
    """The scope of a tool call's API key over HTTP (``write`` over stdio or without
    keys)."""
    return scope_in(_http_scope(ctx) or {})


def _caller_principal(ctx: Context, default: Principal | None,  # type: ignore[type-arg]
           remote: bool) -> Principal | None:
    """Who calls a tool: over HTTP (``remote``), the principal of the request's API key
    (the gate put it in the request's state; a call whose request cannot be found is
    refused, never answered as the owner); over stdio, ``default`` (None: the user who
    runs it)."""
    found = _http_scope(ctx)
    if found is None:
        if remote:
            raise ValueError("this call's request (and so its API key) is unknown")
        return default
    return principal_in(found)


def _quiet_closed_streams() -> None:
    """The SDK logs a client that closed its event stream (a normal end of an MCP
    session over HTTP) as ``ERROR ... Error in standalone SSE writer`` with a
    traceback; such records are shown at debug level instead."""
    logger = logging.getLogger("mcp.server.streamable_http")
    if any(isinstance(f, _ClosedStream) for f in logger.filters):
        return
    logger.addFilter(_ClosedStream())


class _ClosedStream(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and "standalone SSE writer" in record.getMessage():
            kind = record.exc_info[0] if record.exc_info else None
            if kind is not None and kind.__name__ in ("ClosedResourceError",
                                                      "BrokenResourceError",
                                                      "EndOfStream"):
                record.levelno, record.levelname = logging.DEBUG, "DEBUG"
                record.exc_info = None
                return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


ASGI = Callable[[MutableMapping[str, Any], Callable[[], Awaitable[Any]],
                 Callable[[MutableMapping[str, Any]], Awaitable[None]]], Awaitable[None]]


def guard(inner: ASGI) -> ASGI:
    """``inner`` (the streamable HTTP app) with each request's JSON read first: a body
    that is not JSON or nests too deep for the parser is a JSON-RPC parse error (the SDK
    answered 500), and a read-only key may list and call every tool but ``ingest`` (a
    JSON-RPC error). The gate before it checked the key (``scope["state"]
    ["isotope.scope"]``) and the body's size."""

    async def app(scope: MutableMapping[str, Any], receive: Callable[[], Awaitable[Any]],
                  send: Callable[[MutableMapping[str, Any]], Awaitable[None]]) -> None:
        access = (scope.get("state") or {}).get("isotope.scope", "write")
        if scope["type"] != "http" or scope.get("method") != "POST":
            await inner(scope, receive, send)
            return
        parts: list[bytes] = []
        more = True
        while more:  # read the request to see which tool it calls
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            parts.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(parts)
        # parsed off the event loop: a large body (up to max_upload_mb) must not hold
        # every other request of the process meanwhile
        calls = await anyio.to_thread.run_sync(_calls, body) if len(body) > 65_536 \
            else _calls(body)
        if calls is None:
            await _send(send, 400, {"jsonrpc": "2.0", "id": None, "error": {
                "code": -32700, "message": "parse error: the body is not JSON, or is "
                "nested too deep"}})
            return
        for call in calls:
            params = call.get("params") if isinstance(call, dict) else None
            tool = params.get("name") if isinstance(params, dict) else None
            if (isinstance(call, dict) and call.get("method") == "tools/call"
                    and isinstance(tool, str) and refused(BY_TOOL.get(tool), access)):
                # a JSON-RPC error for that call, which the agent's client reports as such
                ident = call.get("id")
                await _send(send, 200, {
                    "jsonrpc": "2.0",
                    "id": ident if isinstance(ident, str | int) and not isinstance(
                        ident, bool) else None,
                    "error": {"code": -32001, "message": "this API key may only read: "
                              f"{tool} needs a read-write key"}})
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


def _calls(body: bytes) -> list[Any] | None:
    """The JSON-RPC messages of a request body (None: not JSON, nested too deep for the
    parser, or holding text that is not Unicode: a lone surrogate escaped as \\udXXX)."""
    try:
        calls = json.loads(body or b"null")
        _check_text(calls)
    except (ValueError, RecursionError, UnicodeError):
        return None
    return calls if isinstance(calls, list) else [calls]


def _check_text(value: Any) -> None:
    """UnicodeError if a parsed JSON value holds a lone surrogate anywhere (text that
    cannot be encoded)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            item.encode("utf-8")  # raises on a lone surrogate
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


async def _send(send: Callable[[MutableMapping[str, Any]], Awaitable[None]], status: int,
                body: Any) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})
