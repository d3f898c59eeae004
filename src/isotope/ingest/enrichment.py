"""Questions as enrichment: the second stage of an ingest, or ``isotope enrich`` later.

An ingest stores each source with its chunks and atoms (searchable at once), its chunks
marked as waiting for questions. This stage pages through the waiting chunks, generates
their questions, embeds and filters them, and stores them a batch of chunks at a time, in
one transaction each: a crash loses at most the chunks in flight, and the next run starts
from the chunks still waiting. A chunk some of whose atoms failed keeps what succeeded and
stays waiting (the cache answers the rest next time).

With a model that takes calls from several threads at once (a remote endpoint:
``LLM.concurrent_calls``) this is a pipeline: small groups of chunks have their calls
running at all times, :data:`RUNNING` x ``llm_concurrency`` atoms of them (as many more
read ahead), so the model's ``llm_concurrency`` slots stay full; a group that finishes
starts the next one at once, from its own thread, while a thread of their own
(:class:`_Storer`) embeds, filters and stores every group finished meanwhile in one batch
(in the order they finish). In an ingest, this thread also runs the first stage a source
at a time whenever few replies wait, so the first calls start as soon as the first file
is stored. The report's ``generate`` time is then the time this thread waited for the
model. A local
model generates a window of atoms at a time (so that many small chunks keep it as busy
as one large one), after the first stage."""

from __future__ import annotations

import contextlib
import functools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import Future
from typing import TypeVar

import numpy as np

from isotope.embedders import Embedder
from isotope.errors import ProviderError
from isotope.ingest import references
from isotope.ingest.assembly import Select, split
from isotope.ingest.generation import Generated, QuestionGenerator
from isotope.ingest.windows import windows
from isotope.models import DroppedQuestion, Question, Source
from isotope.providers import DECODING
from isotope.reports import FileError, IngestReport, Progress, ProgressCallback, Timer
from isotope.settings import IngestSettings
from isotope.stores import ChunkQuestions, PendingChunk, Store, dropped_by_chunk

log = logging.getLogger(__name__)
_R = TypeVar("_R")
PAGE = 256
"""Waiting chunks read from the store at a time."""
RUNNING = 4
"""Atoms whose calls run at once in the pipeline, per slot of ``llm_concurrency``."""
WAIT_EVERY = 10.0
"""Seconds between progress events (stage ``wait``) while waiting for the model."""
STORE_EVERY = 2.0
"""Seconds after which replies are stored while the first stage runs, however few."""


class Enricher:
    """Generates and stores the questions of the chunks waiting for them."""

    def __init__(self, settings: IngestSettings, store: Store, embedder: Embedder,
                 generator: Callable[[], QuestionGenerator], select: Select) -> None:
        self.settings, self.store, self.embedder = settings, store, embedder
        self._generator, self._select = generator, select

    def waiting(self, sources: Sequence[str] | None = None) -> int:
        """Chunks waiting for their questions (of ``sources`` if given)."""
        return self.store.count_waiting(sources)

    def run(self, report: IngestReport, progress: ProgressCallback | None = None, *,
            sources: Sequence[str] | None = None, count_atoms: bool = False,
            feed: Iterator[list[str]] | None = None) -> IngestReport:
        """Enrich every waiting chunk (of ``sources`` if given), in pages; with
        ``count_atoms``, the report counts the atoms given questions (an ingest counted
        them when it stored them).

        With ``feed`` (an ingest's first stage: each step stores a file and names the
        sources it stored or found unchanged), the chunks of those sources: a model that
        takes concurrent calls starts on the first ones while the other files are still
        read and embedded (a step runs whenever no questions wait to be stored); another
        model waits for the whole first stage. The model is built only once a chunk
        waits. A fatal model error still lets the first stage end (every file stored,
        its chunks waiting for ``isotope enrich``) before it is raised."""
        fed = _Fed(feed)
        while fed.step() and not self.waiting(fed.last):
            pass  # (nothing waits yet: no model needed)
        if not self.waiting(fed.sources if feed is not None else sources):
            fed.finish()
            return report
        generator = self._generator()
        concurrency = self.settings.llm_concurrency
        pipelined = generator.llm.concurrent_calls
        if not pipelined:
            fed.finish()
        # (the pipeline hands out small groups: a group's calls end together)
        size = max(1, concurrency // 4) if pipelined else generator.window(concurrency)
        if feed is not None:
            sources = fed.sources  # (grows with each step)
        pending = self._parts(size, report, fed.take() if feed is not None else sources,
                              count_atoms)
        done, kept_waiting, totals = 0, 0, list[int]()

        def total() -> int | None:
            """Chunks to enrich in all: known once the first stage is over (those done
            so far that still wait, their model having failed for some atoms, are
            counted once)."""
            if not totals and fed.done:
                totals.append(done - kept_waiting + self.waiting(sources))
            return totals[0] if totals else None

        def next_part() -> list[PendingChunk] | None:
            nonlocal pending
            while (part := next(pending, None)) is None:
                if not fed.new:
                    return None
                pending = self._parts(size, report, fed.take(), count_atoms)
            return part

        usage, started = generator.llm.usage, time.monotonic()
        written = usage.completion_tokens  # (the tokens of this run: those after it)
        flight: list[int] = [0, 0]  # chunks finished and tokens of the call in flight

        def notify(stage: str, part: list[PendingChunk], *, finished: int = 0) -> None:
            if progress is not None and part:  # (a total of 0: not known yet)
                n = total() or 0
                now = min(done + finished, n) if n else done + finished
                eta = ((time.monotonic() - started) / now * (n - now)
                       if n and now >= max(1, n / 10) else None)
                progress(Progress(stage, part[finished - 1 if finished else -1].chunk.source,
                                  now, n, report.chunks, report.atoms,
                                  report.questions_generated,
                                  tokens=usage.completion_tokens - written + flight[1],
                                  eta_s=eta))

        total()
        def begun(part: list[PendingChunk]) -> list[PendingChunk]:
            notify("generate", part)  # (the model starts on it: said before it ends)
            return part

        def told(part: list[PendingChunk]) -> Callable[[Sequence[int], int], None]:
            """What a local model's batched decoding tells of ``part`` as it goes: each
            chunk as its questions are written, and the tokens (every second at most)."""
            said = [0.0]

            def tell(finished: Sequence[int], tokens: int) -> None:
                # (a window that failed is asked again chunk by chunk: those calls' counts
                # start again, so the most told so far stands)
                flight[1] = tokens
                if len(finished) > flight[0] or time.monotonic() - said[0] >= 1.0:
                    grew = len(finished) > flight[0]
                    flight[0], said[0] = max(flight[0], len(finished)), time.monotonic()
                    notify("generate", [part[i] for i in sorted(finished) if i < len(part)]
                           if grew and finished else part[:flight[0]] or part,
                           finished=flight[0])
            return tell

        def decoded(part: list[PendingChunk]) -> list[Generated | None]:
            token = DECODING.set(told(part))
            try:
                return self._generate(generator, begun(part), report)
            finally:
                DECODING.reset(token)
                flight[:] = [0, 0]  # (the model's usage holds them now)

        generated = (_Pipeline(lambda part: self._generate(generator, begun(part), report,
                                                           timed=False),
                               next_part, RUNNING * concurrency,
                               None if fed.done else fed.step).run(
                                   report, lambda part: notify("wait", part))
                     if pipelined
                     else ((part, decoded(part)) for part in pending))
        def stored(part: list[PendingChunk], results: Results, tally: IngestReport) -> None:
            """(in this thread) What storing a part did, added to the report."""
            nonlocal done, kept_waiting
            report.absorb(tally)
            done += len(part)
            kept_waiting += sum(r is None or bool(r.failed) for r in results)
            notify("generate", part)

        def store(part: list[PendingChunk], results: Results) -> IngestReport:
            """(in the storer's thread, if any) The questions embedded and stored, counted
            apart."""
            tally = IngestReport()
            self._window(part, results, tally)
            return tally

        # (with the pipeline, replies are embedded and stored in a thread of their own,
        # so that this one goes on feeding the model and the first stage meanwhile)
        storing = _Storer(store, stored) if pipelined else None
        try:
            for part, results in generated:
                if storing is not None:
                    storing.put(part, results)
                else:
                    stored(part, results, store(part, results))
            if storing is not None:
                storing.finish()
        except ProviderError as exc:
            generated.close()
            if exc.fatal:
                fed.finish()
            raise
        finally:
            generated.close()  # (a failure here stops the groups not yet started)
            if storing is not None:
                storing.finish(raising=False)  # (what came back is stored)
        return report

    def _parts(self, window: int, report: IngestReport, sources: Sequence[str] | None,
               count_atoms: bool) -> Iterator[list[PendingChunk]]:
        """The waiting chunks in windows of about ``window`` atoms, page by page."""
        after: str | None = None
        while page := self.store.pending_chunks(PAGE, after=after, sources=sources):
            after = page[-1].chunk.id
            page = self._readable(page, report)
            if count_atoms:
                report.atoms += sum(len(p.atoms) for p in page)
            for start, end in windows([len(p.atoms) for p in page], window):
                yield page[start:end]

    def _readable(self, page: list[PendingChunk], report: IngestReport) -> list[PendingChunk]:
        """The page with the chunks' text (read back from their files when the index
        keeps file references); a chunk whose file changed is left waiting."""
        if self.settings.storage != "file-reference":
            return page
        uris = {p.chunk.source for p in page}
        sources: dict[str, Source | None] = {u: self.store.get_source(u) for u in uris}
        chunks = references.read_back([p.chunk for p in page], sources,
                                      int(self.settings.max_file_mb * 1e6))
        kept = []
        for pending, chunk in zip(page, chunks, strict=True):
            if chunk.stale:
                report.errors.append(FileError(chunk.source, "changed since it was ingested: "
                                               "its questions wait for the next ingest"))
            else:
                pending.chunk = chunk
                kept.append(pending)
        return kept

    def _window(self, part: list[PendingChunk], results: list[Generated | None],
                report: IngestReport) -> None:
        """Embed, filter and store the questions generated for some waiting chunks."""
        candidates: list[Question] = []
        for pending, result in zip(part, results, strict=True):
            if result is None:
                continue
            for atom, questions in zip(pending.atoms, result.questions, strict=True):
                candidates += [Question(text=q, atom_id=atom.id, chunk_id=atom.chunk_id)
                               for q in questions]
            for j, why in sorted(result.failed.items()):
                report.failed_atoms.append(FileError(
                    pending.chunk.source, f"atom {pending.atoms[j].text[:60]!r}: {why}"))
            report.questions_generated += sum(len(q) for q in result.questions)
        with Timer(report, "embed"):
            vectors = self.embedder.embed([q.text for q in candidates])
        atoms = [a for p, r in zip(part, results, strict=True) if r is not None for a in p.atoms]
        atom_vectors = [p.atom_vectors for p, r in zip(part, results, strict=True)
                        if r is not None and len(p.atoms)]
        kept: list[Question] = []
        dropped: list[DroppedQuestion] = []
        if candidates:
            candidates, reasons = self._select(atoms, np.concatenate(atom_vectors),
                                               candidates, vectors)
            kept, vectors, dropped = split(candidates, reasons, vectors)
            report.questions_dropped += len(dropped)
        report.questions += len(kept)
        by_chunk: dict[str, list[int]] = {}
        for i, question in enumerate(kept):
            by_chunk.setdefault(question.chunk_id, []).append(i)
        dropped_of = dropped_by_chunk(dropped)
        done = [
            ChunkQuestions(p.chunk.id, [kept[i] for i in by_chunk.get(p.chunk.id, [])],
                           vectors[by_chunk.get(p.chunk.id, [])] if kept else vectors[:0],
                           complete=not r.failed, dropped=dropped_of.get(p.chunk.id, []),
                           facts=[f for f in r.facts if f])
            for p, r in zip(part, results, strict=True) if r is not None]
        with Timer(report, "store"):
            self.store.add_questions(done)
        report.enriched_chunks += sum(d.complete for d in done)

    def _generate(self, generator: QuestionGenerator, part: list[PendingChunk],
                  report: IngestReport, *, timed: bool = True) -> list[Generated | None]:
        """Each chunk's questions (None: the model failed for it; it stays waiting). When
        a window fails, its chunks are asked one at a time, so only the failing one is
        left out."""
        groups = [(p.chunk, p.atoms) for p in part]
        try:  # (not timed here when the wait for it is)
            with Timer(report, "generate") if timed else contextlib.nullcontext():
                return list(generator.generate_many(groups))
        except ProviderError as exc:
            if exc.fatal or len(part) == 1:
                if exc.fatal:
                    raise
                report.errors.append(FileError(part[0].chunk.source,
                                               f"language model failed: {exc}"))
                log.warning("%s: language model failed: %s", part[0].chunk.source, exc)
                return [None]
        return [r for p in part for r in self._generate(generator, [p], report, timed=timed)]


def _in_thread(call: Callable[[], _R],
               done: Callable[[Future[_R]], object] | None = None) -> Future[_R]:
    """``call()`` in a daemon thread of its own, as a future; ``done(future)`` runs in that
    thread when it ends (attached before it starts: attached after, it would run in the
    caller's thread when the call ended at once, under whatever lock the caller holds)."""
    future: Future[_R] = Future()
    if done is not None:
        future.add_done_callback(done)

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(call())
        except BaseException as exc:  # given to whoever waits for the future
            future.set_exception(exc)

    threading.Thread(target=run, name="isotope-questions", daemon=True).start()
    return future


Results = list[Generated | None]


class _Storer:
    """Generated questions embedded and stored by ``store(part, results)`` in a thread of
    its own, in the order given, each counted in a report of its own that ``stored(part,
    results, tally)`` takes in the caller's thread (at the next ``put`` or at ``finish``).
    At most :attr:`AHEAD` batches wait (``put`` then waits: storing sets the pace). Its
    first error is raised by the next ``put`` or ``finish``; after it, what is queued is
    dropped (those chunks wait for the next run)."""

    AHEAD = 4

    def __init__(self, store: Callable[[list[PendingChunk], Results], IngestReport],
                 stored: Callable[[list[PendingChunk], Results, IngestReport], None]) -> None:
        self._store, self._stored = store, stored
        self._queue: queue.Queue[tuple[list[PendingChunk], Results] | None] = queue.Queue(
            self.AHEAD)
        self._done: queue.SimpleQueue[tuple[list[PendingChunk], Results, IngestReport]] = (
            queue.SimpleQueue())
        self._error: BaseException | None = None
        self._failed = False
        self._thread = threading.Thread(target=self._run, name="isotope-store-questions",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if not self._failed:  # (after an error, the rest is only drained)
                try:
                    self._done.put((*item, self._store(*item)))
                except BaseException as exc:
                    self._error, self._failed = exc, True

    def put(self, part: list[PendingChunk], results: Results) -> None:
        self._take_stored()
        self._queue.put((part, results))

    def finish(self, *, raising: bool = True) -> None:
        """Wait until everything given is stored (once; then nothing)."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._take_stored(raising=raising)

    def _take_stored(self, *, raising: bool = True) -> None:
        while not self._done.empty():
            self._stored(*self._done.get())
        if raising and self._error is not None:
            error, self._error = self._error, None
            raise error


class _Fed:
    """The sources an ingest's first stage has stored so far, a step at a time (none to
    run without ``steps``)."""

    def __init__(self, steps: Iterator[list[str]] | None) -> None:
        self._steps = steps
        self.done = steps is None
        self.sources: list[str] = []
        self.new: list[str] = []
        """Sources stored since the last :meth:`take`."""
        self.last: list[str] = []
        """Sources stored by the last step."""

    def step(self) -> bool:
        """Run the next step; False once the first stage is over."""
        if not self.done:
            assert self._steps is not None
            stored = next(self._steps, None)
            if stored is None:
                self.done = True
            else:
                self.sources += stored
                self.new += stored
                self.last = stored
        return not self.done

    def finish(self) -> None:
        while self.step():
            pass

    def take(self) -> list[str]:
        new, self.new = self.new, []
        return new


class _Pipeline:
    """Groups of chunks whose calls run ``running`` atoms at a time, each group in a
    daemon thread of its own (an interrupted run does not wait for them); a group that
    finishes starts the next from its own thread, so the calls go on while the consumer
    embeds and stores. ``next_part()`` reads the next group (None: none now); ``step()``,
    if given, runs a step of the ingest's first stage (False once it is over), whenever
    no group waits to be stored."""

    def __init__(self, generate: Callable[[list[PendingChunk]], Results],
                 next_part: Callable[[], list[PendingChunk] | None], running: int,
                 step: Callable[[], bool] | None = None) -> None:
        self._generate, self._next_part, self._running = generate, next_part, running
        self._step = step
        self._lock = threading.Lock()
        self._queued: deque[list[PendingChunk]] = deque()
        self._atoms = 0  # atoms of the groups running
        self._groups = 0  # groups running
        self._ready = 0  # atoms of the groups finished, not yet taken
        self._ready_since = 0.0  # when the oldest of those finished
        self._stopped = False
        self._latest: list[PendingChunk] = []  # the group started last
        self._finished: queue.SimpleQueue[tuple[list[PendingChunk], Future[Results]]] = (
            queue.SimpleQueue())

    def run(self, report: IngestReport, waiting: Callable[[list[PendingChunk]], None]
            ) -> Generator[tuple[list[PendingChunk], Results], None, None]:
        """The groups finished since the last one taken, together, as they finish. The
        time waited for them is the report's ``generate``; ``waiting(group)`` is called
        every :data:`WAIT_EVERY` seconds of a wait."""
        try:
            while True:
                self._top_up()
                if self._step is not None and self._ready < self._running // 2 and not (
                        self._ready and time.monotonic() - self._ready_since > STORE_EVERY):
                    # (replies are stored in batches while the first stage runs: small
                    # batches would embed their questions less efficiently)
                    if not self._step():
                        self._step = None
                    continue
                with self._lock:
                    if not (self._groups or self._queued) and self._finished.empty():
                        return
                with Timer(report, "generate"):
                    try:
                        first = self._finished.get(timeout=WAIT_EVERY)
                    except queue.Empty:
                        waiting(self._latest)
                        continue
                finished = [first]
                while not self._finished.empty():
                    finished.append(self._finished.get())
                with self._lock:
                    self._ready -= sum(len(p.atoms) for part, _ in finished for p in part)
                parts: list[PendingChunk] = []
                results: Results = []
                failure: BaseException | None = None
                for part, future in finished:
                    try:
                        results += future.result()
                        parts += part
                    except BaseException as exc:  # (a fatal error: the run stops...)
                        failure = failure or exc
                if parts:  # (...once what came back is stored)
                    yield parts, results
                if failure is not None:
                    raise failure
        finally:
            with self._lock:
                self._stopped = True
                self._queued.clear()

    def _top_up(self) -> None:
        """Read groups ahead (in this thread: the store is read here) and start them up to
        the running budget."""
        with self._lock:
            ahead = sum(len(p.atoms) for part in self._queued for p in part)
        while ahead < 2 * self._running and (part := self._next_part()) is not None:
            ahead += sum(len(p.atoms) for p in part)
            with self._lock:
                self._queued.append(part)
        with self._lock:
            self._start()

    def _start(self) -> None:
        """Start queued groups while the running atoms are under budget (under the lock)."""
        while not self._stopped and self._queued and (self._atoms < self._running
                                                      or not self._groups):
            part = self._queued.popleft()
            atoms = sum(len(p.atoms) for p in part)
            self._atoms += atoms
            self._groups += 1
            self._latest = part
            _in_thread(functools.partial(self._generate, part),
                       functools.partial(self._done, part, atoms))

    def _done(self, part: list[PendingChunk], atoms: int, future: Future[Results]) -> None:
        with self._lock:
            if not self._ready:
                self._ready_since = time.monotonic()
            self._ready += atoms
        self._finished.put((part, future))  # (before the count drops: see run's end test)
        with self._lock:
            self._atoms -= atoms
            self._groups -= 1
            self._start()
