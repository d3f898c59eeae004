"""An answer's own confidence, apart from the search's: how likely the answer shown holds
the right answer (``answer_confidence``, 0 to 1).

The passages' words tell a supported answer from an invention (:mod:`isotope.search.answer`),
but not a right answer from a wrong one made of the passage's own words ("Warsaw served
as Poland's capital in 1313": the passage names Warsaw, 1313 and the capital, and says
Kraków). So the answer model is asked once more, as a checker, whether the few sentences
of the passage that hold the answer (:func:`window`) say that it answers the question
(:func:`check_prompt`, prompt ``check``); its reply is not read, only the probability
that it begins with "yes" rather than "no" (:meth:`isotope.providers.LLM.yes_probability`:
one prefill of a short prompt, about 2 s of the offline model on 2 cores). That
probability and what the words said (:class:`Signals`) make the confidence
(:func:`confidence`), a logistic model fitted on the development questions of
benchmarks/answers.py (its reliability table, per bin of 0.2, is in the retrieval guide).

An answer is shown as ``generated`` only when its confidence reaches the
``answer_strictness`` level's bar (:data:`LEVELS`); below it, the sentence of the passage
its words come from is quoted (``quoted``: the passage's own words, never the model's) when
the confidence still reaches the level's quoting bar or the search is sure of its first
result, else the answer is ``declined``. A model that gives no log-probabilities (an
endpoint without ``logprobs``) is judged by the words alone, with its own fitted model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from isotope.prompts import PROMPTS, PromptSpec
from isotope.providers import Prompt
from isotope.settings import AnswerStrictness

Check = Callable[[Prompt], "float | None"]
"""What asks the checker: a prompt in, P(yes) out (None: the model gives none)."""
WINDOW_CHARS = 700
"""The longest passage a check reads (the sentences around the answer)."""


@dataclass(frozen=True)
class Signals:
    """What an answer's confidence is made from."""

    support: float
    """The share of the answer's new words the passage says (0.5 at least to be checked;
    not weighed: every answer checked has enough)."""
    evidence: float
    """The share of the question's words around the answer in the passage."""
    matched: float
    """The best cosine of the passage's indexed questions to the query."""
    top: float
    """The search's first score (``top_score``)."""
    first: bool
    """The passage is the search's first result."""
    sure: bool
    """The search is sure of its first result (``deliver``)."""
    checked: float | None = None
    """P(yes) of the model's check, None when the model gives none."""


@dataclass(frozen=True)
class Weights:
    """A logistic model: its bias, then one weight per signal (``checked`` as its
    log-odds)."""

    bias: float
    evidence: float
    matched: float
    top: float
    first: float
    sure: float
    checked: float = 0.0


WEIGHTS = Weights(bias=-2.873, evidence=0.895, matched=0.266, top=0.137, first=0.895,
                  sure=0.538, checked=1.263)
"""Fitted on the development set with the model's check (benchmarks/answer_fit.py)."""
WORDS_ONLY = Weights(bias=-1.251, evidence=1.15, matched=0.337, top=0.135, first=0.878,
                     sure=0.62)
"""Fitted on the same set without it (a model that gives no log-probabilities)."""


@dataclass(frozen=True)
class Level:
    """An ``answer_strictness`` level: the confidence an answer needs to be shown as
    ``generated``, and the confidence at which one that falls short is still quoted; each
    with the model's check and (``words``) without it."""

    generate: float
    quote: float
    words_generate: float
    words_quote: float

    def bars(self, checked: bool) -> tuple[float, float]:
        """(generate, quote) for an answer checked by the model or by its words alone."""
        return (self.generate, self.quote) if checked else (self.words_generate,
                                                            self.words_quote)


LEVELS: dict[AnswerStrictness, Level] = {
    "lenient": Level(generate=0.61, quote=0.37, words_generate=0.73, words_quote=0.59),
    "balanced": Level(generate=0.87, quote=0.5, words_generate=0.84, words_quote=0.73),
    "strict": Level(generate=0.93, quote=0.56, words_generate=0.85, words_quote=0.83),
}
"""Chosen on the development set by benchmarks/answer_fit.py (benchmarks/history/2026-12.md,
"Answers that know when they are unsupported"): there, generated answers are right 85 /
92 / 95 times in 100 and 80 / 90 / 95 % of the questions no passage answers are declined."""


def confidence(signals: Signals) -> float:
    """The answer's confidence: the fitted logistic model of its signals (the words-only
    one when the model gave no check)."""
    w = WORDS_ONLY if signals.checked is None else WEIGHTS
    checked = 0.0 if signals.checked is None else _log_odds(signals.checked)
    z = (w.bias + w.evidence * signals.evidence + w.matched * signals.matched
         + w.top * signals.top + w.first * signals.first + w.sure * signals.sure
         + w.checked * checked)
    return 1.0 / (1.0 + math.exp(-z))


def _log_odds(p: float) -> float:
    p = min(max(p, 1e-4), 1 - 1e-4)
    return math.log(p / (1 - p))


def check_prompt(answer: str, question: str, passage: str,
                 spec: PromptSpec = PROMPTS["check"]) -> Prompt:
    """The checker's prompt: the passage's sentences around the answer, the question and
    the proposed answer, asked whether the passage says it answers the question."""
    return spec.render(passage=passage, query=question, answer=answer)


__all__ = ["LEVELS", "WEIGHTS", "WORDS_ONLY", "Check", "Level", "Signals", "Weights",
           "check_prompt", "confidence"]
