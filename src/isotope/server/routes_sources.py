"""The HTTP routes of sources and of the index: list, delete, ingest (uploads), sync (of
folders below ``serve_roots``), the status and the query log. A user's key is shown the
sources without their access lists and the status without the index's details
(:func:`user_status`), as the table's ``shapes`` of those operations say
(:func:`isotope.access.entitled`)."""

from __future__ import annotations

import os
import re
import tempfile
import uuid
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Annotated, Any

from fastapi import APIRouter, Form, Query, Request, Response, UploadFile
from fastapi import File as FileParam
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from isotope import errors
from isotope.access import Principal, entitled
from isotope.index import Isotope
from isotope.reports import source_listing
from isotope.server.http import allowed, disk_full
from isotope.server.work import Turns, below_roots, reported

MAX_NAME_BYTES = 200
"""The longest upload name kept, in UTF-8 bytes (file systems allow 255)."""


class SyncRequest(BaseModel):
    paths: list[str] = Field(min_length=1, max_length=1_000)
    allow: list[str] | None = Field(None, max_length=1_000, description="Who may see these "
                                    "sources: public, user:NAME, group:NAME (default: the "
                                    ".isotope-access rules file, else the list each had)")


SOURCE_NAME = "The source's name, as GET /sources lists it"
Members = Annotated[bool, Query(description="A container's members too (a mailbox's messages)")]


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


def router(iso: Isotope, turns: Turns, *, roots: list[Path], uploads: Path,
           max_bytes: int) -> APIRouter:
    """The routes over ``iso``, in ``turns``; ``roots``: the folders ``POST /sync`` may
    read; ``uploads``: where uploads are kept; ``max_bytes``: an upload's limit."""
    api = APIRouter()

    @api.get("/log")
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

    @api.get("/sources")
    def sources(request: Request) -> list[dict[str, Any]]:
        """The sources the key may see, with their counts (and access lists, for an
        administrator's key: a user's does not learn the names of other users and
        groups)."""
        principal = allowed(request, "sources")
        shown = [source_listing(info) for info in iso.sources(principal=principal)]
        if not entitled("access_lists", principal):
            for listing in shown:
                listing.pop("access", None)
        return shown

    @api.delete("/sources", status_code=204)
    async def delete_named(source: Annotated[str, Query(description=SOURCE_NAME)],
                           request: Request, members: Members = False) -> Response:
        """Remove a source; a container (a mailbox) only with ``members=true``. Needs an
        administrator's key."""
        return await _delete(source, members, allowed(request, "delete"))

    @api.delete("/sources/{source:path}", status_code=204)
    async def delete_source(source: Annotated[str, PathParam(description=SOURCE_NAME)],
                            request: Request, members: Members = False) -> Response:
        """Remove a source named in the path (``#`` sent as ``%23``); a container (a
        mailbox) only with ``?members=true``. ``DELETE /sources?source=NAME`` is the
        unambiguous form. Needs an administrator's key."""
        principal = allowed(request, "delete")
        named = source if source.startswith("/") or "://" in source else (
            source if await run_in_threadpool(lambda: iso.has_source(source, principal=principal))
            else "/" + source)
        return await _delete(named, members, principal)

    async def _delete(source: str, members: bool, principal: Principal | None) -> Response:
        def delete() -> None:
            gone = iso.delete(source, members=members, principal=principal)
            folder = os.path.realpath(uploads)
            for uri in gone:  # an upload's file goes with its source
                if os.path.dirname(os.path.realpath(uri)) == folder:
                    Path(uri).unlink(missing_ok=True)

        await turns.write(delete)
        return Response(status_code=204)

    @api.get("/status")
    def status(request: Request) -> dict[str, Any]:
        """The index's description, with the counts of what the key may see (and, for an
        administrator's key, its size on disk)."""
        principal = allowed(request, "status")
        shown = iso.status(principal=principal).model_dump(mode="json")
        if not entitled("index_details", principal):
            return user_status(shown)
        return shown

    @api.post("/ingest")
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

    @api.post("/sync")
    async def sync(body: SyncRequest, request: Request) -> dict[str, Any]:
        """Make the index match folders below the server's ``serve_roots`` (links that
        lead out of them are not followed). Needs an administrator's key."""
        allowed(request, "sync")
        wanted = below_roots(body.paths, roots, what="POST /sync")
        return reported(await turns.write(lambda: iso.sync(wanted, confine=roots,
                                                           allow=body.allow)))

    return api


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
        kind = errors.DiskFull if disk_full(exc) else errors.StoreError
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
        if disk_full(exc):
            raise errors.DiskFull(f"the upload {name} could not be saved in {folder}: the "
                                  "disk is full; nothing of it was stored; free some space "
                                  "and send it again") from None
        raise errors.StoreError(f"the upload {name} could not be saved in {folder} "
                                f"({exc.strerror or exc}); nothing of it was stored") from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target, previous
