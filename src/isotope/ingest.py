"""The ingest pipeline: load -> chunk -> atomize -> generate questions -> embed ->
filter and dedup -> store. Sources are loaded and atomized one at a time; their questions
are generated together once enough atoms wait (so many small files keep the model as busy
as one large one); each source is then stored in one transaction."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from isotope import contextual, loaders, references
from isotope import prompts as prompt_specs
from isotope.atomizers import Atomizer, SentenceAtomizer
from isotope.chunking import chunk_text, section_metadata
from isotope.discovery import FileError, discover
from isotope.embedders import Embedder
from isotope.errors import IsotopeError, LoaderError, ProviderError
from isotope.files import read_file
from isotope.generation import QuestionGenerator
from isotope.models import Atom, Chunk, Question, Source, content_hash, stable_id
from isotope.prompts import PROMPTS, PromptSpec
from isotope.providers import LLM
from isotope.selection import select_questions
from isotope.settings import Settings, index_settings
from isotope.stores import SourceBatch, Store, StoredChunk

log = logging.getLogger(__name__)
STAGES = ("load", "chunk", "context", "atomize", "generate", "embed", "store")
NOT_CONTENT = ("storage",)
"""Index settings that do not change what is generated (left out of the fingerprint)."""
CONTEXT_SETTINGS = ("chunk_context", "context_chars")
"""Settings of contextual enrichment: part of the pipeline's fingerprint only when it is on
(so indexes made before it existed stay current)."""


@dataclass
class IngestReport:
    """What an ingest did."""

    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    """Sources whose files were deleted (``sync`` only)."""
    skipped: list[FileError] = field(default_factory=list)
    """Files left out on purpose (unsupported type)."""
    errors: list[FileError] = field(default_factory=list)
    """Files that could not be ingested; everything else was."""
    failed_atoms: list[FileError] = field(default_factory=list)
    """Atoms whose questions could not be generated (their source is stored without them
    and is completed by the next ingest)."""
    chunks: int = 0
    contexts: int = 0
    """Chunks the model wrote a context for (``chunk_context``)."""
    failed_contexts: list[FileError] = field(default_factory=list)
    """Chunks whose context could not be written (stored without; asked again next time)."""
    reused_chunks: int = 0
    """Chunks of changed sources that were unchanged and kept their atoms, questions and
    vectors (no model or embedding calls for them)."""
    atoms: int = 0
    questions: int = 0
    """Questions stored (kept by the filters)."""
    questions_generated: int = 0
    questions_dropped: int = 0
    llm_calls: int = 0
    """Calls the language model answered (cache hits are not calls)."""
    llm_cache_hits: int = 0
    embedding_cache_hits: int = 0
    embedded: int = 0
    """Texts the embedding model embedded (cache hits excluded; 0 when the cache is off)."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    timings: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass
class Progress:
    """Passed to a progress callback as work goes on."""

    stage: str
    source: str
    sources_done: int
    sources_total: int
    chunks: int
    atoms: int
    questions: int
    """Questions generated so far."""


ProgressCallback = Callable[[Progress], None]


@dataclass
class IngestPlan:
    """What an ingest would do (``isotope ingest --dry-run``): nothing is generated or
    stored. Token counts are estimates for the calls the cache does not answer."""

    sources: int = 0
    unchanged: int = 0
    chunks: int = 0
    atoms: int = 0
    llm_calls: int = 0
    cached_calls: int = 0
    estimated_prompt_tokens: int = 0
    estimated_completion_tokens: int = 0
    skipped: list[FileError] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)


@dataclass
class _Work:
    """A source on its way through the pipeline: chunked and atomized, waiting for its
    questions, then stored."""

    source: Source
    chunks: list[Chunk]
    atoms: list[list[Atom]]
    replacing: bool
    done: int
    total: int
    reused: dict[int, StoredChunk] = field(default_factory=dict)
    """Chunks (by position) whose stored atoms, questions and vectors are kept."""
    questions: dict[int, list[list[str]]] = field(default_factory=dict)
    failed: int = 0
    failed_chunks: set[int] = field(default_factory=set)
    failed_contexts: int = 0
    replaces: str | None = None
    """The stored source this one takes the place of, when its name differs."""


class _Timer:
    def __init__(self, report: IngestReport, stage: str) -> None:
        self.report, self.stage = report, stage

    def __enter__(self) -> None:
        self.started = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.report.timings[self.stage] += time.perf_counter() - self.started


class Pipeline:
    """Runs ingestion into a store with the given models."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        embedder: Embedder,
        atomizer: Atomizer,
        llm: Callable[[], LLM],
        *,
        force: bool = False,
        prompts: dict[str, PromptSpec] | None = None,
    ) -> None:
        self.settings = settings
        self.force = force
        """Ingest every source again, unchanged ones included, reusing nothing stored
        (the cache still answers for unchanged text)."""
        self.max_bytes = int(settings.max_file_mb * 1e6)
        self.store = store
        self.embedder = embedder
        self.atomizer = atomizer
        self._llm = llm
        self.prompts = prompts or PROMPTS
        # What a source's stored content depends on: a source made under another
        # fingerprint is generated again. Settings that do not change the content (how
        # chunks are stored) stay out, so adding such a setting does not invalidate indexes.
        left_out = NOT_CONTENT + (() if settings.chunk_context else CONTEXT_SETTINGS)
        content = {k: v for k, v in index_settings(settings).items() if k not in left_out}
        # The prompts whose output is stored (as they were listed before the prompts
        # moved to one module, so existing fingerprints are unchanged).
        used = (("context",) if settings.chunk_context else ()) + prompt_specs.CONTENT + (
            ("atomizer",) if settings.atomizer == "llm" else ())
        self.fingerprint = stable_id(
            sorted(content.items()), *prompt_specs.fingerprint(self.prompts, used),
            embedder.model_id
        )

    # -- entry points ------------------------------------------------------------------
    def ingest_paths(
        self,
        paths: Iterable[str | Path],
        *,
        include: Sequence[str] | None = None,
        exclude: Sequence[str] | None = None,
        progress: ProgressCallback | None = None,
    ) -> IngestReport:
        files, skipped, missing = discover(
            paths,
            self.settings.include if include is None else include,
            self.settings.exclude if exclude is None else exclude,
        )
        report = self.ingest_files(files, progress=progress)
        report.skipped[:0], report.errors[:0] = skipped, missing
        return report

    def ingest_files(self, files: dict[Path, Path], *,
                     progress: ProgressCallback | None = None) -> IngestReport:
        """Ingest files, each given with its root (the folder it was found under)."""
        report = IngestReport()
        meter = self._meter()
        queue = _Queue(self, report, progress)
        for done, (path, root) in enumerate(files.items()):
            self._notify(progress, "load", str(path), done, len(files), report)
            try:
                queue.add(self._ingest_file(path, root, report, progress, done, len(files)))
            except LoaderError as exc:
                report.errors.append(FileError(exc.path, exc.reason))
                log.warning("%s", exc)
            except ProviderError as exc:  # this file is left out; the others go on
                if exc.fatal:
                    raise
                report.errors.append(FileError(str(path), f"language model failed: {exc}"))
                log.warning("%s: %s", path, exc)
        queue.flush()
        meter(report)
        self._notify(progress, "done", "", len(files), len(files), report)
        return report

    def ingest_chunks(
        self,
        chunks: Iterable[Chunk | str],
        *,
        source: str = "chunks",
        progress: ProgressCallback | None = None,
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
        queue = _Queue(self, report, progress)
        for done, (uri, items) in enumerate(grouped.items()):
            text = "\n\n".join(c.text for c in items)
            src = Source(uri=uri, content_hash=content_hash(text), size=len(text.encode()),
                         loader="chunks")
            queue.add(self._prepare(src, items, report, progress, done, len(grouped),
                                    document=text))
        queue.flush()
        meter(report)
        self._notify(progress, "done", "", len(grouped), len(grouped), report)
        return report

    # -- work --------------------------------------------------------------------------
    def _ingest_file(
        self, path: Path, root: Path, report: IngestReport, progress: ProgressCallback | None,
        done: int, total: int,
    ) -> _Work | None:
        with _Timer(report, "load"):
            stat, data = self._read(path)
            uri = str(path)
            digest = content_hash(data)
            existing = self.store.get_source(uri)
            if existing is None and (resolved := str(path.resolve())) != uri:
                # stored by an older isotope under its resolved path: take its place
                existing = self.store.get_source(resolved)
            if self._is_current(existing, digest) and existing and existing.uri == uri:
                report.unchanged.append(uri)
                return None
            document, loader = loaders.load(path, data)
        with _Timer(report, "chunk"):
            chunks = self._chunk(document, uri, self._counter())
        source = Source(
            uri=uri, content_hash=digest, size=stat.st_size, mtime=stat.st_mtime,
            loader=loader.name, metadata={**document.metadata}, root=str(root),
        )
        return self._prepare(source, chunks, report, progress, done, total, existing,
                             document=document.text)

    def _read(self, path: Path) -> tuple[os.stat_result, bytes]:
        return read_file(path, self.max_bytes)

    def plan(
        self,
        paths: Iterable[str | Path],
        *,
        include: Sequence[str] | None = None,
        exclude: Sequence[str] | None = None,
    ) -> IngestPlan:
        """Count the chunks, atoms and model calls an ingest of ``paths`` needs, and how
        many calls the cache already covers. With the ``llm`` atomizer, atoms are
        estimated by sentences and its calls are counted as one per chunk."""
        plan = IngestPlan()
        files, plan.skipped, plan.errors = discover(
            paths,
            self.settings.include if include is None else include,
            self.settings.exclude if exclude is None else exclude,
        )
        generator = self.generator()
        estimate_atoms = SentenceAtomizer(min_words=self.settings.min_atom_words)
        counter = self._counter()
        for path in files:
            try:
                _, data = self._read(path)
                if self._is_current(self.store.get_source(str(path)),
                                    content_hash(data)):
                    plan.unchanged += 1
                    continue
                document, _ = loaders.load(path, data)
            except OSError as exc:
                plan.errors.append(FileError(str(path), f"cannot read: {exc.strerror or exc}"))
                continue
            except LoaderError as exc:
                plan.errors.append(FileError(exc.path, exc.reason))
                continue
            plan.sources += 1
            chunks = self._chunk(document, str(path), counter)
            plan.chunks += len(chunks)
            if self.settings.atomizer == "llm":
                plan.llm_calls += len(chunks)
            if self.settings.chunk_context and chunks:
                self._plan_contexts(plan, document, chunks, counter)
            for chunk, atoms in zip(chunks, estimate_atoms.atomize_batch(chunks), strict=True):
                plan.atoms += len(atoms)
                prompts, cached = generator.plan(chunk, atoms)
                plan.llm_calls += len(prompts)
                plan.cached_calls += cached
                share = (len(prompts) - cached) / max(1, len(prompts))
                plan.estimated_prompt_tokens += int(share * sum(
                    counter(m["content"]) + 8 for p in prompts for m in p))
                plan.estimated_completion_tokens += int(
                    share * len(atoms) * self.settings.questions_per_atom * 16)
        return plan

    def _plan_contexts(self, plan: IngestPlan, document: loaders.Document,
                       chunks: list[Chunk], counter: Callable[[str], int]) -> None:
        title = document.metadata.get("title")
        prompts = contextual.prompts(document.text, chunks, title=str(title) if title else None,
                                     spec=self.prompts["context"],
                                     max_chars=self.settings.context_chars)
        hits = sum(self._llm().cached(prompts, max_tokens=contextual.MAX_TOKENS))
        plan.llm_calls += len(prompts)
        plan.cached_calls += hits
        share = (len(prompts) - hits) / len(prompts)
        plan.estimated_prompt_tokens += int(share * sum(
            counter(m["content"]) + 8 for p in prompts for m in p))
        plan.estimated_completion_tokens += int(share * len(prompts) * 50)

    def _meter(self) -> Callable[[IngestReport], None]:
        """Snapshot the model counters; the returned function writes what was spent since
        into a report."""
        llm, embedder = self._llm(), self.embedder

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

    def _is_current(self, existing: Source | None, digest: str) -> bool:
        """The stored source is of this content, made by this pipeline, and complete."""
        return (
            existing is not None
            and not self.force
            and self.settings.sync_strategy == "source_aware"
            and existing.content_hash == digest
            and existing.metadata.get("pipeline") == self.fingerprint
            and not existing.metadata.get("incomplete_atoms")
            and not existing.metadata.get("incomplete_contexts")
        )

    def generator(self) -> QuestionGenerator:
        return QuestionGenerator(
            self._llm(), n=self.settings.questions_per_atom, mode=self.settings.generation,
            temperature=self.settings.temperature, max_repairs=self.settings.max_repairs,
            prompts=self.prompts,
        )

    def _chunk(self, document: loaders.Document, uri: str,
               counter: Callable[[str], int]) -> list[Chunk]:
        spans = chunk_text(document.text, size=self.settings.chunk_size,
                           overlap=self.settings.chunk_overlap, counter=counter)
        return [
            Chunk(text=document.text[s.start : s.end], source=uri, index=i, start=s.start,
                  end=s.end, metadata=section_metadata(document.sections, s.start, s.end))
            for i, s in enumerate(spans)
        ]

    def _counter(self) -> Callable[[str], int]:
        from isotope.chunking import count_tokens

        probe = self.embedder.count_tokens("probe")
        if probe is None:
            return count_tokens
        return lambda text: self.embedder.count_tokens(text) or 0

    def _prepare(
        self, source: Source, chunks: list[Chunk], report: IngestReport,
        progress: ProgressCallback | None, done: int, total: int,
        existing: Source | bool | None = False, *, document: str,
    ) -> _Work | None:
        """Atomize a source's chunks (None if the stored source is current). ``existing``
        is the stored source, or False to look it up. The chunks of a changed source whose
        text the stored one already holds, made by this pipeline, keep what was stored."""
        if existing is False:
            existing = self.store.get_source(source.uri)
            if self._is_current(existing, source.content_hash):
                report.unchanged.append(source.uri)
                return None
        assert existing is not True
        source.metadata["pipeline"] = self.fingerprint
        report.chunks += len(chunks)
        reused: dict[int, StoredChunk] = {}
        if (existing is not None and self.settings.sync_strategy == "source_aware"
                and not self.force
                and existing.metadata.get("pipeline") == self.fingerprint):
            stored = self.store.stored_chunks(existing.uri)
            for digest in existing.metadata.get("incomplete_chunks", []):
                stored.pop(digest, None)  # asked again
            for i, chunk in enumerate(chunks):
                found = stored.get(content_hash(chunk.text))
                if found is not None and len(found.atoms):
                    reused[i] = found
            report.reused_chunks += len(reused)
        for i, found in reused.items():
            chunks[i].context = found.context
        failed_contexts = self._situate(source, chunks, reused, document, report)
        with _Timer(report, "atomize"):
            fresh = [c for i, c in enumerate(chunks) if i not in reused]
            atomized = iter(self.atomizer.atomize_batch(fresh))
            atoms_per_chunk = [
                [Atom(text=a.text, chunk_id=chunk.id, index=a.index, start=a.start, end=a.end)
                 for a in reused[i].atoms] if i in reused else next(atomized)
                for i, chunk in enumerate(chunks)
            ]
        self._notify(progress, "generate", source.uri, done, total, report)
        return _Work(source, chunks, atoms_per_chunk, existing is not None, done, total,
                     reused, failed_chunks=failed_contexts, failed_contexts=len(failed_contexts),
                     replaces=existing.uri if existing and existing.uri != source.uri else None)

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
        with _Timer(report, "context"):
            written = contextual.situate(
                self._llm(), document, [chunks[i] for i in todo],
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

    def _generate(self, works: list[_Work], window: int, report: IngestReport,
                  progress: ProgressCallback | None) -> None:
        """Questions for the atoms of several sources: their chunks go to the model
        together, in windows of about ``window`` atoms (see
        :meth:`QuestionGenerator.window`), progress reported after each."""
        generator = self.generator()
        todo = [(w, i, chunk, atoms) for w in works
                for i, (chunk, atoms) in enumerate(zip(w.chunks, w.atoms, strict=True))
                if i not in w.reused]
        start = 0
        while start < len(todo):
            end, size = start, 0
            while end < len(todo) and (size < window or end == start):
                size += len(todo[end][3])
                end += 1
            part = todo[start:end]
            with _Timer(report, "generate"):
                results = generator.generate_many([(c, a) for _, _, c, a in part])
            for (work, i, _, atoms), result in zip(part, results, strict=True):
                work.questions[i] = result.questions
                for j, why in sorted(result.failed.items()):
                    work.failed += 1
                    work.failed_chunks.add(i)
                    report.failed_atoms.append(
                        FileError(work.source.uri, f"atom {atoms[j].text[:60]!r}: {why}"))
                report.atoms += len(atoms)
                report.questions_generated += sum(len(q) for q in result.questions)
            start = end
            last = part[-1][0]
            self._notify(progress, "generate", last.source.uri, last.done, last.total, report)

    def _store(self, work: _Work, report: IngestReport,
               progress: ProgressCallback | None) -> None:
        """Embed, filter and store one source in one transaction. Reused chunks bring
        their stored atoms, questions and vectors; only the others are embedded."""
        source, chunks = work.source, work.chunks
        if work.failed or work.failed_contexts:
            # Stored with what succeeded; marked so that the next ingest asks again for the
            # rest (the cache answers for the atoms that succeeded).
            if work.failed:
                source.metadata["incomplete_atoms"] = work.failed
            if work.failed_contexts:
                source.metadata["incomplete_contexts"] = work.failed_contexts
            source.metadata["incomplete_chunks"] = sorted(
                content_hash(chunks[i].text) for i in work.failed_chunks)
            source.status = "incomplete"
        fresh = [i for i in range(len(chunks)) if i not in work.reused]
        atoms = [a for i in fresh for a in work.atoms[i]]
        candidates = [
            Question(text=q, atom_id=atom.id, chunk_id=atom.chunk_id)
            for i in fresh
            for atom, questions in zip(work.atoms[i], work.questions[i], strict=True)
            for q in questions
        ]
        with _Timer(report, "embed"):
            vectors = self.embedder.embed(
                [contextual.search_text(chunks[i]) for i in fresh] + [a.text for a in atoms]
                + [q.text for q in candidates]
            )
        chunk_vectors = vectors[: len(fresh)]
        atom_vectors = vectors[len(fresh) : len(fresh) + len(atoms)]
        question_vectors = vectors[len(fresh) + len(atoms) :]
        candidates, keep = self._filter(atoms, atom_vectors, candidates, question_vectors)
        questions = [q for q, k in zip(candidates, keep, strict=True) if k]
        question_vectors = question_vectors[np.array(keep, dtype=bool)] if candidates else (
            question_vectors)
        report.questions_dropped += len(candidates) - len(questions)
        # Put the reused chunks back in their places, their atoms and questions re-keyed
        # to the chunk's new id.
        chunk_rows = dict(zip(fresh, chunk_vectors, strict=True))
        atom_parts, question_parts = [atom_vectors], [question_vectors]
        for i, stored in work.reused.items():
            chunk_rows[i] = stored.vector[0]
            new_atoms = work.atoms[i]
            renamed = {old.id: new for old, new in zip(stored.atoms, new_atoms, strict=True)}
            atoms += new_atoms
            questions += [Question(text=q.text, atom_id=renamed[q.atom_id].id,
                                   chunk_id=chunks[i].id) for q in stored.questions]
            atom_parts.append(stored.atom_vectors)
            question_parts.append(stored.question_vectors)
        report.questions += len(questions)
        source.ingested_at = datetime.now(UTC)
        stored_chunks, hashes = chunks, None
        if self.settings.storage == "file-reference" and source.loader != "chunks":
            stored_chunks, hashes = references.strip(chunks)
        with _Timer(report, "store"):
            self.store.add(
                SourceBatch(
                    source=source, chunks=stored_chunks, atoms=atoms, questions=questions,
                    chunk_vectors=np.stack([chunk_rows[i] for i in range(len(chunks))])
                    if chunks else vectors[:0],
                    atom_vectors=_stack(atom_parts, vectors),
                    question_vectors=_stack(question_parts, vectors),
                    chunk_hashes=hashes, replaces=work.replaces,
                )
            )
        (report.replaced if work.replacing else report.added).append(source.uri)
        self._notify(progress, "store", source.uri, work.done + 1, work.total, report)

    def _filter(
        self, atoms: list[Atom], atom_vectors: np.ndarray, questions: list[Question],
        question_vectors: np.ndarray,
    ) -> tuple[list[Question], list[bool]]:
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


def _stack(parts: list[np.ndarray], like: np.ndarray) -> np.ndarray:
    """Row blocks stacked into one matrix (empty blocks of any shape are left out)."""
    parts = [p for p in parts if len(p)]
    return np.concatenate(parts) if parts else like[:0]


class _Queue:
    """Sources waiting for questions: generated together once they hold a window's worth
    of atoms (so many small sources keep the model as busy as one large one), then each
    stored in its own transaction."""

    def __init__(self, pipeline: Pipeline, report: IngestReport,
                 progress: ProgressCallback | None) -> None:
        self.pipeline, self.report, self.progress = pipeline, report, progress
        self.window = 0  # known once a source needs questions (the model is built then)
        self.works: list[_Work] = []

    def add(self, work: _Work | None) -> None:
        if work is None:
            return
        if not self.window:
            settings = self.pipeline.settings
            self.window = self.pipeline.generator().window(settings.llm_concurrency)
        self.works.append(work)
        if sum(len(a) for w in self.works for a in w.atoms) >= self.window:
            self.flush()

    def flush(self) -> None:
        works, self.works = self.works, []
        if not works:
            return
        try:
            self.pipeline._generate(works, self.window, self.report, self.progress)
        except ProviderError as exc:
            if exc.fatal:
                raise
            if len(works) > 1:  # find the source that fails; store the others
                for work in works:
                    self._reset(work)
                    self.works = [work]
                    self.flush()
                return
            self.report.errors.append(
                FileError(works[0].source.uri, f"language model failed: {exc}"))
            log.warning("%s: language model failed: %s", works[0].source.uri, exc)
            return
        for work in works:
            self.pipeline._store(work, self.report, self.progress)

    def _reset(self, work: _Work) -> None:
        """Forget what a failed window generated for ``work`` (it is generated again)."""
        for per_atom in work.questions.values():
            self.report.atoms -= len(per_atom)
            self.report.questions_generated -= sum(len(q) for q in per_atom)
        uri = work.source.uri
        self.report.failed_atoms = [f for f in self.report.failed_atoms if f.path != uri]
        work.questions, work.failed, work.failed_chunks = {}, 0, set()


__all__ = ["FileError", "IngestReport", "IsotopeError", "Pipeline", "Progress"]
