"""The work HTTP and MCP share (issue 43): the server's turns (searches at once, answers
at once, the process's writes one after another), an answer that stops its model when
its caller goes away, the folders a request may read, and an ingest's report.

One :class:`Turns` is made per served index and given to both shells, so a search by an
agent over MCP waits for a slot as one over HTTP does, and an answer written for either
takes one of the same answer slots.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from isotope.access import Principal
from isotope.errors import InvalidArgument
from isotope.models import QueryResponse
from isotope.reports import IngestReport
from isotope.server.operations import Forbidden

if TYPE_CHECKING:
    from isotope.index import Isotope

T = TypeVar("T")


class Turns:
    """The server's turns over ``iso``: ``search_slots`` searches at once (default: one
    per CPU core: more only adds contention; 8 threads searching in one process made 68
    searches/s on 2 cores, 2 threads 105), ``answer_slots`` answers (default: one for a
    local model, else ``llm_concurrency``), and this process's writes one after another,
    queued on the event loop so a queue of writes holds no thread a search needs."""

    def __init__(self, iso: Isotope, *, search_slots: int | None = None,
                 answer_slots: int | None = None) -> None:
        self.iso = iso
        self.searches = asyncio.Semaphore(search_slots or os.cpu_count() or 1)
        self.writing = asyncio.Lock()
        self._answer_slots = answer_slots
        self._answers: asyncio.Semaphore | None = None

    @property
    def local(self) -> bool:
        """Whether answers are written by a model on this machine (built, not loaded:
        asked only when needed, so an answer model that cannot be made fails the answers
        alone)."""
        return bool(self.iso.answer_llm().local)

    @property
    def answers(self) -> asyncio.Semaphore:
        if self._answers is None:
            self._answers = asyncio.Semaphore(self._answer_slots or (
                1 if self.local else self.iso.settings.llm_concurrency))
        return self._answers

    async def search(self, *args: Any, **kwargs: Any) -> QueryResponse:
        """``iso.search`` in a worker thread, in turn."""
        async with self.searches:
            return await anyio.to_thread.run_sync(partial(self.iso.search, *args, **kwargs))

    async def write(self, call: Callable[[], T]) -> T:
        """``call`` (a write) in a worker thread, after this process's earlier writes."""
        async with self.writing:
            return await anyio.to_thread.run_sync(call)

    async def answer(self, found: QueryResponse, principal: Principal | None, *,
                     gone: Callable[[], Awaitable[bool]] | None = None,
                     on_token: Callable[[str], None] | None = None) -> bool:
        """Have the model answer ``found`` (filled in) in a worker thread, in turn; the
        model is stopped when ``gone()`` says the caller left, or when this is cancelled
        (over HTTP the slot is held until it has stopped; an MCP call cancelled by anyio
        is cancelled again at once, and its slot freed while the model stops at its next
        piece, as before). False: the caller left."""
        cancel = threading.Event()
        async with self.answers:
            if gone is not None and await gone():
                return False
            work = asyncio.ensure_future(anyio.to_thread.run_sync(partial(
                self.iso.answer, found, on_token=on_token, cancel=cancel,
                principal=principal)))
            try:
                while not work.done():
                    await asyncio.wait([work], timeout=0.25)
                    if not work.done() and gone is not None and await gone():
                        cancel.set()
                await work
            except BaseException:  # cancelled: stop the model at its next piece
                cancel.set()
                work.add_done_callback(_retrieved)  # (its end is of no one's interest now)
                with contextlib.suppress(BaseException):
                    await asyncio.shield(work)
                raise
        return not cancel.is_set()


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Read an abandoned answer's end, so that an error of it is not logged as never
    retrieved."""
    if not task.cancelled():
        task.exception()


def below_roots(paths: Sequence[str], roots: Sequence[Path] | None, *, what: str,
                remote: bool = True) -> list[Path]:
    """``paths`` resolved (links followed, ``~`` expanded) if each is below one of
    ``roots`` (the ``serve_roots`` setting); :class:`Forbidden` for one outside, or for
    any at all when a server (``remote``) has no roots (``what``, e.g. ``POST /sync``, is
    then off). Without ``remote`` (a local MCP server over stdio), no roots: any path of
    the user who runs it."""
    if any("\x00" in p for p in paths):
        raise InvalidArgument("a path cannot hold a NUL character")
    if not roots and remote:
        raise Forbidden(f"{what} is off: the server has no serve_roots (set "
                        "ISOTOPE_SERVE_ROOTS to the folders it may read)")
    wanted = [Path(os.path.realpath(os.path.expanduser(p))) for p in paths]
    outside = [text for text, path in zip(paths, wanted, strict=True) if roots and not any(
        path == root or root in path.parents for root in roots)]
    if outside:
        raise Forbidden(f"not below the server's serve_roots "
                        f"({', '.join(map(str, roots or []))}): {', '.join(outside)}")
    return wanted


def reported(report: IngestReport, *, brief: bool = False) -> dict[str, Any]:
    """An ingest's report as JSON: all of it (HTTP), or, ``brief``, what an agent reads
    (the MCP ``ingest`` tool: :data:`BRIEF`, each error one line)."""
    done: dict[str, Any] = json.loads(json.dumps({**asdict(report), "ok": report.ok},
                                                 default=str))
    if brief:
        done = {k: done[k] for k in BRIEF}
        done["errors"] = [f"{e['path']}: {e['message']}" for e in done["errors"]]
    return done


BRIEF = ("added", "replaced", "unchanged", "chunks", "questions", "errors", "ok")
"""What an agent reads of an ingest's report."""
