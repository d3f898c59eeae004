"""Questions as enrichment: the second stage of an ingest, or ``isotope enrich`` later.

An ingest stores each source with its chunks and atoms (searchable at once), its chunks
marked as waiting for questions. This stage pages through the waiting chunks, generates
their questions in windows of atoms (so that many small chunks keep the model as busy as
one large one), embeds and filters them, and stores each window in one transaction: a
crash loses at most the windows in flight, and the next run starts from the chunks still
waiting. A chunk some of whose atoms failed keeps what succeeded and stays waiting (the
cache answers the rest next time).

With a model that takes batches from several threads at once (a remote endpoint:
``LLM.concurrent_calls``), the next :data:`AHEAD` windows' calls run while a window's
questions are embedded and stored, sharing the model's ``llm_concurrency`` slots, so the
server is not left waiting on this machine; the report's ``generate`` time is then the
time spent waiting for the model. A local model generates one window at a time."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
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
from isotope.reports import FileError, IngestReport, Progress, ProgressCallback, Timer
from isotope.settings import IngestSettings
from isotope.stores import ChunkQuestions, PendingChunk, Store, dropped_by_chunk

log = logging.getLogger(__name__)
_R = TypeVar("_R")
PAGE = 256
"""Waiting chunks read from the store at a time."""
AHEAD = 2
"""Windows whose calls run while the last one's questions are embedded and stored."""
WAIT_EVERY = 10.0
"""Seconds between progress events (stage ``wait``) while waiting for the model."""


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
            sources: Sequence[str] | None = None, count_atoms: bool = False) -> IngestReport:
        """Enrich every waiting chunk (of ``sources`` if given), in pages; with
        ``count_atoms``, the report counts the atoms given questions (an ingest counted
        them when it stored them)."""
        total = self.waiting(sources)
        if not total:
            return report
        generator = self._generator()
        parts = self._parts(generator.window(self.settings.llm_concurrency), report,
                            sources, count_atoms)
        done = 0

        def waiting(part: list[PendingChunk]) -> None:
            if progress is not None:
                progress(Progress("wait", part[0].chunk.source, min(done, total), total,
                                  report.chunks, report.atoms, report.questions_generated))

        generated = (self._ahead(generator, parts, report, waiting)
                     if generator.llm.concurrent_calls
                     else ((part, self._generate(generator, part, report)) for part in parts))
        for part, results in generated:
            self._window(part, results, report)
            done += len(part)
            if progress is not None:
                progress(Progress("generate", part[-1].chunk.source, min(done, total),
                                  total, report.chunks, report.atoms,
                                  report.questions_generated))
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

    def _ahead(self, generator: QuestionGenerator, parts: Iterator[list[PendingChunk]],
               report: IngestReport, waiting: Callable[[list[PendingChunk]], None]
               ) -> Iterator[tuple[list[PendingChunk], list[Generated | None]]]:
        """Each window with its questions, in order, the calls of the next :data:`AHEAD`
        windows running meanwhile (each in a daemon thread: an interrupted run does not
        wait for them). The time waited for a window is the report's ``generate``;
        ``waiting(window)`` is called every :data:`WAIT_EVERY` seconds of it."""
        queue: deque[tuple[list[PendingChunk], Future[list[Generated | None]]]] = deque()

        def submit() -> None:
            part = next(parts, None)
            if part is not None:
                queue.append((part, _in_thread(
                    lambda: self._generate(generator, part, report, timed=False))))

        for _ in range(AHEAD):
            submit()
        while queue:
            part, future = queue.popleft()
            with Timer(report, "generate"):
                while True:
                    try:
                        results = future.result(timeout=WAIT_EVERY)
                        break
                    except TimeoutError:
                        waiting(part)
            submit()  # its calls start before this window is embedded and stored
            yield part, results

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
                           complete=not r.failed, dropped=dropped_of.get(p.chunk.id, []))
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


def _in_thread(call: Callable[[], _R]) -> Future[_R]:
    """``call()`` in a daemon thread of its own, as a future."""
    future: Future[_R] = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(call())
        except BaseException as exc:  # given to whoever waits for the future
            future.set_exception(exc)

    threading.Thread(target=run, name="isotope-questions", daemon=True).start()
    return future
