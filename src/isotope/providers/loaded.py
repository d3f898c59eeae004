"""The language models an open index uses, each loaded once (when first asked for) and
wrapped in the reply cache (:class:`~isotope.providers.cache.CachedLLM`): the question,
atomizer and answer models the settings name, or those given to
:meth:`isotope.Isotope.open` in their place."""

from __future__ import annotations

from typing import TYPE_CHECKING

from isotope import providers
from isotope.providers import LLM
from isotope.providers.cache import Cache, CachedLLM

if TYPE_CHECKING:
    from isotope.settings import Settings


class Models:
    """The models of an index opened with ``settings``, behind ``cache`` (None: calls
    only counted). ``llm``: the question, atomizer and answer model; ``answer_llm``: the
    answer model only (even when the settings name the same model for questions)."""

    def __init__(self, settings: Settings, cache: Cache | None, *, llm: LLM | None = None,
                 answer_llm: LLM | None = None) -> None:
        self.settings, self.cache = settings, cache
        self._llms: dict[str, CachedLLM] = {}
        if llm is not None:
            self._llms[settings.question_model] = self._wrap(llm)
            self._llms.setdefault(settings.atomizer_model, self._llms[settings.question_model])
        self._answer = self._wrap(answer_llm) if answer_llm is not None else None
        if answer_llm is None and llm is not None:
            self._llms.setdefault(settings.answer_model, self._llms[settings.question_model])

    def _wrap(self, llm: LLM) -> CachedLLM:
        return llm if isinstance(llm, CachedLLM) else CachedLLM(llm, self.cache,
                                                                  seed=self.settings.seed)

    def llm(self, model: str | None = None) -> CachedLLM:
        """The model named ``model`` (default: the question model)."""
        model = model or self.settings.question_model
        if model not in self._llms:
            self._llms[model] = self._wrap(providers.create(model, self.settings))
        return self._llms[model]

    def answer_llm(self) -> CachedLLM:
        """The answer model (the one given as ``answer_llm``, else the one the
        ``answer_model`` setting names)."""
        return self._answer or self.llm(self.settings.answer_model)

    def close(self) -> None:
        """Close each model loaded (once)."""
        for llm in {id(v): v for v in self._llms.values()}.values():
            llm.close()
