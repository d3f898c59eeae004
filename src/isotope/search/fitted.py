"""What an open index's searches read of its fits: hybrid's signal weights fitted on
users' marks (:mod:`isotope.search.weights`) and the query adapter
(:mod:`isotope.search.adapter`). Each is read from the store again at most every
:data:`FITTED_FOR` seconds (a fit by another process reaches a running server within
that; while the store cannot be read, as a PostgreSQL primary away, the last known is
used); a fit made, refitted or forgotten here is used by the next search at once."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from isotope.embedders import Embedder
from isotope.errors import InvalidIndex, StoreError
from isotope.search import adapter as query_adapter
from isotope.search import weights as weight_fit
from isotope.stores import Store

if TYPE_CHECKING:
    from isotope.settings import Settings

FITTED_FOR = 10.0
"""Seconds an open index keeps the fitted signal weights before reading them again."""

log = logging.getLogger(__name__)


class Fitted:
    """The fitted weights and query adapter of ``store`` (one per open index), under the
    index's ``settings`` (read when used: its ``query_adapter`` setting ``off``, no
    adapter is read or applied)."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store, self.settings = store, settings
        self._weights: tuple[float, dict[str, float] | None] = (-FITTED_FOR, None)
        self._adapter: tuple[float, query_adapter.Adapter | None] = (-FITTED_FOR, None)

    def weights(self) -> dict[str, float] | None:
        """The fitted weights (None: none adopted), read again at most every
        :data:`FITTED_FOR` seconds."""
        at, known = self._weights
        if time.monotonic() - at >= FITTED_FOR:
            try:
                known = weight_fit.fitted_weights(self.store)
            except (StoreError, InvalidIndex):  # (a PostgreSQL primary away: searches go
                # on on its read replicas)
                log.warning("the fitted weights could not be read; the last known are used")
            self._weights = (time.monotonic(), known)
        return known

    def adapter(self) -> query_adapter.Adapter | None:
        """The query adapter searches apply (None: the setting is off, or none beat the
        identity), read again at most every :data:`FITTED_FOR` seconds (its matrix only
        when the fit changed)."""
        if self.settings.query_adapter == "off":
            return None
        at, known = self._adapter
        if time.monotonic() - at >= FITTED_FOR:
            try:
                known = query_adapter.load(self.store, known)
            except (StoreError, InvalidIndex):  # (as the fitted weights)
                log.warning("the query adapter could not be read; the last known is used")
            self._adapter = (time.monotonic(), known)
        return known

    def fit_weights(self, embedder: Embedder, *, min_marks: int, allow_zero: bool,
                    progress: Callable[[int, int], None] | None) -> weight_fit.WeightFit:
        """:func:`weight_fit.fit` on the store's marks, kept (under the writer lock) and
        used at once when adopted."""
        done = weight_fit.fit(self.store, embedder, self.settings, min_marks=min_marks,
                              allow_zero=allow_zero, progress=progress,
                              adapter=self.adapter())
        if done.adopted:
            with self.store.writer(self.settings.lock_wait):
                weight_fit.keep(self.store, done)
            self._weights = (time.monotonic(), done.weights)
        return done

    def reset_weights(self) -> bool:
        """Forget the fitted weights (False: there were none)."""
        with self.store.writer(self.settings.lock_wait):
            done = weight_fit.reset(self.store)
        self._weights = (time.monotonic(), None)
        return done

    def fit_adapter(self, embedder: Embedder, *, min_questions: int
                    ) -> query_adapter.AdapterFit:
        """:func:`query_adapter.fit`, kept (under the writer lock) and applied at once when
        it beat none (``used``)."""
        done, made = query_adapter.fit(self.store, embedder, min_questions=min_questions)
        with self.store.writer(self.settings.lock_wait):
            query_adapter.keep(self.store, done, made)
        self._adapter = (time.monotonic(), made if done.used else None)
        return done

    def refit_adapter(self, embedder: Embedder) -> None:
        """The query adapter fitted again if due (:func:`query_adapter.refit`; inside a
        write)."""
        made = query_adapter.refit(self.store, embedder, self.settings.query_adapter)
        if made is not None:
            self._adapter = (time.monotonic(), made[1] if made[0].used else None)
