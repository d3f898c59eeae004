"""The HTTP API of ``isotope serve``, built: :func:`create_app` puts together a thin
shell over :class:`isotope.Isotope`. Its routes are the routers of
:mod:`isotope.server.routes_search`, :mod:`~isotope.server.routes_questions`,
:mod:`~isotope.server.routes_graph` and :mod:`~isotope.server.routes_sources`, each
route checked through the table of operations (:mod:`isotope.server.operations`) and
taking its turn (:class:`isotope.server.work.Turns`, one per served index, shared with
the MCP tools); here are what the app adds around them: the gate
(:class:`isotope.server.gate.Gate`: Host, Origin, API key, body size and stalls, before a
byte of a body is read), errors as JSON ``{"error": ...}`` with the status that fits
(:data:`STATUS`; validation, 404, 405 included; never a traceback), the search page,
``/health``, ``/docs`` (from assets in the package), the MCP tools at ``/mcp``, and the
other projects at ``/p/NAME/``. :func:`serving_app` is the factory each worker process of
``isotope serve`` calls; :func:`uploads_folder` says where uploads are kept.

Imported only by ``isotope serve`` (the ``server`` extra). Annotations are evaluated at
definition (no ``from __future__ import annotations``), as FastAPI reads the endpoints'
parameter types."""

import contextlib
import json
import logging
import os
import uuid
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from isotope import __version__, errors
from isotope.index import Isotope
from isotope.server import routes_graph, routes_questions, routes_search, routes_sources
from isotope.server.auth import Keys
from isotope.server.gate import Gate, own_hosts, unprefixed
from isotope.server.http import DISK_FULL, disk_full
from isotope.server.operations import Forbidden, writes
from isotope.server.work import Turns

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
        if disk_full(exc.__cause__):  # FastAPI's 400 for a form it could not spool
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
        if disk_full(exc):
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
        whether the answer model is local (slow on a CPU) and the index has a knowledge
        graph (the page then shows a result's entities)."""
        return {"status": "ok", "version": __version__, "process": os.getpid(),
                "answer_model_local": local, "graph": iso.settings.graph}

    app.include_router(routes_search.router(iso, turns))
    app.include_router(routes_questions.router(iso, turns))
    app.include_router(routes_graph.router(iso))
    app.include_router(routes_sources.router(iso, turns, roots=roots, uploads=uploads,
                                             max_bytes=max_bytes))

    if gate:
        app.add_middleware(Gate, keys=keys, max_bytes=max_bytes,  # outermost but errors
                           hosts=own_hosts(host, allowed_hosts, bool(keys)),
                           origins=frozenset(allowed_origins), body_timeout=body_timeout,
                           writes=_writes, project=project)
    return app


def _validation(exc: RequestValidationError) -> str:
    """A validation error in one line: where, and what is wrong."""
    problems = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        problems.append(f"{where}: {message}")
    return "invalid request: " + "; ".join(problems)


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


__all__ = ["create_app", "serving_app", "uploads_folder"]
