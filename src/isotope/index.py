"""The ``Isotope`` class: one object for most users, the public API. Each method hands the
work to the module that holds it (``opening``, ``ingest.runs``, ``search.request`` and
``searching``, ``search.answering``, ``search.fitted``, ``learning``, ``maintenance``,
``knowledge``, ``stores``) and keeps only what the call needs of the index."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from isotope import access, projects, stores
from isotope import prompts as prompt_specs
from isotope._version import __version__
from isotope.access import Principal, principal_of
from isotope.embedders import Embedder
from isotope.errors import InvalidArgument, SourceNotFound
from isotope.files import source_path
from isotope.ingest import maintenance
from isotope.ingest.atomizers import Atomizer
from isotope.ingest.maintenance import RepairReport, source_state
from isotope.ingest.maintenance import inside as _inside
from isotope.ingest.pipeline import IngestPlan, IngestReport, ProgressCallback, Questions
from isotope.ingest.runs import Runs
from isotope.knowledge import memory, reading
from isotope.knowledge.facts import GraphEntity, Neighbourhood
from isotope.models import (
    Chunk,
    ChunkQuestions,
    GeneratedQuestion,
    QueryResponse,
    SearchResult,
)
from isotope.opening import meta
from isotope.opening.meta import check_embedding, on_scale
from isotope.opening.settled import open_index
from isotope.providers import LLM
from isotope.providers.cache import Cache, CachedEmbedder, CachedLLM
from isotope.providers.loaded import Models
from isotope.reports import IndexStatus
from isotope.search import adapter as query_adapter
from isotope.search import learning
from isotope.search import weights as weight_fit
from isotope.search.answering import Answering
from isotope.search.fitted import Fitted
from isotope.search.request import search_request, valid_k
from isotope.search.searching import ChunkCounts, Search, hide_members
from isotope.settings import Settings, shown
from isotope.stores import (
    SCHEMA_VERSION,
    Feedback,
    LoggedQuery,
    SourceInfo,
    Store,
    VectorBackend,
)

PrincipalGiven = Principal | str | dict[str, Any] | None
"""Who asks (``principal=``): a :class:`~isotope.access.Principal`, its text form
``user:NAME[,group:NAME...]``, a dict ``{"user": ..., "groups": [...]}``, or None: the
index's owner, who sees everything."""


def vector_backend(settings: Settings, origins: dict[str, str]) -> VectorBackend:
    """The ``vector_backend`` and ``chroma_*`` settings as a store takes them (set by the
    user unless ``origins`` says the value is the default or the index's own)."""
    token = settings.chroma_token
    return VectorBackend(settings.vector_backend,
                         origins.get("vector_backend", "default") not in ("default", "index"),
                         {"chroma_token": token.get_secret_value() if token else None,
                          "chroma_tenant": settings.chroma_tenant,
                          "chroma_database": settings.chroma_database,
                          "chroma_timeout": settings.chroma_timeout})


class Isotope:
    """A question-indexed store of documents.

    >>> iso = Isotope.open("./my_index")
    >>> iso.ingest(["docs/"])
    >>> iso.search("How do I rotate an API key?").results[0].chunk.text
    """

    def __init__(
        self,
        store: Store,
        settings: Settings,
        embedder: Embedder,
        *,
        llm: LLM | None = None,
        answer_llm: LLM | None = None,
        origins: dict[str, str] | None = None,
    ) -> None:
        self.store = store
        self._scaled = on_scale(settings, embedder, origins,
                                fresh=store.get_meta("embedding") is None)
        self.settings = settings = settings.model_copy(update=self._scaled)
        self.embedder = embedder
        self.prompts = prompt_specs.load(settings.prompts_dir)
        """The prompts in effect (built-in, or overridden from ``prompts_dir``)."""
        self.cache = Cache(settings.cache_dir / "cache.db") if settings.cache else None
        # (what may be refused first: a new index's Chroma collections are made next)
        store.set_vector_index(settings.vector_index)
        self.vector_backend = store.set_vector_backend(vector_backend(settings, origins or {}))
        """Where the index keeps its vectors (``usearch``, ``chroma`` or a Chroma URL)."""
        store.set_read_replicas(settings.read_replicas, settings.replica_max_lag,
                                settings.replica_wait)
        store.set_keyword_index(settings.keyword_index)
        store.set_vector_build(settings.pg_vector_index, settings.hnsw_build_memory,
                               settings.hnsw_build_workers)
        self.origins = origins or {}
        self._counts = ChunkCounts()
        """The chunks each principal may see, for the confidence thresholds."""
        self._fitted = Fitted(store, settings)
        """The fitted weights and query adapter searches read."""
        self.access_control = settings.access_control
        """Sources without an access list are seen by administrators only (the
        ``access_control`` setting; a server whose keys name users turns it on)."""
        self.query_log = bool(settings.query_log)
        """Searches are written to the query log (the ``query_log`` setting; a server
        turns it on unless the setting says otherwise)."""
        self._models = Models(settings, self.cache, llm=llm, answer_llm=answer_llm)
        """The language models, each loaded once behind the reply cache."""
        check_embedding(store, settings, embedder, self._scaled)
        if self.cache is not None:
            self.embedder = CachedEmbedder(embedder, self.cache)
        self._runs = Runs(store, settings, self.embedder, self.prompts, self.llm,
                          self._after_questions)
        """The ingest runs (the settings given otherwise with ``remake``, see
        :meth:`open`, kept there until a forced ingest makes them the index's)."""

    # -- construction ------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path | None = None, *, create: bool = True,
             store: Store | None = None, embedder: Embedder | None = None,
             llm: LLM | None = None, answer_llm: LLM | None = None, remake: bool = False,
             **settings: Any) -> Isotope:
        """Open (or create) the index at ``path``: a directory, or the name of a project
        (a bare name that is not an existing directory; see :mod:`isotope.projects`).
        Default: the ``index`` setting, else the ``project`` setting, else the default
        project, else ``./.isotope``.

        Keyword arguments override settings (``questions_per_atom=3``). ``llm`` replaces
        the question, atomizer and answer models; ``answer_llm`` only the answer model.
        Raises :class:`ModelMismatch` if ``embedder`` (or the ``embedding_model`` setting)
        differs from the model the index was built with, and :class:`FixedSetting` if a
        setting the index fixed when it was made (:data:`isotope.settings.FIXED`: graph,
        questions_per_atom, vector_backend, pg_vector_index) is given another value (in
        an argument, the environment or ``.env``); nothing is written then.

        ``remake``: ``graph`` and ``questions_per_atom`` given with other values are
        accepted, for an :meth:`ingest` with ``force=True``, which makes them the index's
        (a source it does not make again is made again with them when next ingested), or
        a :meth:`plan`; any other ingest or enrichment refuses them.
        """

        def make(store: Store, resolved: Settings, embedder: Embedder,
                 origins: dict[str, str]) -> Isotope:
            return cls(store, resolved, embedder, llm=llm, answer_llm=answer_llm,
                       origins=origins)

        iso, remade = open_index(make, path, settings, create=create, store=store,
                                 embedder=embedder, remake=remake)
        iso._runs.remade = remade
        return iso

    def __enter__(self) -> Isotope:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._models.close()
        self.embedder.close()
        self.store.close()
        if self.cache is not None:
            self.cache.close()

    # -- models ------------------------------------------------------------------------
    def llm(self, model: str | None = None) -> CachedLLM:
        """The language model named ``model`` (default: the question model), loaded once,
        behind the reply cache."""
        return self._models.llm(model)

    def answer_llm(self) -> CachedLLM:
        """The answer model (the one given to :meth:`open` as ``answer_llm``, else the one
        the ``answer_model`` setting names)."""
        return self._models.answer_llm()

    def atomizer(self) -> Atomizer:
        """The atomizer the ``atomizer`` setting names."""
        return self._runs.atomizer()

    def _conditions(self, principal: PrincipalGiven) -> list[Any]:
        """The search conditions of ``principal`` (none for the owner or an
        administrator)."""
        return access.conditions(principal_of(principal), control=self.access_control)

    @property
    def _max_bytes(self) -> int:
        return int(self.settings.max_file_mb * 1e6)

    def __repr__(self) -> str:
        project = f", project={self.project!r}" if self.project else ""
        return f"Isotope(index={stores.describe(self.settings.index)!r}{project})"

    @property
    def project(self) -> str | None:
        """The project's name when the index is a project's (its own folder, or the
        location the project points at), else None."""
        return projects.of_index(self.settings.project or self.store.get_meta("project"),
                                 self.settings)

    # -- ingest ------------------------------------------------------------------------
    def ingest(self, paths: str | Path | Iterable[str | Path], *,
               include: Sequence[str] | None = None, exclude: Sequence[str] | None = None,
               progress: ProgressCallback | None = None, force: bool = False,
               questions: Questions = "now", confine: Sequence[Path] | None = None,
               allow: Sequence[str] | None = None) -> IngestReport:
        """Ingest files and directories. Files that cannot be read are listed in the
        report's ``errors``; the rest are ingested. An unchanged file is skipped (with
        ``force``, it is ingested again, reusing nothing stored); a changed one replaces
        its old chunks, atoms and questions in one transaction.

        Each source is searchable (by its chunks and atoms) as soon as it is stored; its
        questions are generated after all of them, as enrichment (``questions="now"``), or
        left for :meth:`enrich` (``"later"``: no language model is called).

        A source is named by the path it was reached by, made absolute, with symbolic
        links kept (see :mod:`isotope.files`). With ``confine`` (folders), a file or
        folder whose links lead out of them is not read (it is listed in ``errors``).

        ``allow``: the access list of every source (``public``, ``user:NAME``,
        ``group:NAME``; see :mod:`isotope.access`), unchanged ones included; without it,
        a source gets the list of the ``.isotope-access`` rules file of its folder, or
        keeps the one it had."""
        return self._runs.ingest(paths, force=force, allow=allow, include=include,
                                 exclude=exclude, progress=progress, questions=questions,
                                 confine=confine)

    def enrich(self, *, progress: ProgressCallback | None = None,
               sources: Sequence[str] | None = None) -> IngestReport:
        """Generate the questions of every chunk still waiting for them (ingested with
        ``questions="later"``, or whose model calls failed), or of those of ``sources``.
        Resumable: interrupted, the next call goes on from the chunks still waiting;
        answers the cache holds cost nothing. Searches meanwhile use the questions that
        exist."""
        return self._runs.enrich(progress=progress, sources=sources)

    def sync(self, paths: str | Path | Iterable[str | Path], *,
             include: Sequence[str] | None = None, exclude: Sequence[str] | None = None,
             progress: ProgressCallback | None = None, force: bool = False,
             questions: Questions = "now", confine: Sequence[Path] | None = None,
             allow: Sequence[str] | None = None) -> IngestReport:
        """Make the index match ``paths``: ingest new and changed files (as
        :meth:`ingest`), and remove the sources below these paths whose files were
        deleted (``report.removed``). A path that does not exist is an error and removes
        nothing. With ``sync_strategy="none"`` nothing is removed.

        A sync that would remove all of a root's sources, or most of them
        (:data:`isotope.ingest.maintenance.SYNC_MAX_REMOVED`), raises :class:`SyncRefused`
        before changing anything: an unmounted or emptied folder looks like that.
        ``force=True`` removes them. ``confine`` and ``allow``: as for :meth:`ingest`."""
        return self._runs.sync(paths, force=force, allow=allow, include=include,
                               exclude=exclude, progress=progress, questions=questions,
                               confine=confine)

    def ingest_chunks(self, chunks: Iterable[Chunk | str], *, source: str | None = None,
                      progress: ProgressCallback | None = None,
                      questions: Questions = "now",
                      allow: Sequence[str] | None = None) -> IngestReport:
        """Ingest ready-made chunks (strings, or :class:`Chunk` objects with a ``source``).

        Chunks without a source of their own belong to ``source``; each source is stored
        as a whole, replacing what that source held before. Without ``source``, they form
        a new source named ``chunks-`` and a hash of their texts, so every batch is kept
        (and ingesting the same batch again changes nothing); pass ``source=`` to replace
        a batch later. ``allow``: the sources' access list (as for :meth:`ingest`)."""
        return self._runs.chunks(chunks, source=source, allow=allow, progress=progress,
                                 questions=questions)

    def plan(self, paths: str | Path | Iterable[str | Path], *,
             include: Sequence[str] | None = None,
             exclude: Sequence[str] | None = None) -> IngestPlan:
        """What :meth:`ingest` would do, without calling a model: chunks, atoms, model
        calls needed and how many the cache covers, estimated tokens."""
        return self._runs.plan(paths, include=include, exclude=exclude)

    async def aingest_chunks(self, chunks: Iterable[Chunk | str], *,
                             source: str | None = None,
                             progress: ProgressCallback | None = None,
                             questions: Questions = "now",
                             allow: Sequence[str] | None = None) -> IngestReport:
        """:meth:`ingest_chunks` without blocking the event loop (runs in a worker thread)."""
        items = list(chunks)
        return await asyncio.to_thread(self.ingest_chunks, items, source=source,
                                       progress=progress, questions=questions, allow=allow)

    # -- query -------------------------------------------------------------------------
    def search(self, query: str, k: int | None = None, *, mode: str | None = None,
               transform: bool | None = None, filters: dict[str, Any] | None = None,
               weights: dict[str, float] | None = None, for_answer: bool = False,
               principal: PrincipalGiven = None, explain: bool = False) -> QueryResponse:
        """The ``k`` chunks (default: the ``top_k`` setting) whose generated questions best
        match ``query``, of the sources ``principal`` may see (a condition of every
        signal's search: it gets ``k`` results where ``k`` are visible, and nothing it may
        not see shapes a score; see :mod:`isotope.access`). ``filters`` only narrow that
        (:mod:`isotope.search.filters`); ``weights``: hybrid's signal weights for this
        search, over the ``weights`` setting; ``transform`` (default: the
        ``query_transform`` setting): a query that is not a question is first rewritten by
        the answer model into one to three questions, all searched and fused; ``explain``:
        each result says how its score was made (per signal its rank, raw and standardised
        score, weight and contribution; the questions and atoms that matched);
        ``for_answer``: a search an answer is made from (``k``: ``answer_k``; with a graph,
        the graph weighed in and ``answer_bridges`` more passages, each saying by which
        paths the graph reached it: :class:`~isotope.search.request.SearchRequest`)."""
        request = search_request(self.settings, self._fitted, query, k, mode=mode,
                                 transform=transform, filters=filters, weights=weights,
                                 for_answer=for_answer, explain=explain,
                                 principal=principal, control=self.access_control)
        return self._search().run(request)

    def _search(self) -> Search:
        """The index's search, as its settings and attributes are now."""
        return Search(self.store, self.embedder, self.settings, self._counts,
                      log=bool(self.query_log or self.settings.audit_log),
                      max_bytes=self._max_bytes, access_control=self.access_control,
                      model=self.answer_llm, prompts=self.prompts)

    def _answering(self) -> Answering:
        """The index's answer step."""
        return Answering(self.store, self.settings, self.answer_llm, self.prompts)

    def log_by_default(self) -> None:
        """Log searches unless the ``query_log`` setting says otherwise (what a server,
        ``isotope mcp`` and ``isotope query`` do) and the index can be written."""
        if self.settings.query_log is None and not self.store.read_only:
            self.query_log = True

    def audit_log(self, limit: int = 100) -> list[LoggedQuery]:
        """The last ``limit`` searches of the query log (the ``query_log`` or
        ``audit_log`` setting), newest first: the id, when, who, the query, the mode, the
        chunks returned with their scores, the filters, the suggested action and the
        latency."""
        return self.store.logged_queries(valid_k(limit))

    def feedback(self, query_id: str, chunk_id: str, useful: bool = True, *,
                 principal: PrincipalGiven = None, read_only: bool = False
                 ) -> learning.FeedbackResult:
        """Mark result ``chunk_id`` of the logged search ``query_id`` (its
        ``QueryResponse.query_id``) useful or not. A useful mark teaches the chunk the
        query as a question (the ``learn`` setting: ``auto``, ``review`` or ``off``); a
        not-useful one keeps the chunk from ranking first again for that query or a very
        close one. Only whoever searched may mark it (``principal``); ``read_only``: it
        comes with a key that may only read (a server's), so what it teaches waits for
        review unless the ``learn`` setting says otherwise. See :mod:`isotope.search.learning`."""
        with self.store.writer(self.settings.lock_wait):
            principal = principal_of(principal)
            return learning.feedback(
                self.store, self.embedder, query_id, chunk_id, bool(useful), principal,
                conditions=self._conditions(principal), learn_setting=self.settings.learn,
                access_control=self.access_control, read_only=read_only)

    def pending_questions(self) -> list[Feedback]:
        """Useful marks whose queries wait for review (the ``learn`` setting
        ``review``), newest first."""
        return learning.pending(self.store)

    def review_questions(self, marks: Sequence[str], *, approve: bool = True
                         ) -> list[learning.FeedbackResult]:
        """Learn (``approve``) or reject the pending marks named ``QUERY_ID:CHUNK_ID``."""
        with self.store.writer(self.settings.lock_wait):
            return learning.review(self.store, self.embedder, marks, approve)

    def add_question(self, source: str | Path, text: str, *, chunk: int | None = None,
                     chunk_id: str | None = None) -> str:
        """Add a question by hand (origin ``manual``) to a chunk of ``source`` (its
        number ``chunk``, 0 the first) or to the chunk ``chunk_id``: embedded and
        searchable at once, kept through re-ingest, enrich, copy and changes of its
        chunk. Returns its id. A question the chunk has, an empty one, or one with
        control characters is an :class:`InvalidArgument`."""
        with self.store.writer(self.settings.lock_wait):
            found = learning.chunk_at(self.store, lambda: self._stored_uri(source), chunk,
                                      chunk_id)
            return learning.add_question(self.store, self.embedder, found, text)

    def edit_question(self, question_id: str, text: str) -> str:
        """Change a question's text (it becomes ``manual``); returns its new id."""
        with self.store.writer(self.settings.lock_wait):
            return learning.edit_question(self.store, self.embedder, question_id, text)

    def disable_question(self, question_id: str) -> None:
        """Take a question out of every search; it stays among the chunk's dropped
        questions (``disabled by hand``) until :meth:`enable_question`."""
        with self.store.writer(self.settings.lock_wait):
            if not self.store.disable_question(question_id):
                raise SourceNotFound(f"no question {question_id!r} in the index")

    def enable_question(self, question_id: str) -> None:
        """Search a question disabled by hand again."""
        found = self.store.disabled_question(question_id)
        if found is None:
            raise SourceNotFound(f"no question {question_id!r} disabled by hand")
        vector = self.embedder.embed([found[0].text])
        with self.store.writer(self.settings.lock_wait):
            self.store.enable_question(question_id, vector)

    def orphaned_questions(self) -> list[dict[str, Any]]:
        """Manual and learned questions whose chunk changed and no new chunk covers its
        text: ``source``, ``chunk_text``, ``text``, ``origin``, ``at`` (kept, never
        searched)."""
        return self.store.orphaned_questions()

    def fit_weights(self, *, min_marks: int = weight_fit.MIN_MARKS,
                    allow_zero: bool = False,
                    progress: Callable[[int, int], None] | None = None
                    ) -> weight_fit.WeightFit:
        """Fit ``hybrid``'s signal weights on the useful marks that were learned or
        approved (at least ``min_marks``; no user's beyond a quarter) so that the marked
        chunks come first for their queries, and keep them when they place at least 1%
        of the marks better than the weights in use (``adopted``). A weight goes to 0
        only with ``allow_zero``. The ``weights`` setting still wins, signal by signal.
        See :mod:`isotope.search.weights`."""
        return self._fitted.fit_weights(self.embedder, min_marks=min_marks,
                                        allow_zero=allow_zero, progress=progress)

    def fitted_weights(self) -> weight_fit.WeightFit | None:
        """The last adopted fit of the signal weights (:meth:`fit_weights`), if any."""
        return weight_fit.fitted(self.store)

    def reset_weights(self) -> bool:
        """Forget the fitted weights: ``hybrid`` goes back to the defaults and the
        ``weights`` setting. False: there were none."""
        return self._fitted.reset_weights()

    def fit_adapter(self, *, min_questions: int = query_adapter.MIN_QUESTIONS
                    ) -> query_adapter.AdapterFit:
        """Fit the index's query adapter on its kept questions and the queries users
        confirmed (no user's beyond a quarter), a tenth of the chunks' questions held out,
        and keep it: searches apply it (with the ``query_adapter`` setting on) only when
        it beats none on those held-out questions (``used``). Refuses fewer than
        ``min_questions`` kept questions. See :mod:`isotope.search.adapter`."""
        return self._fitted.fit_adapter(self.embedder, min_questions=min_questions)

    def adapter_fit(self) -> query_adapter.AdapterFit | None:
        """The last fit of the query adapter (:meth:`fit_adapter`), used or not, if any."""
        return query_adapter.fitted(self.store)

    def _after_questions(self, report: IngestReport) -> None:
        """After an ingest or enrichment (inside its write): the marks that waited for
        their chunk's questions learned, the query adapter fitted again if due."""
        learning.learn_waiting(self.store, self.embedder, report)
        self._fitted.refit_adapter(self.embedder)

    def log_summary(self, days: float | None = None, top: int = 10) -> learning.LogSummary:
        """What the query log says: the most frequent queries, those probably not found
        (``refine_query``) or marked not useful, feedback per source, latency
        percentiles."""
        return learning.summary(self.store, days, valid_k(top))

    def ask(self, query: str, k: int | None = None, *, mode: str | None = None,
            transform: bool | None = None,
            filters: dict[str, Any] | None = None, principal: PrincipalGiven = None
            ) -> QueryResponse:
        """Search, then have the answer model answer from the chunks found, citing them.
        Stale chunks (file references whose file changed) are not given to the model.
        ``principal``: as for :meth:`search` (the answer is made only from what it may
        see)."""
        request = search_request(self.settings, self._fitted, query, k, mode=mode,
                                 transform=transform, filters=filters, for_answer=True,
                                 principal=principal, control=self.access_control)
        return self._answering().run(self._search().run(request), request.conditions)

    def answer(self, response: QueryResponse, *,
               on_token: Callable[[str], None] | None = None,
               cancel: threading.Event | None = None,
               principal: PrincipalGiven = None) -> QueryResponse:
        """Have the answer model answer ``response``'s query from its results (a search
        already made, e.g. one whose results were already shown), citing them; returns
        ``response`` with ``answer``, ``answer_kind`` and ``citations`` set.

        The model's reply is checked against the passages (:func:`isotope.search.answer.judge`,
        by the ``answer_strictness`` setting): ``answer_kind`` is ``generated`` (the
        reply, citing the passages that support it), ``quoted`` (the statement of the
        first result that matched best, when the search is sure of it and the reply is
        not supported) or ``declined``. ``on_token`` is called with each piece of the
        model's reply as it is written (the answer finally set may differ); setting
        ``cancel`` stops the model at its next piece and leaves ``answer`` None. With
        ``principal``, results of chunks it may not see (or that are gone) are dropped
        first (:mod:`isotope.search.answering`)."""
        return self._answering().run(response, self._conditions(principal),
                                     on_token=on_token, cancel=cancel)

    def as_retriever(self, k: int | None = None, *, mode: str | None = None,
                     filters: dict[str, Any] | None = None, principal: PrincipalGiven = None,
                     ) -> Callable[[str], list[SearchResult]]:
        """A plain callable ``query -> list[SearchResult]`` for agent frameworks (searching
        as ``principal``, fixed when it is made)."""
        principal = principal_of(principal)
        return lambda query: self.search(query, k, mode=mode, filters=filters,
                                         principal=principal).results

    # -- bookkeeping -------------------------------------------------------------------
    def _stored_uri(self, source: str | Path, principal: PrincipalGiven = None) -> str:
        """The stored name of a source given by its path or identifier (one ``principal``
        may not see is not there for it)."""
        uri = str(source)
        found = self.store.get_source(uri)
        if found is None:
            uri = str(source_path(source))
            found = self.store.get_source(uri)
        principal = principal_of(principal)
        if found is None or (principal is not None and not principal.sees(
                found.access, control=self.access_control)):
            raise SourceNotFound(
                f"no source {str(source)!r} in the index; `isotope list` shows what is there")
        return uri

    def questions(self, source: str | Path | None = None, *, chunk: int | None = None,
                  chunk_id: str | None = None, sample: int | None = None,
                  seed: int | None = None, principal: PrincipalGiven = None
                  ) -> list[GeneratedQuestion]:
        """The generated questions with their atoms, kept and dropped (each dropped one
        with why): of a ``source`` (its path or identifier; only its chunk number
        ``chunk`` if given), of one chunk by ``chunk_id``, or ``sample`` drawn at random
        across the index (``seed`` repeats a draw); of what ``principal`` may see only
        (a source or chunk it may not see is not found)."""
        conditions = self._conditions(principal)
        shown = self._shown_questions(principal)
        if sample is not None:
            if sample < 1:
                raise InvalidArgument(f"sample must be at least 1, got {sample}")
            return shown(self.store.generated_questions(sample=sample, seed=seed,
                                                        conditions=conditions))
        if chunk_id is not None:
            stores.visible_chunk(self.store, chunk_id, conditions)
            return shown(self.store.generated_questions(chunk_id=chunk_id))
        if source is None:
            raise InvalidArgument("give a source, a chunk id or a sample size")
        found = self.store.generated_questions(source=self._stored_uri(source, principal))
        if chunk is not None:
            found = [q for q in found if q.chunk_index == chunk]
        return shown(found)

    def _shown_questions(self, principal: PrincipalGiven
                         ) -> Callable[[list[GeneratedQuestion]], list[GeneratedQuestion]]:
        """What of a chunk's questions ``principal`` is shown: learned ones (users'
        queries) only to the owner and administrators, unless ``show_learned``."""
        if access.entitled("learned_questions", principal_of(principal)) or \
                self.settings.show_learned:
            return lambda found: found
        return lambda found: [q for q in found if q.origin != "user"]

    def has_source(self, source: str | Path, *, principal: PrincipalGiven = None) -> bool:
        """Whether ``source`` (its path or identifier) is stored (and ``principal`` may
        see it)."""
        try:
            self._stored_uri(source, principal)
        except SourceNotFound:
            return False
        return True

    def chunk_questions(self, chunk_id: str, *, principal: PrincipalGiven = None) -> ChunkQuestions:
        """A chunk by id with every question generated for it, kept and dropped (each
        dropped one with why), and whether it still waits for them;
        :class:`SourceNotFound` if there is no such chunk (or ``principal`` may not see
        it)."""
        stores.visible_chunk(self.store, chunk_id, self._conditions(principal))
        chunk = self.store.get_chunks([chunk_id]).get(chunk_id)
        if chunk is None:
            raise SourceNotFound(f"no chunk {chunk_id!r} in the index")
        return ChunkQuestions(chunk=chunk,
                              waiting=bool(self.store.without_questions([chunk_id])),
                              questions=self._shown_questions(principal)(
                                  self.store.generated_questions(chunk_id=chunk_id)))

    def delete(self, source: str | Path, *, members: bool = True,
               principal: PrincipalGiven = None) -> list[str]:
        """Remove a source (its path or identifier) and everything derived from it; a
        container file (a mailbox) removes all its members, unless ``members`` is False:
        then naming a container is an :class:`InvalidArgument` (a member's name cut at
        its ``#`` must not remove the whole mailbox). Returns the sources removed.
        ``principal``: a source it may not see is not found (nor are such members)."""
        principal = principal_of(principal)
        with self.store.writer(self.settings.lock_wait):
            try:
                uri = self._stored_uri(source, principal)
            except SourceNotFound:  # a mailbox: its messages (and theirs)
                held = maintenance.members_of(self.store)
                uris = held.get(str(source), set()) | held.get(
                    str(source_path(source)), set())
                if principal is not None:
                    uris = {u for u in uris if self.has_source(u, principal=principal)}
                if not uris:
                    raise
                if not members:
                    raise InvalidArgument(
                        f"{source} is a container holding {len(uris)} sources (a mailbox's "
                        "messages); delete them all with members=true (HTTP: "
                        "?members=true), or name one of them (in a URL, '#' is %23)"
                    ) from None
                members_map = held
            else:  # only an email with attachments holds others (read all only then)
                stored = self.store.get_source(uri)
                members_map = (maintenance.members_of(self.store)
                               if stored is not None and stored.metadata.get("attachments")
                               else {})
                uris = {uri}
            # a member it may not see would go with its container
            if not access.entitled("hidden_members", principal):
                inside = _inside(uris, members_map)
                if any(not self.has_source(u, principal=principal) for u in inside):
                    raise InvalidArgument(f"{source} holds sources you may not see; an "
                                          "administrator can delete it")
            gone: list[str] = []
            for each in sorted(uris):
                gone += maintenance.drop(self.store, each, members_map)
            return gone

    def sources(self, *, check_files: bool = True,
                principal: PrincipalGiven = None) -> list[SourceInfo]:
        """The sources (those ``principal`` may see), each with its ``state`` when
        ``check_files``: ``current``, ``changed`` (the file on disk differs from what was
        ingested), ``missing`` (the file is gone), ``incomplete`` (some atoms still lack
        questions), or empty for sources that are not files."""
        conditions = self._conditions(principal)
        infos = self.store.sources(conditions)
        if conditions:
            hide_members(self.store, principal_of(principal),
                         [(i.source.uri, i.source.metadata) for i in infos],
                         control=self.access_control)
        if check_files:
            for info in infos:
                info.state = source_state(info.source, self._max_bytes)
        return infos

    def check(self, *, repair: bool = False) -> list[str]:
        """Integrity problems of the index (empty: consistent); each names the sources it
        touches. With ``repair``, :meth:`repair` runs first (use it directly to learn
        which sources it ingested again or removed)."""
        if repair:
            return self.repair().problems
        return self.store.check()

    def repair(self) -> RepairReport:
        """Make a damaged index whole, under the writer lock: rebuild the keyword indexes
        and the vector indexes (embedding again the items whose vectors were lost or
        damaged), drop rows no source owns, ingest again the sources that lost
        rows or hold damaged vectors (their files, as they are now), and remove those that
        cannot be ingested again (their file is gone, or they were ready-made chunks:
        ``report.removed`` names them, to ingest again yourself); a damaged source whose
        folder is gone (unmounted?) is left alone (``report.kept``). Returns what was done
        and the problems left. A database file whose SQLite structures are damaged is not
        touched at all: it cannot be repaired in place."""
        return self._runs.repair()

    def compact(self) -> dict[str, str]:
        """Fold the vectors written since the vector indexes were last saved into new
        ones, of the implementation the ``vector_index`` setting wants, and give freed
        space back to the file system; returns each kind's vector index (``exact`` or
        ``hnsw``). Writes do this on their own once a kind has gathered enough changes;
        searches never wait for it."""
        with self.store.writer(self.settings.lock_wait):
            done = self.store.compact()
            self._fitted.refit_adapter(self.embedder)
            return done

    def counts(self, *, principal: PrincipalGiven = None) -> dict[str, int]:
        """What the index holds (sources, chunks, atoms, questions, and the chunks and
        sources still waiting for their questions): :meth:`status` without the walk of
        the disk; of what ``principal`` may see only."""
        return self.store.counts(self._conditions(principal))

    # -- the knowledge graph -----------------------------------------------------------
    def entities(self, top: int = 20, *, match: str | None = None, chunk: str | None = None,
                 principal: PrincipalGiven = None) -> list[GraphEntity]:
        """The entities named in the atoms (setting ``graph``), most chunks first, of
        what ``principal`` may see only; ``match``: only those whose name, type or a
        statement naming them holds it (case ignored); ``chunk``: only those that chunk
        names (none when ``principal`` may not see it)."""
        if top < 1:
            raise InvalidArgument(f"top must be at least 1, not {top}")
        return self.store.entities(self._conditions(principal), top=top, match=match,
                                   chunk=chunk)

    def graph(self, entity: str, *, hops: int = 1, principal: PrincipalGiven = None
              ) -> Neighbourhood:
        """The entity ``entity`` names (by any of its names or aliases) and what is up to
        ``hops`` relations away (1 to 3), read from what ``principal`` may see.
        :class:`SourceNotFound` when no chunk it may see names that entity."""
        return reading.neighbourhood(self.store, entity, self._conditions(principal),
                                     hops=hops)

    def closest_entities(self, name: str, top: int = 5, *,
                         principal: PrincipalGiven = None) -> list[str]:
        """The names of up to ``top`` entities of the graph closest to ``name`` (one of
        its words, a typo of it), closest first: what "did you mean" offers when no
        entity is named ``name``. Only entities ``principal`` may see, by the names it
        may see (read under its access conditions: one it may not see is never
        offered)."""
        if top < 1:
            raise InvalidArgument(f"top must be at least 1, not {top}")
        return self.store.closest_entities(name, self._conditions(principal), top=top)

    def memory_graph(self, *, query: str | None = None, names: Sequence[str] | None = None,
                     entity: str | None = None, hops: int = 1,
                     principal: PrincipalGiven = None) -> memory.MemoryGraph:
        """The graph in the MCP Memory server's shapes (what its ``read_graph``,
        ``search_nodes`` with ``query`` or ``open_nodes`` with ``names`` reply; to
        ``open_nodes`` isotope adds ``not_found``: each name that names no entity, with
        the closest names), of what ``principal`` may see. With ``entity``: its
        neighbourhood up to ``hops`` away, as :meth:`graph` walks it, in those shapes
        (:func:`isotope.knowledge.memory.walk`: ``center``, ``hops``, ``entities``,
        ``relations``, ``truncated``)."""
        conditions = self._conditions(principal)
        if entity is not None:
            return memory.walk(self.store, self.graph(entity, hops=hops, principal=principal),
                               conditions)
        if names is not None:
            return memory.open_nodes(self.store, names, conditions)
        if query is not None:
            return memory.search_nodes(self.store, query, conditions)
        return memory.read_graph(self.store, conditions)

    # -- access ------------------------------------------------------------------------
    def set_access(self, pattern: str | Path, allow: Sequence[str] | None) -> list[str]:
        """Give every source matching ``pattern`` (a path, an identifier, or a glob as
        the ``source`` filter takes), and the sources inside them (an email's attachments,
        a mailbox's messages), the access list ``allow`` (``public``, ``user:NAME``,
        ``group:NAME``; None removes the list), at once for every search, without
        ingesting anything again. Returns the sources changed; :class:`SourceNotFound` if
        none matches."""
        return maintenance.set_access(self.store, pattern, allow,
                                      lock_wait=self.settings.lock_wait)

    def get_access(self, source: str | Path) -> list[str] | None:
        """The access list of ``source`` (its path or identifier; None: it has none)."""
        stored = self.store.get_source(self._stored_uri(source))
        return stored.access if stored is not None else None

    def disk_size(self) -> int | None:
        """Bytes the index takes on disk (None where the engine cannot tell, as on a
        database server)."""
        return self.store.disk_size()

    @staticmethod
    def saved_settings(path: str | Path) -> dict[str, Any] | None:
        """The settings saved in the index at ``path`` when it was made (those that
        shape it: models, chunking, questions), or None where there is no index yet.
        Reads only the index's metadata: no model is loaded."""
        return meta.saved_settings(path)

    @staticmethod
    def fixed_settings(path: str | Path) -> dict[str, Any]:
        """The values of the settings the index at ``path`` fixed when it was made
        (:data:`isotope.settings.FIXED`; none where there is no index yet). Reads only
        the index's metadata: no model is loaded."""
        return meta.fixed_settings(path)

    def status(self, *, principal: PrincipalGiven = None) -> IndexStatus:
        """The index's description and counts (of what ``principal`` may see)."""
        return IndexStatus(
            index=stores.describe(self.settings.index),
            project=self.project,
            schema_version=int(self.store.get_meta("schema_version") or SCHEMA_VERSION),
            isotope_version=str(self.store.get_meta("isotope_version") or __version__),
            created_at=self.store.get_meta("created_at"),
            counts=self.counts(principal=principal),
            disk_bytes=self.disk_size(),
            embedding=self.store.get_meta("embedding") or {},
            models={
                "embedding": self.settings.embedding_model,
                "questions": self.settings.question_model,
                "answers": self.settings.answer_model,
                "atomizer": self.settings.atomizer
                + (f" ({self.settings.atomizer_model})" if self.settings.atomizer == "llm" else ""),
            },
            prompt_versions=prompt_specs.versions(self.prompts),
            settings=shown(self.settings),
            vector_backend=self.vector_backend,
            keyword_engine=self.store.keyword_engine,
            graph=self.settings.graph,
            replicas=self.store.replicas(),
            query_adapter=query_adapter.status(self.settings.query_adapter,
                                               self.adapter_fit()),
        )

