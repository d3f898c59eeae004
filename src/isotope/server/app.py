"""The HTTP API of ``isotope serve``: a thin shell over :class:`isotope.Isotope`.

Every request passes :class:`isotope.server.gate.Gate` first (Host, Origin, API key,
body size and stalls), before a byte of its body is read. Endpoints that touch the index
run the library in the thread pool, never on the event loop: searches side by side (one
per core at a time), answers one per model slot, writes of this process one after
another (queued, never refused as "locked" by the server itself). An answer whose client
went away is stopped at the model's next token. Errors are JSON ``{"error": ...}`` with
the status that fits, for every route (validation, 404, 405 included); never a traceback.

Imported only by ``isotope serve`` (the ``server`` extra). Annotations are evaluated at
definition (no ``from __future__ import annotations``): FastAPI reads the endpoints'
parameter types, some of which are local to :func:`create_app`.

Why one module of this size (about 600 lines): the routes are closures over one app's
state (the index, the search and answer slots, the write queue), each a few lines over the
library; the gate, the MCP tools and the page live in modules of their own."""

import asyncio
import contextlib
import json
import logging
import os
import re
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Collection
from contextlib import asynccontextmanager
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Annotated, Any

from fastapi import FastAPI, Form, Query, Request, UploadFile
from fastapi import File as FileParam
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field, field_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from isotope import __version__, errors
from isotope.access import Principal
from isotope.index import Isotope
from isotope.models import QueryResponse
from isotope.reports import source_listing
from isotope.server.auth import Keys
from isotope.server.gate import Gate, own_hosts, principal_in, scope_in, unprefixed
from isotope.server.operations import Forbidden, permit, writes
from isotope.server.work import Turns, below_roots, reported

log = logging.getLogger(__name__)

STATUS: list[tuple[type[errors.IsotopeError], int]] = [
    (errors.SourceNotFound, 404),
    (errors.IndexLocked, 409),
    (errors.SyncRefused, 409),
    (errors.MissingDependency, 501),
    (errors.DiskFull, 507),
    (errors.StoreError, 503),
    (errors.IndexDamaged, 500),
    (Forbidden, 403),
    (errors.IsotopeError, 400),
]
"""HTTP status of each named error (the first that matches)."""

MAX_NAME_BYTES = 200
"""The longest upload name kept, in UTF-8 bytes (file systems allow 255)."""


class SearchRequest(BaseModel):
    query: str = Field(max_length=10_000, description="A question or keywords")
    k: int | None = Field(None, ge=1, le=10_000, strict=True, description="Results wanted "
                          "(default: the top_k setting)")
    mode: str | None = Field(None, description="Retrieval mode (default: the mode setting)")
    filters: dict[str, Any] | None = Field(None, description="Conditions on the source "
                                           "and metadata (see the docs: guides/filters.md)")
    explain: bool = Field(False, description="Each result says how its score was made "
                          "(per signal: rank, raw and standardised score, weight, "
                          "contribution; the questions and atoms that matched)")

    @field_validator("query")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the query is empty: ask a question, or give some keywords")
        return value


class FeedbackRequest(BaseModel):
    query_id: str = Field(max_length=64, description="The search's query_id (a /search "
                          "or /ask response's)")
    chunk_id: str = Field(max_length=256, description="One of the chunks it returned")
    useful: bool = Field(True, strict=True, description="false: the result did not help")


class QuestionText(BaseModel):
    text: str = Field(max_length=1_000, description="The question, one line")


class AskRequest(SearchRequest):
    stream: bool = Field(False, description="Server-sent events: results, then the "
                         "answer's tokens as they come, then the answer, then done")


class SyncRequest(BaseModel):
    paths: list[str] = Field(min_length=1, max_length=1_000)
    allow: list[str] | None = Field(None, max_length=1_000, description="Who may see these "
                                    "sources: public, user:NAME, group:NAME (default: the "
                                    ".isotope-access rules file, else the list each had)")


SOURCE_NAME = "The source's name, as GET /sources lists it"
ChunkId = Annotated[str, PathParam(description="The chunk's id (as search results give it)")]
QuestionId = Annotated[str, PathParam(
    description="The question's id (as GET /questions gives it)")]
Members = Annotated[bool, Query(description="A container's members too (a mailbox's messages)")]


def allowed(request: Request, name: str) -> Principal | None:
    """The request's principal, if its key may do the operation ``name`` (see
    :mod:`isotope.server.operations`); else 403."""
    who = asker(request)
    permit(name, who, scope_in(request.scope))
    return who


USER_STATUS = frozenset({"project", "schema_version", "isotope_version", "created_at",
                         "counts", "keyword_engine"})
"""What ``/status`` shows a user's key: the counts of what it may see and what the
index is; not where it lives (paths, database and replica hosts), its settings (the keys
file, model endpoints, the cache folder), nor its size on disk (it grows with what the
key may not see)."""


def user_status(shown: dict[str, Any]) -> dict[str, Any]:
    """``/status`` as a user's key sees it (:data:`USER_STATUS`; the other fields empty,
    so a client reads the same shape)."""
    empty: dict[str, Any] = {"index": "", "disk_bytes": None, "models": {}, "settings": {},
                             "prompt_versions": {}, "replicas": []}
    embedding = {k: v for k, v in (shown.get("embedding") or {}).items()
                 if k in ("model", "dim", "dimensions")}
    return {**empty, "embedding": embedding,
            **{k: v for k, v in shown.items() if k in USER_STATUS}}


def asker(request: Request) -> Principal | None:
    """Who sent ``request``: its API key's principal (None: a server without keys, whose
    caller is the index's owner)."""
    return principal_in(request.scope)


def json_response(model: BaseModel) -> Response:
    """``model`` as JSON, serialised once: the endpoint's ``response_model`` documents it,
    and FastAPI does not validate it again (a result list costs a few milliseconds)."""
    return Response(model.model_dump_json(), media_type="application/json")


def safe_name(filename: str | None) -> str:
    """An uploaded file's name reduced to a plain file name: no folders (``../``, ``/etc``,
    ``C:\\``), no control characters, nothing but letters, digits and ``._- ``; at most
    :data:`MAX_NAME_BYTES` bytes in UTF-8, its extension kept."""
    name = PureWindowsPath(PurePosixPath(filename or "").name).name
    name = re.sub(r"[^\w.\- ]", "_", name).strip(" .")
    if not name or name in (".", ".."):
        raise errors.InvalidArgument(f"upload {filename!r} has no usable file name; name the "
                                     "file, e.g. notes.md")
    stem, dot, suffix = name.rpartition(".")
    if not dot or len(suffix.encode()) > 16:
        stem, dot, suffix = name, "", ""
    room = MAX_NAME_BYTES - len((dot + suffix).encode())
    stem = stem.encode()[:room].decode("utf-8", "ignore").rstrip(" .") or "upload"
    return stem + dot + suffix


def _writes(method: str, path: str) -> bool:
    """Whether a request writes to the index (a read-only key is refused before its body
    is read); a project's routes (``/p/NAME/...``) as the default's."""
    return writes(method, unprefixed(path))


def create_app(iso: Isotope, *, keys: Keys, roots: list[Path], max_bytes: int,
               uploads: Path, host: str = "127.0.0.1", mcp: bool = True,
               search_slots: int | None = None, answer_slots: int | None = None,
               allowed_hosts: Collection[str] = (), allowed_origins: Collection[str] = (),
               body_timeout: float = 30.0, project: str | None = None,
               projects: dict[str, FastAPI] | None = None, gate: bool = True) -> FastAPI:
    """The API over ``iso``. ``keys``: empty for none (the CLI then binds to loopback only);
    ``roots``: folders below which ``POST /sync`` and the MCP ``ingest`` tool may read
    (none: they are off); ``uploads``: where uploaded files are kept (they stay the
    sources' files); ``host``: the address listened on (with ``allowed_hosts``, the Host
    names answered); ``allowed_origins``: web origins besides the server's own that may
    call it from a browser; ``search_slots``: searches run at once in this process
    (default: one per CPU core); ``answer_slots``: answers written at once (default: one
    for the local model, else ``llm_concurrency``). ``project``: the name of ``iso``'s
    project; ``projects``: the apps of other projects (made with ``gate=False``), served
    at ``/p/{name}/`` behind this app's gate, which admits a key only to the projects it
    lists."""
    iso.log_by_default()  # a server logs its searches unless told not to
    turns = Turns(iso, search_slots=search_slots, answer_slots=answer_slots)
    local = turns.local

    agents = None
    if mcp:  # the MCP tools at /mcp (streamable HTTP), behind the same gate and turns
        from isotope.server.mcp import create_mcp, guard

        agents = create_mcp(iso, roots=roots, remote=True, turns=turns)
        agents_app = agents.streamable_http_app()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            if agents is not None:
                await stack.enter_async_context(agents.session_manager.run())
            for other in (projects or {}).values():  # (a mounted app's is not run)
                await stack.enter_async_context(other.router.lifespan_context(other))
            yield

    app = FastAPI(title="isotope", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None,
                  description="Question-indexed retrieval: search, ask, ingest; MCP tools "
                  "for agents at /mcp. Errors are JSON {\"error\": \"...\"}.")
    if mcp:
        app.mount("/mcp", guard(agents_app))
    for name, other in (projects or {}).items():  # each its own index: nothing shared
        app.mount(f"/p/{name}", other)
    with contextlib.suppress(OSError):  # (a read-only index: uploads answer 503)
        uploads.mkdir(parents=True, exist_ok=True)

    @app.exception_handler(errors.IsotopeError)
    def _named(request: Request, exc: errors.IsotopeError) -> JSONResponse:
        status = next(code for kind, code in STATUS if isinstance(exc, kind))
        return JSONResponse({"error": str(exc)}, status_code=status)

    @app.exception_handler(StarletteHTTPException)
    def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if _disk_full(exc.__cause__):  # FastAPI's 400 for a form it could not spool
            return JSONResponse({"error": DISK_FULL}, status_code=507)
        message = {404: f"no route {request.url.path}; the routes are listed at /docs",
                   405: f"{request.method} is not allowed on {request.url.path}"}.get(
                       exc.status_code, str(exc.detail))
        return JSONResponse({"error": message}, status_code=exc.status_code,
                            headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": _validation(exc)}, status_code=422)

    @app.exception_handler(OSError)
    def _system(request: Request, exc: OSError) -> JSONResponse:
        if _disk_full(exc):
            return JSONResponse({"error": DISK_FULL}, status_code=507)
        log.exception("unexpected error in %s %s", request.method, request.url.path)
        return JSONResponse({"error": f"internal error ({type(exc).__name__}); the server's "
                             "log has the details"}, status_code=500)

    @app.exception_handler(Exception)
    def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error in %s %s", request.method, request.url.path)
        return JSONResponse({"error": f"internal error ({type(exc).__name__}); the server's "
                             "log has the details"}, status_code=500)

    static = Path(__file__).parent / "static"

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        """The search page (plain HTML and JavaScript, served from the package)."""
        return FileResponse(static / "index.html", media_type="text/html")

    @app.get("/app.js", include_in_schema=False)
    def script() -> FileResponse:
        return FileResponse(static / "app.js", media_type="text/javascript")

    @app.get("/favicon.ico", include_in_schema=False)
    def icon() -> FileResponse:
        return FileResponse(static / "favicon.svg", media_type="image/svg+xml")

    _api_docs(app)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        """Liveness, the version, which server process answered (``--workers``), and
        whether the answer model is local (slow on a CPU)."""
        return {"status": "ok", "version": __version__, "process": os.getpid(),
                "answer_model_local": local}

    @app.post("/search", response_model=QueryResponse)
    async def search(body: SearchRequest, request: Request) -> Response:
        """The chunks that answer the query (as ``isotope query --raw --json``), of the
        sources the key may see."""
        found = await turns.search(body.query, body.k, mode=body.mode, filters=body.filters,
                                   principal=allowed(request, "search"), explain=body.explain)
        return json_response(found)

    @app.post("/ask", response_model=QueryResponse,
              responses={200: {"content": {"text/event-stream": {}}}})
    async def ask(body: AskRequest, request: Request) -> Any:
        """An answer citing the chunks found; ``stream``: as server-sent events
        (``results``, then ``token`` for each piece of the model's reply, then
        ``answer``, then ``done``). The model is stopped when the client goes away."""
        found = await turns.search(body.query, body.k, mode=body.mode, filters=body.filters,
                                   for_answer=True, principal=allowed(request, "ask"),
                                   explain=body.explain)
        if not body.stream:
            await _answer(turns, found, request)
            return json_response(found)
        return StreamingResponse(_events(turns, found, request),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store"})

    @app.post("/answer", response_model=QueryResponse)
    async def answer(body: QueryResponse, request: Request) -> Response:
        """An answer to a search already made (a ``/search`` response sent back), from
        its results: as ``Isotope.answer``."""
        allowed(request, "answer")
        body = QueryResponse.model_validate(_plain_text(body.model_dump()))
        if not body.query.strip():
            raise errors.InvalidArgument("the response has no query to answer")
        await _answer(turns, body, request)
        return json_response(body)

    @app.get("/questions")
    def questions(request: Request,
                  source: Annotated[str | None, Query(description=SOURCE_NAME)] = None,
                  chunk: Annotated[int | None, Query(
                      description="Only this chunk of the source (its number, from 0)")
                  ] = None,
                  chunk_id: Annotated[str | None, Query(
                      description="One chunk, by its id (as search results give it)")] = None,
                  sample: Annotated[int | None, Query(
                      ge=1, le=10_000, description="This many drawn at random across the "
                      "index")] = None,
                  seed: Annotated[int | None, Query(
                      description="The seed of the draw (the same seed, the same sample)")
                  ] = None) -> list[dict[str, Any]]:
        """The generated questions, kept and dropped (as ``isotope questions``): of a
        ``source`` (only its chunk number ``chunk`` if given), of one chunk by
        ``chunk_id``, or ``sample`` drawn across the index (of what the key may see)."""
        return [q.model_dump() for q in iso.questions(source, chunk=chunk, chunk_id=chunk_id,
                                                      sample=sample, seed=seed,
                                                      principal=allowed(request, "questions"))]

    @app.post("/feedback")
    async def feedback(body: FeedbackRequest, request: Request) -> dict[str, Any]:
        """Mark a result of a search this key made useful or not (as ``isotope
        feedback``): a useful mark teaches the chunk the query as a question (the
        ``learn`` setting), a not-useful one keeps the chunk from ranking first again for
        that query or a very close one. A query id of another key's user, or of another
        project, answers 404; a chunk the search did not return, 400."""
        who, reads = allowed(request, "feedback"), scope_in(request.scope) == "read"
        done = await turns.write(lambda: iso.feedback(body.query_id, body.chunk_id,
                                                      body.useful, principal=who,
                                                      read_only=reads))
        return dict(done.model_dump())

    @app.get("/log")
    def query_log(request: Request, days: Annotated[float | None, Query(
                      gt=0, le=36_500, allow_inf_nan=False,
                      description="Only the last this many days (default: all it keeps)")
                  ] = None,
                  top: Annotated[int, Query(ge=1, le=1_000, description="Rows per list")
                                 ] = 10) -> dict[str, Any]:
        """What the query log says (as ``isotope log --json``): the most frequent
        queries, those probably not found or marked not useful, feedback per source,
        latency percentiles. Needs an administrator's key."""
        allowed(request, "log")
        return dict(iso.log_summary(days, top).model_dump())

    @app.get("/sources")
    def sources(request: Request) -> list[dict[str, Any]]:
        """The sources the key may see, with their counts (and access lists, for an
        administrator's key: a user's does not learn the names of other users and
        groups)."""
        who = allowed(request, "sources")
        shown = [source_listing(info) for info in iso.sources(principal=who)]
        if who is not None and not who.admin:
            for listing in shown:
                listing.pop("access", None)
        return shown

    @app.delete("/sources", status_code=204)
    async def delete_named(source: Annotated[str, Query(description=SOURCE_NAME)],
                           request: Request, members: Members = False) -> Response:
        """Remove a source; a container (a mailbox) only with ``members=true``. Needs an
        administrator's key."""
        return await _delete(source, members, allowed(request, "delete"))

    @app.delete("/sources/{source:path}", status_code=204)
    async def delete_source(source: Annotated[str, PathParam(description=SOURCE_NAME)],
                            request: Request, members: Members = False) -> Response:
        """Remove a source named in the path (``#`` sent as ``%23``); a container (a
        mailbox) only with ``?members=true``. ``DELETE /sources?source=NAME`` is the
        unambiguous form. Needs an administrator's key."""
        who = allowed(request, "delete")
        named = source if source.startswith("/") or "://" in source else (
            source if await run_in_threadpool(lambda: iso.has_source(source, principal=who))
            else "/" + source)
        return await _delete(named, members, who)

    async def _delete(source: str, members: bool, who: Principal | None) -> Response:
        def delete() -> None:
            gone = iso.delete(source, members=members, principal=who)
            folder = os.path.realpath(uploads)
            for uri in gone:  # an upload's file goes with its source
                if os.path.dirname(os.path.realpath(uri)) == folder:
                    Path(uri).unlink(missing_ok=True)

        await turns.write(delete)
        return Response(status_code=204)

    @app.get("/status")
    def status(request: Request) -> dict[str, Any]:
        """The index's description, with the counts of what the key may see (and, for an
        administrator's key, its size on disk)."""
        who = allowed(request, "status")
        shown = iso.status(principal=who).model_dump(mode="json")
        if who is not None and not who.admin:
            return user_status(shown)
        return shown

    @app.get("/chunks/{chunk_id}/questions")
    def chunk_questions(chunk_id: ChunkId,
                        request: Request) -> dict[str, Any]:
        """Every generated question of a chunk with the atom it was written for: kept
        (searched) and dropped, each dropped one with why (as ``isotope questions``). A
        chunk the key may not see answers 404, as one that does not exist."""
        who = allowed(request, "chunk_questions")
        return iso.chunk_questions(chunk_id, principal=who).model_dump(mode="json")

    @app.post("/chunks/{chunk_id}/questions")
    async def add_question(chunk_id: ChunkId,
                           body: QuestionText, request: Request) -> dict[str, Any]:
        """Add a question by hand to a chunk (origin ``manual``; as ``isotope questions
        add``). Needs an administrator's key."""
        allowed(request, "add_question")
        made = await turns.write(lambda: iso.add_question("", body.text, chunk_id=chunk_id))
        return {"id": made}

    @app.put("/questions/{question_id}")
    async def edit_question(question_id: QuestionId,
                            body: QuestionText, request: Request) -> dict[str, Any]:
        """Change a question's text (it becomes ``manual``); its new id. Needs an
        administrator's key."""
        allowed(request, "edit_question")
        return {"id": await turns.write(lambda: iso.edit_question(question_id, body.text))}

    @app.delete("/questions/{question_id}", status_code=204)
    async def disable_question(question_id: QuestionId,
                               request: Request) -> Response:
        """Take a question out of every search (kept, dropped: ``disabled by hand``).
        Needs an administrator's key."""
        allowed(request, "disable_question")
        await turns.write(lambda: iso.disable_question(question_id))
        return Response(status_code=204)

    @app.post("/questions/{question_id}/enable", status_code=204)
    async def enable_question(question_id: QuestionId,
                              request: Request) -> Response:
        """Search a question disabled by hand again. Needs an administrator's key."""
        allowed(request, "enable_question")
        await turns.write(lambda: iso.enable_question(question_id))
        return Response(status_code=204)

    @app.post("/ingest")
    async def ingest(request: Request, files: Annotated[list[UploadFile], FileParam()],
                     allow: Annotated[list[str] | None, Form(
                         description="Who may see these sources (repeatable): public, "
                         "user:NAME, group:NAME")] = None) -> Response:
        """Store uploaded files (kept in the server's upload folder) and ingest them. A
        file that cannot be ingested is not kept (an upload that replaced an earlier one
        of its name puts that one back): 422 with the report. Two files of one name in
        one upload are refused (400). Needs an administrator's key."""
        allowed(request, "ingest")
        names = [safe_name(f.filename) for f in files]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise errors.InvalidArgument(f"two files named {twice[0]} in one upload (names "
                                         "are reduced to plain file names); send one")
        reply: Response = await turns.write(
            lambda: _ingest_uploads(iso, files, uploads, max_bytes, allow))
        return reply

    @app.post("/sync")
    async def sync(body: SyncRequest, request: Request) -> dict[str, Any]:
        """Make the index match folders below the server's ``serve_roots`` (links that
        lead out of them are not followed). Needs an administrator's key."""
        allowed(request, "sync")
        wanted = below_roots(body.paths, roots, what="POST /sync")
        return reported(await turns.write(lambda: iso.sync(wanted, confine=roots,
                                                           allow=body.allow)))

    if gate:
        app.add_middleware(Gate, keys=keys, max_bytes=max_bytes,  # outermost but errors
                           hosts=own_hosts(host, allowed_hosts, bool(keys)),
                           origins=frozenset(allowed_origins), body_timeout=body_timeout,
                           writes=_writes, project=project)
    return app


DISK_FULL = "the server's disk is full; nothing of the request was stored"


def _disk_full(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what caused it) is a full disk or quota."""
    import errno

    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _plain_text(value: Any) -> Any:
    """``value`` with every lone surrogate in its text (an escaped ``\\ud800`` in a JSON
    body) shown as U+FFFD: such text cannot be encoded for the model or the reply."""
    if isinstance(value, str):
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in value)
    if isinstance(value, dict):
        return {_plain_text(k): _plain_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_text(v) for v in value]
    return value


def _validation(exc: RequestValidationError) -> str:
    """A validation error in one line: where, and what is wrong."""
    problems = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        problems.append(f"{where}: {message}")
    return "invalid request: " + "; ".join(problems)


async def _answer(turns: Turns, found: QueryResponse, request: Request,
                  on_token: Callable[[str], None] | None = None) -> bool:
    """Have the model answer ``found``, in turn; stops the model when the client goes
    away (then returns False), or when a streamed reply whose client left is cancelled
    by Starlette."""
    return await turns.answer(found, asker(request), gone=request.is_disconnected,
                              on_token=on_token)


async def _events(turns: Turns, found: QueryResponse,
                  request: Request) -> AsyncIterator[str]:
    """The /ask stream: results at once, the reply's tokens as the model writes them,
    then the answer as checked, then done."""
    yield "event: results\ndata: " + found.model_dump_json() + "\n\n"
    loop = asyncio.get_running_loop()
    tokens: asyncio.Queue[str | None] = asyncio.Queue()

    def token(piece: str) -> None:
        loop.call_soon_threadsafe(tokens.put_nowait, piece)

    async def run() -> None:
        try:
            await _answer(turns, found, request, token)
        finally:
            loop.call_soon_threadsafe(tokens.put_nowait, None)

    work = asyncio.ensure_future(run())
    try:
        while (piece := await tokens.get()) is not None:
            yield "event: token\ndata: " + json.dumps({"text": piece}) + "\n\n"
        await work
        yield "event: answer\ndata: " + json.dumps(
            {"answer": found.answer, "citations": found.citations,
             "answer_kind": found.answer_kind}) + "\n\n"
    except errors.IsotopeError as exc:
        yield "event: error\ndata: " + json.dumps({"error": str(exc)}) + "\n\n"
    finally:
        if not work.done():
            work.cancel()
    yield "event: done\ndata: {}\n\n"


def _api_docs(app: FastAPI) -> None:
    """``/docs``: Swagger UI from assets in the package (fastapi-offline's), never from a
    CDN; without them, a page that says where the schema is."""
    try:
        import fastapi_offline
    except ImportError:
        @app.get("/docs", include_in_schema=False)
        def schema_only() -> HTMLResponse:
            return HTMLResponse("<!doctype html><title>isotope API</title><p>The API's "
                                "OpenAPI schema is at <a href='/openapi.json'>/openapi.json"
                                "</a>.</p>")
        return
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.staticfiles import StaticFiles

    assets = Path(fastapi_offline.__file__).parent / "static"
    app.mount("/docs/static", StaticFiles(directory=assets), name="docs-static")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title="isotope API",
                                   swagger_js_url="/docs/static/swagger-ui-bundle.js",
                                   swagger_css_url="/docs/static/swagger-ui.css",
                                   swagger_favicon_url="/docs/static/favicon.png")


def _ingest_uploads(iso: Isotope, files: list[UploadFile], folder: Path,
                    max_bytes: int, allow: list[str] | None = None) -> Response:
    """Save the uploads and ingest them; the files that fail are not kept (an earlier
    upload of the same name is put back)."""
    saved: list[tuple[Path, Path | None]] = []
    try:
        for upload in files:
            saved.append(_save(upload, folder, max_bytes))
    except BaseException:
        _restore(saved, set())
        raise
    try:
        report = iso.ingest([path for path, _ in saved], allow=allow)
    except BaseException:
        _restore(saved, {str(path) for path, _ in saved})
        raise
    failed = {e.path for e in report.errors}
    _restore(saved, failed)
    body = reported(report)
    if report.ok:
        return JSONResponse(body)
    body["error"] = "; ".join(f"{Path(e.path).name}: {e.message}" for e in report.errors)
    return JSONResponse(body, status_code=422)


def _restore(saved: list[tuple[Path, Path | None]], failed: set[str]) -> None:
    """Keep the uploads that were ingested; for the others (``failed``) put back what
    they replaced, or remove them. Drops the replaced copies of the ones kept."""
    for path, previous in saved:
        if str(path) in failed:
            if previous is not None:
                os.replace(previous, path)
            else:
                path.unlink(missing_ok=True)
        elif previous is not None:
            previous.unlink(missing_ok=True)


def _save(upload: UploadFile, folder: Path, max_bytes: int) -> tuple[Path, Path | None]:
    """Write an upload to ``folder`` under its safe name, at most ``max_bytes``, never
    following a link; returns its path and where the file it replaced was moved (to put
    back if the new one fails)."""
    name = safe_name(upload.filename)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=".upload-")
    except OSError as exc:
        kind = errors.DiskFull if _disk_full(exc) else errors.StoreError
        raise kind(f"uploads cannot be kept in {folder} ({exc.strerror or exc}); nothing "
                   "was stored") from None
    written = 0
    try:
        with os.fdopen(handle, "wb") as out:
            while block := upload.file.read(1 << 20):
                written += len(block)
                if written > max_bytes:
                    raise errors.InvalidArgument(f"{name} is over {max_bytes} bytes (the "
                                                 "max_upload_mb setting)")
                out.write(block)
        target = folder / name
        previous: Path | None = None
        if os.path.lexists(target):
            previous = folder / f".replaced-{uuid.uuid4().hex}"
            os.replace(target, previous)
        os.replace(temporary, target)  # a link at the target is replaced, not followed
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        if _disk_full(exc):
            raise errors.DiskFull(f"the upload {name} could not be saved in {folder}: the "
                                  "disk is full; nothing of it was stored; free some space "
                                  "and send it again") from None
        raise errors.StoreError(f"the upload {name} could not be saved in {folder} "
                                f"({exc.strerror or exc}); nothing of it was stored") from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target, previous


def serving_app() -> FastAPI:
    """The app of ``isotope serve`` (a factory: each worker process builds its own), over
    the index in ``ISOTOPE_SERVE_INDEX`` (and the projects of ``ISOTOPE_SERVE_PROJECTS``,
    a JSON object of names and locations, each at ``/p/NAME/``), with the settings of the
    environment. The server's writes wait for other processes' (up to ``lock_wait``,
    default 300 s)."""
    others = json.loads(os.environ.get("ISOTOPE_SERVE_PROJECTS") or "{}")
    projects = {name: _served(location, gate=False) for name, location in others.items()}
    return _served(os.environ["ISOTOPE_SERVE_INDEX"], projects=projects,
                   project=os.environ.get("ISOTOPE_SERVE_PROJECT") or None)


def _served(index: str, **options: Any) -> FastAPI:
    """The app over the index at ``index``, with the settings of the environment."""
    from isotope.settings import env_origin

    iso = Isotope.open(index if "://" in index else Path(index), create=False,
                       lock_wait=None if env_origin("lock_wait") else 300.0)
    settings = iso.settings
    roots = [Path(r).expanduser().resolve() for r in settings.serve_roots]
    return create_app(iso, keys=Keys.from_settings(settings), roots=roots,
                      max_bytes=int(settings.max_upload_mb * 1_000_000),
                      uploads=uploads_folder(iso),
                      host=os.environ.get("ISOTOPE_SERVE_HOST", "127.0.0.1"),
                      allowed_hosts=settings.allowed_hosts,
                      allowed_origins=settings.allowed_origins,
                      body_timeout=settings.body_timeout,
                      search_slots=max(1, (os.cpu_count() or 1)
                                       // int(os.environ.get("ISOTOPE_SERVE_WORKERS", "1"))),
                      **options)


def uploads_folder(iso: Isotope) -> Path:
    """Where a server keeps uploads: beside an index in a directory, else in the data
    folder under the index's name."""
    from isotope import stores
    from isotope.settings import data_dir

    location = str(iso.settings.index)
    if stores.scheme(location) is None:
        return Path(location) / "uploads"
    return data_dir() / "uploads" / uuid.uuid5(uuid.NAMESPACE_URL, location).hex


__all__ = ["AskRequest", "SearchRequest", "create_app", "safe_name", "serving_app",
           "uploads_folder"]
