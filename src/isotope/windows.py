"""Sources waiting for their questions, generated together in windows of atoms, so that
many small sources keep the language model as busy as one large one."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from isotope.assembly import Work
from isotope.discovery import FileError
from isotope.errors import ProviderError
from isotope.reports import IngestReport

log = logging.getLogger(__name__)


def windows(sizes: Sequence[int], window: int) -> list[tuple[int, int]]:
    """``(start, end)`` slices of consecutive items holding about ``window`` atoms each
    (``sizes`` is the atoms of each item); every slice holds at least one item."""
    slices: list[tuple[int, int]] = []
    start = 0
    while start < len(sizes):
        end, size = start, 0
        while end < len(sizes) and (size < window or end == start):
            size += sizes[end]
            end += 1
        slices.append((start, end))
        start = end
    return slices


class GenerationQueue:
    """Sources waiting for questions: ``generate`` runs once they hold a window's worth of
    atoms, then ``store`` takes each source in turn. When a window fails, its sources are
    generated again one at a time, so that only the source that fails is left out."""

    def __init__(self, report: IngestReport, window: Callable[[], int],
                 generate: Callable[[list[Work], int], None],
                 store: Callable[[Work], None]) -> None:
        self.report = report
        self._window, self.window = window, 0  # known once a source needs questions
        self._generate, self._store = generate, store
        self.works: list[Work] = []

    def add(self, work: Work | None) -> None:
        if work is None:
            return
        if not self.window:
            self.window = self._window()
        self.works.append(work)
        if sum(len(a) for w in self.works for a in w.atoms) >= self.window:
            self.flush()

    def flush(self) -> None:
        works, self.works = self.works, []
        if not works:
            return
        try:
            self._generate(works, self.window)
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
            self._store(work)

    def _reset(self, work: Work) -> None:
        """Forget what a failed window generated for ``work`` (it is generated again)."""
        for per_atom in work.questions.values():
            self.report.atoms -= len(per_atom)
            self.report.questions_generated -= sum(len(q) for q in per_atom)
        uri = work.source.uri
        self.report.failed_atoms = [f for f in self.report.failed_atoms if f.path != uri]
        work.questions, work.failed, work.failed_chunks = {}, 0, set()
