"""The ingest pipeline, in two stages. First load -> chunk -> atomize -> embed -> store,
one source at a time, each in one transaction: a source is searchable (by its chunks and
atoms) seconds after its file is read. Then its questions, generated as enrichment
(``enrichment``): in the same run (``questions="now"``; with a remote model the first
files' calls run while the next files are stored) or later by ``isotope enrich``
(``"later"``).

The pipeline only sequences the stages, each a module of its own: ``discovery`` (which
files), ``reading`` (what each file makes: its sources, loaded, unchanged or
refused), ``changes`` (what is current, what is reused), ``planning`` (the dry run),
``enrichment`` (questions, a pipeline of calls), ``selection`` (which questions are kept)
and ``assembly`` (one batch for the store)."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import numpy as np

from isotope import loaders
from isotope.access import Assigner, file_of, held_by_hand, strictest
from isotope.embedders import Embedder
from isotope.errors import IsotopeError, ProviderError
from isotope.files import read_opened
from isotope.ingest import changes, contextual, maintenance, reading, references
from isotope.ingest.assembly import Work, assemble
from isotope.ingest.atomizers import Atomizer
from isotope.ingest.chunking import chunk_text, section_metadata
from isotope.ingest.discovery import Names, discover
from isotope.ingest.enrichment import Enricher
from isotope.ingest.generation import QuestionGenerator
from isotope.ingest.reading import Found, Members, Read, Reader, Unchanged
from isotope.ingest.selection import select_questions
from isotope.models import ACCESS_BY_HAND, READ_AS, Atom, Chunk, Question, Source, content_hash
from isotope.prompts import PROMPTS, PromptSpec
from isotope.providers import LLM
from isotope.reports import (
    STAGES,
    FileError,
    IngestPlan,
    IngestReport,
    Progress,
    ProgressCallback,
    Timer,
)
from isotope.settings import IngestSettings
from isotope.stores import Store, StoredChunk

log = logging.getLogger(__name__)
Questions = Literal["now", "later"]
"""When an ingest generates questions: ``now`` (its second stage, in the same run) or
``later`` (``isotope enrich``)."""


class Pipeline:
    """Runs ingestion into a store with the given models."""

    def __init__(
        self,
        settings: IngestSettings,
        store: Store,
        embedder: Embedder,
        atomizer: Atomizer,
        llm: Callable[[], LLM],
        *,
        force: bool = False,
        prompts: dict[str, PromptSpec] | None = None,
        assign: Assigner | None = None,
    ) -> None:
        self.settings = settings
        self.force = force
        self.assign = assign or Assigner(email_access=settings.email_access)
        """The access list each source stored gets (:mod:`isotope.access`)."""
        """Ingest every source again, unchanged ones included, reusing nothing stored
        (the cache still answers for unchanged text)."""
        self.max_bytes = int(settings.max_file_mb * 1e6)
        self.max_chars = int(settings.max_text_mb * 1e6)
        self._members_of: dict[str, set[str]] | None = None
        """Sources inside others, by container (read when a container is first met)."""
        self.seen: dict[str, Read] = {}
        """Each file this run read, as it was read (what its sources' lists come from)."""
        self.roots: dict[str, str] = {}
        """The folder each file of this run was found under (its rules file's)."""
        self.names: Names = {}
        """The files of this run with several names (hard links), by identity."""
        self.store = store
        self.embedder = embedder
        self.atomizer = atomizer
        self.llm = llm
        """The language model, built when first needed."""
        self.prompts = prompts or PROMPTS
        self.fingerprint = changes.fingerprint(settings, self.prompts, embedder.model_id)

    # -- entry points ------------------------------------------------------------------
    def ingest_paths(
        self,
        paths: Iterable[str | Path],
        *,
        include: Sequence[str] | None = None,
        exclude: Sequence[str] | None = None,
        progress: ProgressCallback | None = None,
        questions: Questions = "now",
        confine: Sequence[Path] | None = None,
    ) -> IngestReport:
        from isotope.files import CONFINE

        token = CONFINE.set(None if confine is None else tuple(
            Path(os.path.realpath(r)) for r in confine))
        try:
            names: Names = {}
            files, skipped, missing = self.discover(paths, include, exclude, confine,
                                                    names=names)
            report = self.ingest_files(files, progress=progress, questions=questions,
                                       names=names)
        finally:
            CONFINE.reset(token)
        report.skipped[:0], report.errors[:0] = skipped, missing
        return report

    def ingest_files(self, files: dict[Path, Path], *,
                     progress: ProgressCallback | None = None,
                     questions: Questions = "now", names: Names | None = None
                     ) -> IngestReport:
        """Ingest files, each given with its root (the folder it was found under);
        ``names``: those with several names, all of them (:func:`discover`; else those of
        ``files``)."""
        report = IngestReport()
        meter = self._meter()
        self.roots = {str(path): str(root) for path, root in files.items()}
        self.names = _names(files) if names is None else names
        self._then(questions, report, progress, self._read_files(files, report, progress))
        self._reassign(report)
        meter(report)
        self._notify(progress, "done", "", len(files), len(files), report)
        return report

    def _read_files(self, files: dict[Path, Path], report: IngestReport,
                    progress: ProgressCallback | None) -> Iterator[list[str]]:
        """The first stage, a file at a time: after each, the sources it stored or found
        unchanged (these may have chunks waiting for questions). Files are read ahead and
        their sources embedded and stored together (:class:`_Held`): one embedding call
        for many small files, not a round trip each."""
        held = _Held(self, report, progress)
        for done, (path, root) in enumerate(files.items()):
            held.at = done
            self._notify(progress, "load", str(path), done, len(files), report)
            before = [len(kept) for kept in _stored(report)]
            try:
                walk = self.reader().sources(path, root)
                while True:
                    with Timer(report, "load"):
                        found = next(walk, None)
                    if found is None:
                        break
                    if (uri := reading.uri_of(found)) is not None and uri != str(path):
                        self._notify(progress, "load", uri, done, len(files), report)
                    self._take(found, report, progress, done, len(files), held, str(path))
            except ProviderError as exc:  # this file is left out; the others go on
                if exc.fatal:
                    held.flush()  # (what was read before it is stored: the next run
                    raise  # starts after it)
                report.errors.append(FileError(str(path), f"language model failed: {exc}"))
                log.warning("%s: %s", path, exc)
            yield [uri for kept, n in zip(_stored(report), before, strict=True)
                   for uri in kept[n:]]
            if held.full() or done == len(files) - 1:
                yield from held.flushing()

    def enrich(self, report: IngestReport | None = None,
               progress: ProgressCallback | None = None, *,
               sources: Sequence[str] | None = None) -> IngestReport:
        """Generate the questions of the chunks waiting for them (of ``sources`` if
        given); see :mod:`isotope.ingest.enrichment`."""
        if report is None:
            report = IngestReport()
            meter = self._meter()
            self._enricher().run(report, progress, sources=sources, count_atoms=True)
            report.waiting_chunks = self._enricher().waiting(sources)
            meter(report)
            return report
        return self._enricher().run(report, progress, sources=sources)

    def _enricher(self) -> Enricher:
        return Enricher(self.settings, self.store, self.embedder, self.generator, self._select)

    def _then(self, questions: Questions, report: IngestReport,
              progress: ProgressCallback | None, stored: Iterator[list[str]]) -> None:
        """Run the first stage (``stored``: a step per file or source, naming what it
        stored) and the second: questions now, their calls starting as soon as the first
        chunks are stored, or a count of what waits for them."""
        sources: list[str] = []
        if questions == "now":
            self._enricher().run(report, progress, feed=_noting(stored, sources))
        else:
            for step in stored:
                sources += step
        report.waiting_chunks = self._enricher().waiting(sources)

    def ingest_chunks(
        self,
        chunks: Iterable[Chunk | str],
        *,
        source: str = "chunks",
        progress: ProgressCallback | None = None,
        questions: Questions = "now",
    ) -> IngestReport:
        """Ingest ready-made chunks. Strings become chunks of ``source``; Chunk objects keep
        their own ``source`` (or get ``source`` when theirs is empty). Each source is
        stored as a whole, replacing what it had before."""
        grouped: dict[str, list[Chunk]] = {}
        for item in chunks:
            if isinstance(item, str):
                item = Chunk(text=item, source=source)
            group = grouped.setdefault(item.source or source, [])
            # Numbered by position in their source, so equal texts get distinct ids.
            group.append(Chunk(text=item.text, source=item.source or source, index=len(group),
                               start=item.start, end=item.end, metadata=item.metadata,
                               context=item.context))
        report = IngestReport()
        meter = self._meter()

        def stored() -> Iterator[list[str]]:
            held = _Held(self, report, progress)
            for done, (uri, items) in enumerate(grouped.items()):
                text = "\n\n".join(c.text for c in items)
                src = Source(uri=uri, content_hash=content_hash(text),
                             size=len(text.encode()), loader="chunks")
                try:
                    work = self._prepare(src, items, report, progress, done, len(grouped),
                                         document=text)
                except ProviderError:
                    yield from held.flushing()  # (the sources before it are stored)
                    raise
                if work is None:
                    yield [uri]  # (unchanged: its chunks may still wait for questions)
                else:
                    held.add(work, uri)
                if held.full() or done == len(grouped) - 1:
                    yield from held.flushing()

        self._then(questions, report, progress, stored())
        self._reassign(report)
        meter(report)
        self._notify(progress, "done", "", len(grouped), len(grouped), report)
        return report

    # -- the stages' parts, also used by planning --------------------------------------
    def read(self, path: Path) -> tuple[os.stat_result, bytes, Path]:
        return read_opened(path, self.max_bytes)

    def reader(self) -> Reader:
        """The walk of what each file makes, as the ingest and the dry run take it."""
        return Reader(self.store, self.read, self.is_current, max_bytes=self.max_bytes,
                      max_chars=self.max_chars, grouping=self.settings.mail_sources,
                      seen=self.seen)

    def is_current(self, existing: Source | None, digest: str) -> bool:
        """The stored source is of this content, made by this pipeline, and complete."""
        return changes.is_current(existing, digest, self.fingerprint, force=self.force,
                                  strategy=self.settings.sync_strategy)

    def generator(self) -> QuestionGenerator:
        return QuestionGenerator(
            self.llm(), n=self.settings.questions_per_atom, mode=self.settings.generation,
            temperature=self.settings.temperature, max_repairs=self.settings.max_repairs,
            prompts=self.prompts, graph=self.settings.graph,
        )

    def chunk(self, document: loaders.Document, uri: str,
              counter: Callable[[str], int]) -> list[Chunk]:
        spans = chunk_text(document.text, size=self.settings.chunk_size,
                           overlap=self.settings.chunk_overlap, counter=counter)
        return [
            Chunk(text=document.text[s.start : s.end], source=uri, index=i, start=s.start,
                  end=s.end, metadata=section_metadata(document.sections, s.start, s.end))
            for i, s in enumerate(spans)
        ]

    def counter(self) -> Callable[[str], int]:
        """Counts tokens as the embedding model does (words, when it cannot say)."""
        from isotope.ingest.chunking import count_tokens

        probe = self.embedder.count_tokens("probe")
        if probe is None:
            return count_tokens
        return lambda text: self.embedder.count_tokens(text) or 0

    def discover(self, paths: Iterable[str | Path], include: Sequence[str] | None,
                 exclude: Sequence[str] | None, confine: Sequence[Path] | None = None, *,
                 names: Names | None = None,
                 ) -> tuple[dict[Path, Path], list[FileError], list[FileError]]:
        """The files an ingest of ``paths`` takes (``include``/``exclude``: the settings'
        when None), those skipped, and the paths that cannot be read."""
        return discover(paths, self.settings.include if include is None else include,
                        self.settings.exclude if exclude is None else exclude, confine,
                        names=names)

    # -- sequencing --------------------------------------------------------------------
    def _take(self, found: Found, report: IngestReport, progress: ProgressCallback | None,
              done: int, total: int, held: _Held, path: str) -> None:
        """Do what the ingest does with one thing the file ``path`` made (:mod:`reading`):
        a source is prepared and ``held`` to be embedded and stored with others."""
        if isinstance(found, FileError):
            report.errors.append(found)
            log.warning("%s: %s", found.path, found.message)
        elif isinstance(found, Unchanged):
            report.unchanged.append(found.uri)
        elif isinstance(found, Members):
            held.flush()  # (what a container holds is stored before the rest is pruned)
            if found.owner not in held.failed:  # (nothing of a container left out goes)
                self._prune(found, report)
        else:
            source = found.source
            if (owner := source.metadata.get("container")) is not None:
                if held.holds(str(owner)):
                    held.flush()  # (a member reads its container's stored access list)
                if str(owner) in held.failed:
                    # (left out with it: stored alone, it would miss the list it follows)
                    held.failed.add(source.uri)
                    return
                self._held().setdefault(str(owner), set()).add(source.uri)
            for warning in found.document.warnings:
                report.warnings.append(FileError(source.uri, warning))
                log.warning("%s: %s", source.uri, warning)
            with Timer(report, "chunk"):
                chunks = self.chunk(found.document, source.uri, self.counter())
            work = self._prepare(source, chunks, report, progress, done, total, found.existing,
                                 document=found.document.text)
            if work is not None:
                held.add(work, path)

    def _held(self) -> dict[str, set[str]]:
        """The members stored of each container: read once per run, kept up to date."""
        if self._members_of is None:
            self._members_of = maintenance.members_of(self.store)
        return self._members_of

    def _prune(self, end: Members, report: IngestReport) -> None:
        """Remove, with theirs, the members ``end.owner`` no longer holds (the caller
        holds the writer lock), unless a mailbox lost all or most of them (emptied or
        being rewritten: an error, nothing removed)."""
        held = self._held()
        before = held.get(end.owner, set()) - end.new  # (held before this run)
        stale = before - end.seen
        if (end.mailbox and not self.force and maintenance.removes_too_many(
                len(stale), len(before), all_gone=not end.seen)):
            report.errors.append(FileError(end.owner, (
                f"it holds {len(end.seen & before)} of the {len(before)} messages stored "
                "from it (emptied, or being rewritten?): none removed; if that is right, "
                "ingest it with --force")))
            return
        for uri in sorted(stale):
            report.removed += maintenance.drop(self.store, uri, held)

    def _meter(self) -> Callable[[IngestReport], None]:
        """Snapshot the model counters; the returned function writes what was spent since
        into a report."""
        llm, embedder = self.llm(), self.embedder

        def read() -> tuple[int, int, int, int, int, int]:
            stats, embed_stats = llm.stats, embedder.stats
            return (
                stats.misses if stats else llm.usage.calls,
                stats.hits if stats else 0,
                embed_stats.hits if embed_stats else 0,
                embed_stats.misses if embed_stats else 0,
                llm.usage.prompt_tokens,
                llm.usage.completion_tokens,
            )

        start = read()

        def write(report: IngestReport) -> None:
            end = read()
            (report.llm_calls, report.llm_cache_hits, report.embedding_cache_hits,
             report.embedded, report.prompt_tokens, report.completion_tokens) = (
                b - a for a, b in zip(start, end, strict=True))

        return write

    def _prepare(
        self, source: Source, chunks: list[Chunk], report: IngestReport,
        progress: ProgressCallback | None, done: int, total: int,
        existing: Source | bool | None = False, *, document: str,
    ) -> Work | None:
        """Atomize a source's chunks (None if the stored source is current). ``existing``
        is the stored source, or False to look it up. The chunks of a changed source whose
        text the stored one already holds, made by this pipeline, keep what was stored."""
        if existing is False:
            existing = self.store.get_source(source.uri)
            if self.is_current(existing, source.content_hash):
                report.unchanged.append(source.uri)
                return None
        assert existing is not True
        source.access, mark = self._list_of(source, existing, report)
        if mark is not None and self.assign.allow is None:  # (it goes with a list given)
            source.metadata[ACCESS_BY_HAND] = mark
        source.metadata["pipeline"] = self.fingerprint
        report.chunks += len(chunks)
        reused: dict[int, StoredChunk] = {}
        if existing is not None and changes.may_reuse(
                existing, self.fingerprint, force=self.force,
                strategy=self.settings.sync_strategy):
            reused = changes.reusable(chunks, self.store.stored_chunks(existing.uri),
                                      existing.metadata.get("incomplete_chunks", []))
            report.reused_chunks += len(reused)
        for i, found in reused.items():
            chunks[i].context = found.context
        failed_contexts = self._situate(source, chunks, reused, document, report)
        with Timer(report, "atomize"):
            fresh = [c for i, c in enumerate(chunks) if i not in reused]
            atomized = iter(self.atomizer.atomize_batch(fresh))
            atoms_per_chunk = [
                [Atom(text=a.text, chunk_id=chunk.id, index=a.index, start=a.start, end=a.end)
                 for a in reused[i].atoms] if i in reused else next(atomized)
                for i, chunk in enumerate(chunks)
            ]
        self._notify(progress, "embed", source.uri, done, total, report)
        return Work(source, chunks, atoms_per_chunk, existing is not None, done, total,
                    reused, failed_chunks=failed_contexts, failed_contexts=len(failed_contexts),
                    replaces=existing.uri if existing and existing.uri != source.uri else None)

    # -- who may see it ----------------------------------------------------------------
    def _list_of(self, source: Source, stored: Source | None, report: IngestReport
                 ) -> tuple[list[str] | None, str | None]:
        """The access list ``source`` gets now (``stored``: what is stored under its
        name), and the mark of its list set by hand where that holds. Every list an
        ingest gives goes through here: new, changed and unchanged sources, a container's
        members, lists set by hand; each from its file as it was read (:attr:`seen`),
        never from its path resolved again."""
        read = self.seen.get(file_of(source.uri, source.metadata))
        real = read.real if read is not None else None
        had = stored.access if stored is not None else None
        mark = held_by_hand(stored, real)  # (None too when its file is now another one)
        before = stored.metadata.get(READ_AS) if stored is not None else None
        if real is not None:  # (what a list set by hand on it is then set for)
            source.metadata[READ_AS] = real
        if stored is not None and stored.access_by_hand and mark is None:
            had = []  # (a list set by hand for another file: not this one's either)
        elif before and real is not None and before != real and mark is None and had:
            # the list it had was given for the file read then: not this one's
            had = []
            warning = (f"its file is another now ({real}, was {before}): the list it had "
                       "is not carried over; administrators only unless the rules or "
                       "--allow give it one")
            report.warnings.append(FileError(source.uri, warning))
            log.warning("%s: %s", source.uri, warning)
        if (owner := source.metadata.get("container")) is not None and mark is None:
            # a member (a mailbox's message, an email's attachment) follows its container,
            # whose list set by hand holds for a new member too
            container = self.store.get_source(str(owner))
            had = container.access if container is not None else had
            mark = held_by_hand(container, real)
        listed = self.assign(source.uri, source.root, source.metadata, had,
                             loader=source.loader, by_hand=mark is not None, real=real)
        if read is not None and read.stat.st_nlink > 1:
            listed = self._one_file(source.uri, read, listed, report)
        return listed, mark

    def _one_file(self, uri: str, read: Read, listed: list[str] | None,
                  report: IngestReport) -> list[str] | None:
        """The list of a file with several names (hard links): one file, so the
        strictest of the lists its names get (:func:`isotope.access.strictest`). Its names
        are those this run found, each checked again to be that file now; unless they are
        all of its names (the link count, at the read and now), one may be outside the
        folders ingested, or changed since the walk: administrators only. Either is said
        in the report's warnings."""
        identity = (read.stat.st_dev, read.stat.st_ino)
        found = self.names.get(identity, {})
        still = {path: root for path, root in found.items() if _is_file(path, identity)}
        names: dict[str, tuple[str, str]] = {}  # real path -> (a path reached by, root)
        for path, root in still.items():
            names.setdefault(os.path.realpath(path), (path, root))
        names.setdefault(read.real, (uri, ""))
        try:
            now: os.stat_result | None = os.stat(read.real)
        except OSError:
            now = None
        if (len(still) < len(found) or now is None
                or (now.st_dev, now.st_ino) != identity
                or not read.stat.st_nlink == now.st_nlink == len(names)):
            warning = (f"the file has {read.stat.st_nlink} names (hard links), of which "
                       f"{len(names)} are in the folders ingested and still this file: "
                       "administrators only, as another name may be under another access "
                       "list; ingest the folder holding all its names")
            report.warnings.append(FileError(uri, warning))
            log.warning("%s: %s", uri, warning)
            return []
        lists = [listed]
        for real, (other, root) in sorted(names.items()):
            if real == read.real:
                continue
            stored = self.store.get_source(other)
            lists.append(self.assign(
                other, root, stored.metadata if stored else {}, stored.access if stored
                else None, loader=stored.loader if stored else "",
                by_hand=held_by_hand(stored, real) is not None, real=real))
        chosen = strictest(lists)
        if chosen != listed:
            warning = (f"another name of this file (a hard link: {', '.join(sorted(names))}) "
                       f"has another access list: it takes the strictest, {chosen}")
            report.warnings.append(FileError(uri, warning))
            log.warning("%s: %s", uri, warning)
        return chosen

    def _reassign(self, report: IngestReport) -> None:
        """Give the sources found unchanged the access list they get now (the list given,
        or the rules file of their folder as it is now, from their file as this run read
        it), and their members (an email's attachments, a mailbox's messages) theirs: no
        model is called."""
        unchanged = set(report.unchanged)
        todo = list(reversed(report.unchanged))  # (in the walk's order: containers first)
        while todo:
            uri = todo.pop()
            stored = self.store.get_source(uri)
            if stored is None:
                continue
            root = self.roots.get(file_of(uri, stored.metadata), stored.root)
            wanted, mark = self._list_of(stored.model_copy(update={
                "root": root, "metadata": dict(stored.metadata)}), stored, report)
            if wanted != stored.access or (stored.access_by_hand and (
                    mark is None or self.assign.allow is not None)):
                # (a list given ends one by hand; so does its file's being another now)
                self.store.set_access([uri], wanted)
            todo += [inner for inner in self._held().get(uri, ()) if inner not in unchanged]

    def _situate(self, source: Source, chunks: list[Chunk], reused: dict[int, StoredChunk],
                 document: str, report: IngestReport) -> set[int]:
        """With ``chunk_context``: the model's context for each chunk that is not reused
        and has none yet. Returns the chunks whose context failed."""
        if not self.settings.chunk_context:
            return set()
        todo = [i for i, c in enumerate(chunks) if i not in reused and not c.context]
        if not todo:
            return set()
        title = source.metadata.get("title") or chunks[0].metadata.get("title")
        with Timer(report, "context"):
            written = contextual.situate(
                self.llm(), document, [chunks[i] for i in todo],
                title=str(title) if title else None, max_chars=self.settings.context_chars,
                spec=self.prompts["context"])
        failed: set[int] = set()
        for i, context in zip(todo, written, strict=True):
            if context is None:
                failed.add(i)
                report.failed_contexts.append(
                    FileError(source.uri, f"context of chunk {i}: the model failed"))
            else:
                chunks[i].context = context
                report.contexts += 1
        return failed

    def _store_many(self, works: Sequence[Work], report: IngestReport,
                    progress: ProgressCallback | None) -> Iterator[str]:
        """Embed the fresh texts of several sources in one call, then store each source
        in its own transaction (see :meth:`_store`), naming each once it is stored."""
        texts = [self._texts(work) for work in works]
        documents, asked = [t for some, _ in texts for t in some], [t for _, q in texts for t in q]
        with Timer(report, "embed"):  # (documents first, then questions)
            if self.embedder.two_sided:
                made = np.vstack([self.embedder.embed_documents(documents),
                                  self.embedder.embed(asked)])
            else:  # (one call: a remote server answers once)
                made = self.embedder.embed(documents + asked)
        d, q = 0, len(documents)  # (where the next source's documents and questions start)
        for work, (some, theirs) in zip(works, texts, strict=True):
            self._store(work, np.vstack([made[d:d + len(some)], made[q:q + len(theirs)]]),
                        report, progress)
            d, q = d + len(some), q + len(theirs)
            yield work.source.uri

    def _texts(self, work: Work) -> tuple[list[str], list[str]]:
        """What :meth:`_store` embeds of a source: its fresh chunks and atoms (embedded as
        documents), then its candidate questions (embedded as queries are), in that order
        (marking what failed, and the fresh chunks' questions as to come)."""
        work.mark_incomplete()
        for i in work.fresh:  # (questions come as enrichment)
            work.questions.setdefault(i, [[] for _ in work.atoms[i]])
        chunks = work.chunks
        return ([chunks[i].search_text for i in work.fresh]
                + [a.text for a in work.fresh_atoms()], [q.text for q in work.candidates()])

    def _store(self, work: Work, vectors: np.ndarray, report: IngestReport,
               progress: ProgressCallback | None) -> None:
        """Store one source in one transaction with the ``vectors`` of its fresh texts
        (:meth:`_texts`), its fresh chunks waiting for their questions. Reused chunks
        bring their stored atoms, questions and vectors."""
        chunks = work.chunks
        report.atoms += len(work.fresh_atoms())
        assembled = assemble(work, vectors, self._select)
        batch = dataclasses.replace(
            assembled.batch, pending={chunks[i].id for i in work.fresh if work.atoms[i]})
        report.questions_dropped += assembled.dropped
        report.questions += len(batch.questions)
        work.source.ingested_at = datetime.now(UTC)
        if self.settings.storage == "file-reference" and work.source.loader != "chunks":
            stored, hashes = references.strip(chunks)
            batch = dataclasses.replace(batch, chunks=stored, chunk_hashes=hashes)
        with Timer(report, "store"):
            self.store.add(batch)
        (report.replaced if work.replacing else report.added).append(work.source.uri)
        # files done before this one's: its members (messages, attachments) may follow
        self._notify(progress, "store", work.source.uri, work.done, work.total, report)

    def _select(self, atoms: list[Atom], atom_vectors: np.ndarray, questions: list[Question],
                question_vectors: np.ndarray) -> tuple[list[Question], list[str]]:
        return select_questions(atoms, atom_vectors, questions, question_vectors,
                                min_similarity=self.settings.min_question_similarity,
                                dedup_threshold=self.settings.dedup_threshold)

    @staticmethod
    def _notify(
        progress: ProgressCallback | None, stage: str, source: str, done: int, total: int,
        report: IngestReport,
    ) -> None:
        if progress is not None:
            progress(Progress(stage, source, done, total, report.chunks, report.atoms,
                              report.questions_generated))


def _names(files: dict[Path, Path]) -> Names:
    """``files`` by identity (as :func:`isotope.ingest.discovery.discover` gives them)."""
    found: Names = {}
    for path, root in files.items():
        try:
            stat = os.stat(path)
        except OSError:
            continue  # (reported when it is read)
        found.setdefault((stat.st_dev, stat.st_ino), {})[str(path)] = str(root)
    return found


def _is_file(path: str, identity: tuple[int, int]) -> bool:
    """Whether ``path`` is, now, the file of ``identity`` (device, inode)."""
    try:
        stat = os.stat(path)
    except OSError:
        return False
    return (stat.st_dev, stat.st_ino) == identity


def _stored(report: IngestReport) -> tuple[list[str], list[str], list[str]]:
    """The sources an ingest stored or found unchanged so far (these may have chunks
    waiting for questions)."""
    return report.added, report.replaced, report.unchanged


def _noting(steps: Iterator[list[str]], into: list[str]) -> Iterator[list[str]]:
    """``steps``, each step's sources also added to ``into``."""
    for step in steps:
        into += step
        yield step


HOLD_TEXTS = 256
"""Texts (chunks and atoms) of prepared sources held to be embedded in one call: small
files are read ahead until they hold this many, or :data:`HOLD_FILES` sources. The first
flush holds one source, each next one twice as many as the last, so that the model's first
calls start as soon as the first file is stored."""
HOLD_FILES = 32


class _Held:
    """Sources prepared (read, chunked, atomized) and not yet embedded and stored, each
    with the file it came from: embedded in one call and stored together (each in its own
    transaction) once they hold enough. An embedding error stores them one at a time, so
    that only the file whose source failed is left out."""

    def __init__(self, pipeline: Pipeline, report: IngestReport,
                 progress: ProgressCallback | None) -> None:
        self._pipeline, self._report, self._progress = pipeline, report, progress
        self._works: list[tuple[Work, str]] = []
        self.failed: set[str] = set()
        """Sources whose embedding failed (left out, with their file)."""
        self._limit = 1  # (sources of the next flush, doubled after each)
        self.at = 0
        """The file the first stage is at: a source stored later says it in its progress
        (progress never goes back to the file it came from)."""

    def add(self, work: Work, path: str) -> None:
        self._works.append((work, path))

    def full(self) -> bool:
        texts = sum(len(work.fresh) + len(work.fresh_atoms()) for work, _ in self._works)
        return texts >= HOLD_TEXTS * self._limit / HOLD_FILES or len(self._works) >= self._limit

    def flush(self) -> None:
        """Embed and store every source held."""
        for _ in self.flushing():
            pass

    def flushing(self) -> Iterator[list[str]]:
        """Embed every source held in one call, then store them one at a time, each step
        naming the source just stored (so that the model's calls for it start before the
        next is stored)."""
        works, self._works = self._works, []
        if not works:
            return
        self._limit = min(2 * self._limit, HOLD_FILES)
        for work, _ in works:
            work.done = max(work.done, self.at)
        pipeline, report = self._pipeline, self._report
        stored = pipeline._store_many([w for w, _ in works], report, self._progress)
        try:
            for uri in stored:
                yield [uri]
            return
        except ProviderError as exc:  # (the embedding: nothing of them is stored yet)
            if exc.fatal:
                raise
            if len(works) == 1:
                self._failed(*works[0], exc)
                return
        for work, path in works:  # (one at a time: which one failed)
            try:
                yield from ([uri] for uri in pipeline._store_many([work], report,
                                                                  self._progress))
            except ProviderError as exc:
                if exc.fatal:
                    raise
                self._failed(work, path, exc)

    def holds(self, uri: str) -> bool:
        """Whether the source ``uri`` is held (not stored yet)."""
        return any(work.source.uri == uri for work, _ in self._works)

    def _failed(self, work: Work, path: str, exc: ProviderError) -> None:
        """The file ``path`` is left out (once, however many of its sources failed)."""
        self.failed.add(work.source.uri)
        said = FileError(path, f"language model failed: {exc}")
        if said not in self._report.errors:
            self._report.errors.append(said)
            log.warning("%s: %s", path, exc)


__all__ = ["STAGES", "FileError", "IngestPlan", "IngestReport", "IsotopeError", "Pipeline",
           "Progress", "ProgressCallback"]
