"""The answer step, after a :class:`~isotope.search.searching.Search`: what
:meth:`isotope.Isotope.answer` (and ``ask``) runs on a search's response.

1. **What the principal may see**: results of chunks its conditions hide now (or that are
   gone) are dropped; the passages are the rest that are not stale (file references
   whose file changed), :data:`~isotope.search.answer.MAX_PASSAGES` at most. None: the
   answer is declined, and no model is loaded.
2. **The model's reply**, streamed (each piece given to ``on_token``; ``cancel`` stops it
   at its next piece and leaves ``answer`` None), to the prompt of
   :func:`~isotope.search.answer.answer_prompt` (a local model's prompt fits its
   context).
3. **Judged** against the passages (:func:`~isotope.search.answer.judge`, by the
   ``answer_strictness`` setting): ``answer``, ``answer_kind``, ``answer_confidence``
   and the ranks of the passages it cites.
4. **Access checked again**: a list changed while the model wrote, so that the principal no
   longer sees a passage it was made from: the answer is withdrawn (:data:`HIDDEN_SINCE`).

The principal's conditions are given (worked out once per call, by the caller); an
:class:`Answering` takes what it reads as arguments, never the
:class:`~isotope.Isotope`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from isotope.models import Condition, QueryResponse, SearchResult
from isotope.prompts import PromptSpec
from isotope.providers import LLM
from isotope.search import answer
from isotope.stores import Store

if TYPE_CHECKING:
    from isotope.settings import Settings

HIDDEN_SINCE = ("The passages this answer was written from are no longer visible to you "
                "(their access changed meanwhile).")


@dataclass
class Answering:
    """The answer step over ``store``, by the answer ``model`` (loaded when first called:
    not for a response with nothing to answer from), with the ``answer`` and ``check``
    prompts of ``prompts``."""

    store: Store
    settings: Settings
    model: Callable[[], LLM]
    prompts: Mapping[str, PromptSpec]

    def run(self, response: QueryResponse, conditions: Sequence[Condition], *,
            on_token: Callable[[str], None] | None = None,
            cancel: threading.Event | None = None) -> QueryResponse:
        """``response`` answered from its results, as the principal whose ``conditions`` they
        are (see the module's text); returns ``response`` with ``answer``,
        ``answer_kind``, ``answer_confidence`` and ``citations`` set."""
        self._visible(response, conditions)
        readable = [r for r in response.results if not r.chunk.stale][:answer.MAX_PASSAGES]
        if not readable:
            return _declined(response)
        started = time.perf_counter()
        model = self.model()
        reply = self._reply(model, response.query, readable, on_token, cancel)
        if reply is None:
            return response
        sure = response.suggested_action == "deliver" and readable[0] is response.results[0]
        judged = answer.judge(reply, response.query, readable, sure=sure,
                              strictness=self.settings.answer_strictness,
                              two_hop=self.settings.graph, check=model.yes_probability,
                              check_spec=self.prompts["check"])
        response.timings["answer"] = time.perf_counter() - started
        response.answer, response.answer_kind = judged.text, judged.kind
        response.answer_confidence = round(judged.confidence, 3)
        response.citations = [readable[n - 1].rank for n in judged.cited]
        self._hidden_since(response, readable, conditions)
        return response

    def _visible(self, response: QueryResponse, conditions: Sequence[Condition]) -> None:
        """Drop the results of chunks ``conditions`` hide (or that are gone)."""
        if conditions and response.results:
            seen = self.store.visible_chunks([r.chunk.id for r in response.results],
                                             conditions)
            response.results = [r for r in response.results if r.chunk.id in seen]

    def _reply(self, model: LLM, query: str, readable: list[SearchResult],
               on_token: Callable[[str], None] | None, cancel: threading.Event | None
               ) -> str | None:
        """The model's reply, streamed piece by piece to ``on_token`` (None: ``cancel``
        was set)."""
        # a local model's context holds about 3 characters a token, with room for the rest
        room = 3 * self.settings.llm_context - 2_000 if model.local else answer.PROMPT_CHARS
        pieces: list[str] = []
        stream = model.stream(
            answer.answer_prompt(query, readable, self.prompts["answer"], max_chars=room),
            max_tokens=answer.ANSWER_TOKENS, temperature=0.0)
        try:
            for piece in stream:
                if cancel is not None and cancel.is_set():
                    return None
                pieces.append(piece)
                if on_token is not None:
                    on_token(piece)
        finally:
            stream.close()  # type: ignore[attr-defined]
        return "".join(pieces)

    def _hidden_since(self, response: QueryResponse, readable: list[SearchResult],
                      conditions: Sequence[Condition]) -> None:
        """A list changed while the model wrote: what the principal may see now, and the
        answer withdrawn if a passage it was made from is hidden."""
        if not conditions:
            return
        seen = self.store.visible_chunks([r.chunk.id for r in readable], conditions)
        if any(r.chunk.id not in seen for r in readable):
            response.results = [r for r in response.results if r.chunk.id in seen]
            response.answer, response.answer_kind = HIDDEN_SINCE, "declined"
            response.citations, response.answer_confidence = [], 0.0


def _declined(response: QueryResponse) -> QueryResponse:
    """``response`` with nothing to answer from: nothing matched, or only stale chunks."""
    response.answer = ("The index is empty or nothing matched." if not response.results
                       else "The matching chunks are stale: their files changed. "
                       "Run `isotope sync` on them.")
    response.answer_kind, response.answer_confidence = "declined", 0.0
    return response
