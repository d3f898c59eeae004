"""The HTTP API of ``isotope serve``: a thin shell over :class:`isotope.Isotope`.

Every endpoint that touches the index is a plain function, so FastAPI runs it in its
thread pool: the embedder, the store and the language model are never called on the
event loop, searches run side by side, and an ingest (which holds the index's writer
lock) never blocks them. Errors are JSON ``{"error": ...}`` with the status that fits;
never a traceback.

Imported only by ``isotope serve`` (the ``server`` extra). Annotations are evaluated at
definition (no ``from __future__ import annotations``): FastAPI reads the endpoints'
parameter types, some of which are local to :func:`create_app`."""

import asyncio
import json
import logging
import os
import re
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request, UploadFile
from fastapi import File as FileParam
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from isotope import __version__, errors
from isotope.index import Isotope
from isotope.models import QueryResponse
from isotope.reports import source_listing
from isotope.server.auth import Keys, Scope

log = logging.getLogger(__name__)

STATUS: list[tuple[type[errors.IsotopeError], int]] = [
    (errors.SourceNotFound, 404),
    (errors.IndexLocked, 409),
    (errors.SyncRefused, 409),
    (errors.MissingDependency, 501),
    (errors.StoreError, 503),
    (errors.IndexDamaged, 500),
    (errors.IsotopeError, 400),
]
"""HTTP status of each named error (the first that matches)."""


class SearchRequest(BaseModel):
    query: str = Field(min_length=1, max_length=10_000)
    k: int | None = Field(None, ge=1, le=10_000)
    mode: str | None = None
    filters: dict[str, Any] | None = None


class AskRequest(SearchRequest):
    stream: bool = False
    """Send the results, then the answer, as server-sent events."""


class SyncRequest(BaseModel):
    paths: list[str] = Field(min_length=1, max_length=1_000)


class BodyLimit:
    """Refuses a request whose declared body is over ``max_bytes`` (413), before reading
    it. A plain ASGI middleware: Starlette's ``BaseHTTPMiddleware`` cost about a
    millisecond of every request."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            length = dict(scope["headers"]).get(b"content-length")
            if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
                await JSONResponse({"error": f"the request body is over {self.max_bytes} "
                                    "bytes (the max_upload_mb setting)"},
                                   status_code=413)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def json_response(model: BaseModel) -> Response:
    """``model`` as JSON, serialised once: the endpoint's ``response_model`` documents it,
    and FastAPI does not validate it again (a result list costs a few milliseconds)."""
    return Response(model.model_dump_json(), media_type="application/json")


def safe_name(filename: str | None) -> str:
    """An uploaded file's name reduced to a plain file name: no folders (``../``, ``/etc``,
    ``C:\\``), no control characters, nothing but letters, digits and ``._- ``."""
    name = PureWindowsPath(PurePosixPath(filename or "").name).name
    name = re.sub(r"[^\w.\- ]", "_", name).strip(" .")
    if not name or name in (".", ".."):
        raise errors.InvalidArgument(f"upload {filename!r} has no usable file name; name the "
                                     "file, e.g. notes.md")
    return name[:200]


def create_app(iso: Isotope, *, keys: Keys, roots: list[Path], max_bytes: int,
               uploads: Path, host: str = "127.0.0.1", mcp: bool = True,
               search_slots: int | None = None) -> FastAPI:
    """The API over ``iso``. ``keys``: empty for none (the CLI then binds to loopback only);
    ``roots``: folders below which ``POST /sync`` may read; ``uploads``: where uploaded
    files are kept (they stay the sources' files); ``search_slots``: searches run at once
    in this process (default: one per CPU core), the others wait their turn."""
    # More searches at once than cores only adds contention: 8 threads searching in one
    # process made 68 searches/s on 2 cores, 2 threads 105 (each waits for the other's
    # hold on Python's lock, and the CPU caches are shared among more of them).
    slots = asyncio.Semaphore(search_slots or os.cpu_count() or 1)

    async def searching(*args: Any, **kwargs: Any) -> QueryResponse:
        """``iso.search`` in the thread pool (never on the event loop), in turn."""
        async with slots:
            return await run_in_threadpool(iso.search, *args, **kwargs)

    lifespan = None
    if mcp:  # the MCP tools at /mcp (streamable HTTP), behind the same keys
        from isotope.server.mcp import create_mcp, guard

        agents = create_mcp(iso, roots=roots, host=host)
        agents_app = agents.streamable_http_app()

        @asynccontextmanager
        async def lifespan(_: FastAPI) -> AsyncIterator[None]:
            async with agents.session_manager.run():
                yield

    app = FastAPI(title="isotope", version=__version__, lifespan=lifespan,
                  description="Question-indexed retrieval: search, ask, ingest; MCP tools "
                  "for agents at /mcp.")
    if mcp:
        app.mount("/mcp", guard(agents_app, keys, max_bytes))
    uploads.mkdir(parents=True, exist_ok=True)

    @app.exception_handler(errors.IsotopeError)
    def _named(request: Request, exc: errors.IsotopeError) -> JSONResponse:
        status = next(code for kind, code in STATUS if isinstance(exc, kind))
        return JSONResponse({"error": str(exc)}, status_code=status)

    @app.exception_handler(HTTPException)
    def _http(request: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code,
                            headers=exc.headers)

    @app.exception_handler(Exception)
    def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error in %s %s", request.method, request.url.path)
        return JSONResponse({"error": f"internal error ({type(exc).__name__}); the server's "
                             "log has the details"}, status_code=500)

    app.add_middleware(BodyLimit, max_bytes=max_bytes)

    async def caller(request: Request) -> Scope:
        """The scope of the request's key (``write`` when no key is configured)."""
        if any(k.lower() in ("api_key", "key", "token", "access_token")
               for k in request.query_params):
            raise HTTPException(400, "send the API key in the Authorization header "
                                "(Authorization: Bearer KEY), never in the URL")
        if not keys:
            return "write"
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        scope = keys.scope(token.strip()) if scheme.lower() == "bearer" else None
        if scope is None:
            raise HTTPException(401, "a valid API key is needed: Authorization: Bearer KEY",
                                headers={"WWW-Authenticate": "Bearer"})
        return scope

    async def writer(scope: Annotated[Scope, Depends(caller)]) -> Scope:
        if scope != "write":
            raise HTTPException(403, "this API key may only read")
        return scope

    Read = Annotated[Scope, Depends(caller)]
    Write = Annotated[Scope, Depends(writer)]

    static = Path(__file__).parent / "static"

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        """The search page (plain HTML and JavaScript, served from the package)."""
        return FileResponse(static / "index.html", media_type="text/html")

    @app.get("/app.js", include_in_schema=False)
    def script() -> FileResponse:
        return FileResponse(static / "app.js", media_type="text/javascript")

    @app.get("/health")
    def health() -> dict[str, str | int]:
        """Liveness, the version, and which server process answered (``--workers``)."""
        return {"status": "ok", "version": __version__, "process": os.getpid()}

    @app.post("/search", response_model=QueryResponse)
    async def search(body: SearchRequest, _: Read) -> Response:
        """The chunks that answer the query (as ``isotope query --raw --json``)."""
        found = await searching(body.query, body.k, mode=body.mode, filters=body.filters)
        return json_response(found)

    @app.post("/ask", response_model=QueryResponse,
              responses={200: {"content": {"text/event-stream": {}}}})
    async def ask(body: AskRequest, _: Read) -> Any:
        """An answer citing the chunks found; ``stream``: as server-sent events
        (``results``, then ``answer``, then ``done``)."""
        found = await searching(body.query, iso.settings.answer_k if body.k is None
                                else body.k, mode=body.mode, filters=body.filters)
        if not body.stream:
            return json_response(await run_in_threadpool(iso.answer, found))

        def events() -> Iterator[str]:
            yield "event: results\ndata: " + found.model_dump_json() + "\n\n"
            try:
                answered = iso.answer(found)  # from the results just sent
                yield "event: answer\ndata: " + json.dumps(
                    {"answer": answered.answer, "citations": answered.citations}) + "\n\n"
            except errors.IsotopeError as exc:
                yield "event: error\ndata: " + json.dumps({"error": str(exc)}) + "\n\n"
            yield "event: done\ndata: {}\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.get("/sources")
    def sources(_: Read) -> list[dict[str, Any]]:
        return [source_listing(info) for info in iso.sources()]

    @app.delete("/sources/{source:path}", status_code=204)
    def delete_source(source: str, _: Write) -> Response:
        iso.delete(source if source.startswith("/") or "://" in source
                   else source if iso.store.get_source(source) else "/" + source)
        return Response(status_code=204)

    @app.get("/status")
    def status(_: Read) -> dict[str, Any]:
        return iso.status().model_dump(mode="json")

    @app.get("/chunks/{chunk_id}/questions")
    def chunk_questions(chunk_id: str, _: Read) -> dict[str, Any]:
        """Every generated question of a chunk with the atom it was written for: kept
        (searched) and dropped, each dropped one with why (as ``isotope questions``)."""
        chunk = iso.store.get_chunks([chunk_id]).get(chunk_id)
        if chunk is None:
            raise errors.SourceNotFound(f"no chunk {chunk_id!r} in the index")
        found = iso.questions(chunk_id=chunk_id)
        return {"chunk": chunk.model_dump(mode="json"),
                "waiting": bool(iso.store.without_questions([chunk_id])),
                "questions": [q.model_dump() for q in found]}

    @app.post("/ingest")
    def ingest(files: Annotated[list[UploadFile], FileParam()], _: Write) -> dict[str, Any]:
        """Store uploaded files (kept in the server's upload folder) and ingest them."""
        saved = [_save(upload, uploads, max_bytes) for upload in files]
        report = iso.ingest(saved)
        return _report(report)

    @app.post("/sync")
    def sync(body: SyncRequest, _: Write) -> dict[str, Any]:
        """Make the index match folders below the server's ``serve_roots``."""
        if not roots:
            raise HTTPException(403, "POST /sync is off: the server has no serve_roots")
        wanted = []
        for text in body.paths:
            if "\x00" in text:
                raise errors.InvalidArgument("a path cannot hold a NUL character")
            path = Path(os.path.realpath(text))
            if not any(path == root or root in path.parents for root in roots):
                raise HTTPException(403, f"{text} is not below the server's serve_roots")
            wanted.append(path)
        return _report(iso.sync(wanted))

    return app


def _report(report: Any) -> dict[str, Any]:
    from dataclasses import asdict

    done: dict[str, Any] = json.loads(json.dumps({**asdict(report), "ok": report.ok},
                                                 default=str))
    return done


def _save(upload: UploadFile, folder: Path, max_bytes: int) -> Path:
    """Write an upload to ``folder`` under its safe name (replacing an earlier upload of
    that name, never following a link), at most ``max_bytes``."""
    name = safe_name(upload.filename)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".upload-")
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
        os.replace(temporary, target)  # a link at the target is replaced, not followed
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def serving_app() -> FastAPI:
    """The app of ``isotope serve`` (a factory: each worker process builds its own), over
    the index in ``ISOTOPE_SERVE_INDEX``, with the settings of the environment."""
    index = os.environ["ISOTOPE_SERVE_INDEX"]
    iso = Isotope.open(index if "://" in index else Path(index), create=True)
    roots = [Path(r).expanduser().resolve() for r in iso.settings.serve_roots]
    return create_app(iso, keys=Keys.from_settings(iso.settings), roots=roots,
                      max_bytes=int(iso.settings.max_upload_mb * 1_000_000),
                      uploads=uploads_folder(iso),
                      host=os.environ.get("ISOTOPE_SERVE_HOST", "127.0.0.1"),
                      search_slots=max(1, (os.cpu_count() or 1)
                                       // int(os.environ.get("ISOTOPE_SERVE_WORKERS", "1"))))


def uploads_folder(iso: Isotope) -> Path:
    """Where a server keeps uploads: beside an index in a directory, else in the data
    folder under the index's name."""
    from isotope import stores
    from isotope.settings import _default_data_dir

    location = str(iso.settings.index)
    if stores.scheme(location) is None:
        return Path(location) / "uploads"
    return _default_data_dir() / "uploads" / uuid.uuid5(uuid.NAMESPACE_URL, location).hex


__all__ = ["AskRequest", "SearchRequest", "create_app", "safe_name", "serving_app",
           "uploads_folder"]
