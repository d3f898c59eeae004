"""The ingest runs of an open index: what :meth:`isotope.Isotope.ingest`, ``sync``,
``ingest_chunks``, ``enrich``, ``plan`` and ``repair`` run. Each write runs under the
writer lock, through one :class:`~isotope.ingest.pipeline.Pipeline` made with the
index's models, prompts and access lists, and is followed (inside the write) by what
waits for new questions (``after``: the marks that waited for their chunk's questions
learned, the query adapter fitted again if due).

Settings the index fixed, given otherwise with ``remake`` (:meth:`isotope.Isotope.open`),
are kept in :attr:`Runs.remade` until a forced ingest makes them the index's (saved
under the writer lock before it stores anything); a plan reads them; any other ingest or
enrichment refuses them."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from isotope.access import Assigner, access_list, rules_for
from isotope.embedders import Embedder
from isotope.errors import FixedSetting
from isotope.ingest import maintenance, planning
from isotope.ingest.atomizers import Atomizer, LLMAtomizer, SentenceAtomizer
from isotope.ingest.maintenance import RepairReport
from isotope.ingest.pipeline import IngestPlan, IngestReport, Pipeline
from isotope.models import Chunk, content_hash
from isotope.prompts import PromptSpec
from isotope.providers import LLM
from isotope.stores import Store

if TYPE_CHECKING:
    from isotope.settings import Settings

Paths = str | Path | Iterable[str | Path]


class Runs:
    """The ingest runs over ``store``, under ``settings``, embedding with ``embedder``;
    ``llm``: the language model a setting names, loaded once; ``after``: run after each
    write's questions (see the module's text)."""

    def __init__(self, store: Store, settings: Settings, embedder: Embedder,
                 prompts: dict[str, PromptSpec], llm: Callable[[str], LLM],
                 after: Callable[[IngestReport], None]) -> None:
        self.store, self.settings, self.embedder = store, settings, embedder
        self.prompts, self.llm, self.after = prompts, llm, after
        self.remade: dict[str, Any] = {}
        """The index-fixed settings given otherwise with ``remake``, until a forced
        ingest makes them the index's."""

    def atomizer(self) -> Atomizer:
        """The atomizer the ``atomizer`` setting names."""
        if self.settings.atomizer == "llm":
            return LLMAtomizer(
                self.llm(self.settings.atomizer_model), min_words=self.settings.min_atom_words,
                prompt=self.prompts["atomizer"])
        return SentenceAtomizer(min_words=self.settings.min_atom_words)

    def pipeline(self, *, force: bool = False, allow: Sequence[str] | None = None,
                 remaking: bool = False, plan_only: bool = False) -> Pipeline:
        """The ingest pipeline. Settings given otherwise with ``remake`` are saved as the
        index's by a forced ingest (``remaking``: under the writer lock, before it stores
        anything), read by a plan (``plan_only``), refused otherwise."""
        if self.remade and not plan_only:
            name, value = next(iter(self.remade.items()))
            if not remaking:
                raise FixedSetting(name, f"{name} = {json.dumps(value)} is not the index's "
                                   "(opened with remake=True): only an ingest with "
                                   "force=True makes it so, making the sources again")
            self.store.set_meta("settings", {**self.store.get_meta("settings"),
                                             **self.remade})
            self.remade = {}
        return Pipeline(self.settings, self.store, self.embedder, self.atomizer(),
                        lambda: self.llm(self.settings.question_model), force=force,
                        prompts=self.prompts, assign=self._assigner(allow))

    def _assigner(self, allow: Sequence[str] | None) -> Assigner:
        return Assigner(None if allow is None else tuple(access_list(allow)),
                        self.settings.email_access)

    def ingest(self, paths: Paths, *, force: bool, allow: Sequence[str] | None,
               **how: Any) -> IngestReport:
        """:meth:`isotope.Isotope.ingest`: ``how`` its other arguments."""
        paths = _rules_read([paths] if isinstance(paths, str | Path) else paths)
        with self.store.writer(self.settings.lock_wait):
            report = self.pipeline(force=force, allow=allow, remaking=force).ingest_paths(
                paths, **how)
            self.after(report)
            return report

    def sync(self, paths: Paths, *, force: bool, allow: Sequence[str] | None,
             **how: Any) -> IngestReport:
        """:meth:`isotope.Isotope.sync`: ``how`` its other arguments."""
        paths = _rules_read([paths] if isinstance(paths, str | Path) else paths)
        with self.store.writer(self.settings.lock_wait):
            gone = ([] if self.settings.sync_strategy != "source_aware" else
                    maintenance.deleted_sources(self.store, paths, force=force))
            report = self.pipeline(allow=allow).ingest_paths(paths, **how)
            self.after(report)
            for uri in gone:
                self.store.delete_source(uri)
                report.removed.append(uri)
        return report

    def chunks(self, chunks: Iterable[Chunk | str], *, source: str | None,
               allow: Sequence[str] | None, **how: Any) -> IngestReport:
        """:meth:`isotope.Isotope.ingest_chunks`: ``how`` its other arguments."""
        items = [Chunk(text=c, source="") if isinstance(c, str) else c for c in chunks]
        if source is None:
            source = "chunks-" + content_hash("\x1f".join(c.text for c in items
                                                          if not c.source))[:16]
        with self.store.writer(self.settings.lock_wait):
            report = self.pipeline(allow=allow).ingest_chunks(items, source=source, **how)
            self.after(report)
            return report

    def enrich(self, **how: Any) -> IngestReport:
        """:meth:`isotope.Isotope.enrich`: ``how`` its arguments."""
        with self.store.writer(self.settings.lock_wait):
            report = self.pipeline().enrich(**how)
            self.after(report)
            return report

    def plan(self, paths: Paths, **how: Any) -> IngestPlan:
        """:meth:`isotope.Isotope.plan`: ``how`` its other arguments."""
        if isinstance(paths, str | Path):
            paths = [paths]
        return planning.plan_paths(self.pipeline(plan_only=True), paths, **how)

    def repair(self) -> RepairReport:
        """:meth:`isotope.Isotope.repair`."""
        with self.store.writer(self.settings.lock_wait):
            report = maintenance.repair(
                self.store, lambda files: self.pipeline(force=True).ingest_files(files),
                self.embedder)
        if not report.problems:  # (a damaged database file was not touched)
            report.problems = self.store.check()
        return report


def _rules_read(paths: Iterable[str | Path]) -> list[str | Path]:
    """``paths``, once the access rules file of each (where there is one) is read: a bad
    one is an error before anything is ingested."""
    paths = list(paths)
    for path in paths:
        rules_for(Path(path).expanduser())
    return paths
