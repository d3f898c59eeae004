"""An answer's own confidence (issue 65): ``answer_confidence`` on every ``ask``; an answer
is ``generated`` only when it reaches the ``answer_strictness`` level's bar, made of the
passages' words and the model's own check (P(yes) that the passage says the answer);
below it, the passage's own sentence is quoted or the answer declined. The real store and
embedder; the answer model's reply and its check's P(yes) are set by the test (the
outermost boundary). The real model's check is in test_local_model.py."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from isotope import Isotope
from isotope.cli import app as app_cli
from isotope.providers import yes_share
from isotope.providers.cache import Cache, CachedLLM
from isotope.search.answer_check import LEVELS, Signals, confidence
from test_answers import Replying
from test_answers import answering as answering

CARRY = "Until when can unused vacation days be carried over?"
STRAP = "Which strap does every unit ship with?"


def _unsure(iso: Isotope, question: str) -> object:
    found = iso.search(question, 3)
    found.suggested_action = "query_more"  # (a small index's search is rarely sure)
    return found


def test_a_wrong_answer_made_of_the_passage_s_words_is_not_shown_as_checked(
        answering: tuple[Isotope, Replying]) -> None:
    """"Every unit ships with a red strap": every word is the battery passage's ("A red
    light blinks"), so the words alone pass it; the model's check says no, and the
    answer is not ``generated``: the passage's own sentence is quoted, or it is declined.
    The same answer the check confirms is generated, with a confidence past the bar."""
    iso, model = answering
    model.reply = "Every unit ships with a red strap [1]."
    model.yes = 0.02
    found = _unsure(iso, STRAP)
    doubted = iso.answer(found.model_copy(deep=True))  # type: ignore[attr-defined]
    assert doubted.answer_kind != "generated" and "red strap" not in doubted.answer
    assert doubted.answer_confidence is not None
    assert doubted.answer_confidence < LEVELS["balanced"].generate
    if doubted.answer_kind == "quoted":  # (the sentence the answer's words come from)
        assert doubted.answer.startswith("The index says: Every unit ships with a blue strap.")
    # the check read the sentences that hold the answer, the question and the answer
    check = model.checks[-1][-1]["content"]
    assert "Every unit ships with a blue strap." in check and STRAP in check
    assert "Every unit ships with a red strap." in check
    assert "blue strap" in check and "Celsius" not in check  # (its window only)
    model.yes = 0.99
    trusted = iso.answer(found.model_copy(deep=True))  # type: ignore[attr-defined]
    assert trusted.answer_kind == "generated"
    assert trusted.answer_confidence >= LEVELS["balanced"].generate


def test_a_doubted_answer_quotes_the_sentence_it_overlaps_most(
        answering: tuple[Isotope, Replying]) -> None:
    """(c) An extractive answer: as the check's P(yes) rises, the same reply is declined,
    then quoted (the sentence of its passage that says most of the answer's words, as the
    passage writes it, citing that passage; not the statement that matched the question
    best), then generated."""
    iso, model = answering
    model.reply = "A full charge keeps the Orbit R2 going for 9 hours [1]."
    found = _unsure(iso, "How long does the Orbit R2 battery keep going on a charge?")
    kinds = []
    for yes in (0.001, 0.05, 0.2, 0.4, 0.6, 0.8, 0.9, 0.97, 0.999):
        model.yes = yes
        answered = iso.answer(found.model_copy(deep=True))  # type: ignore[attr-defined]
        kinds.append(answered.answer_kind)
        if answered.answer_kind == "quoted":
            rank = next(r.rank for r in answered.results
                        if r.chunk.source.endswith("battery.md"))
            assert answered.answer == ("The index says: The Orbit R2 battery lasts 9 hours "
                                       f"on a full charge. [{rank}]")
            assert answered.citations == [rank]
    assert kinds[0] == "declined" and kinds[-1] == "generated" and "quoted" in kinds, kinds
    assert kinds == sorted(kinds, key=["declined", "quoted", "generated"].index)


def test_a_restated_question_is_no_answer(answering: tuple[Isotope, Replying]) -> None:
    """(b) An answer that only restates the question (no name, number or content word
    the question lacks) is not an answer, whatever the check would say: it is not even
    asked."""
    iso, model = answering
    model.reply = "Unused vacation days can be carried over until when they can [1]."
    model.yes = 0.99
    response = iso.answer(_unsure(iso, CARRY))  # type: ignore[arg-type]
    assert response.answer_kind == "declined" and response.answer_confidence == 0.0
    assert model.checks == []


def test_every_level_moves_only_the_bar(answering: tuple[Isotope, Replying]) -> None:
    """The same answer and check have the same confidence at every level; a stricter
    level generates it only when a laxer one does, and never below its bar."""
    iso, model = answering
    model.reply = "Unused vacation days can be carried over until March 31 [1]."
    found = _unsure(iso, CARRY)
    generated: dict[str, list[float]] = {level: [] for level in LEVELS}
    for yes in (0.05, 0.2, 0.4, 0.6, 0.8, 0.9, 0.97, 0.999):
        model.yes = yes
        trust = set()
        for level in LEVELS:
            iso.settings.answer_strictness = level  # type: ignore[assignment]
            answered = iso.answer(found.model_copy(deep=True))  # type: ignore[attr-defined]
            trust.add(answered.answer_confidence)
            if answered.answer_kind == "generated":
                generated[level].append(yes)
                assert answered.answer_confidence >= LEVELS[level].generate
        assert len(trust - {0.0}) <= 1  # (declined says 0)
    assert set(generated["strict"]) <= set(generated["balanced"]) <= set(generated["lenient"])
    assert generated["lenient"] and 0.05 not in generated["lenient"]
    assert 0.999 in generated["strict"]


def test_a_search_sure_of_its_passage_does_not_make_an_answer_checked(
        answering: tuple[Isotope, Replying]) -> None:
    """The search's ``deliver`` is about the results, not the answer: a doubted answer
    over a sure search is not generated."""
    iso, model = answering
    model.reply = "Every unit ships with a red strap [1]."
    model.yes = 0.02
    found = iso.search(STRAP, 3)
    found.suggested_action = "deliver"
    answered = iso.answer(found)
    assert answered.suggested_action == "deliver" and answered.answer_kind != "generated"
    assert "red strap" not in answered.answer


def test_a_model_without_log_probabilities_is_judged_by_the_words(
        answering: tuple[Isotope, Replying]) -> None:
    """A model that gives no P(yes) (an endpoint without logprobs): the words-only
    model decides; a supported answer where the passage speaks of what was asked is
    still shown, an invented number never."""
    iso, model = answering
    model.yes = None
    model.reply = "Unused vacation days can be carried over until March 31 [1]."
    iso.settings.answer_strictness = "lenient"
    answered = iso.answer(_unsure(iso, CARRY))  # type: ignore[arg-type]
    assert answered.answer_kind == "generated" and 0 < answered.answer_confidence <= 1
    model.reply = "Unused vacation days can be carried over until March 35 [1]."
    assert iso.answer(_unsure(iso, CARRY)).answer_kind != "generated"  # type: ignore[arg-type]


def test_the_confidence_rises_with_each_signal() -> None:
    base = Signals(support=0.6, evidence=0.5, matched=0.6, top=0.7, first=False, sure=False,
                   checked=0.5)
    for better in (replace(base, evidence=1.0), replace(base, matched=0.9),
                   replace(base, first=True), replace(base, sure=True),
                   replace(base, checked=0.9)):
        assert confidence(better) > confidence(base)
    assert 0 < confidence(base) < 1
    assert 0 < confidence(replace(base, checked=None)) < 1  # (the words-only model)


def test_yes_share_reads_either_spelling() -> None:
    assert yes_share({"Yes": math.log(0.6), " yes": math.log(0.2), "No": math.log(0.2)}) \
        == pytest.approx(0.8)
    assert yes_share({"Maybe": -0.1}) is None


def test_the_check_is_cached_and_a_missing_one_is_not(tmp_path: Path) -> None:
    class Counting(Replying):
        def __init__(self) -> None:
            super().__init__()
            self.asked = 0

        def yes_probability(self, prompt: object) -> float | None:  # type: ignore[override]
            self.asked += 1
            return self.yes

    inner = Counting()
    cached = CachedLLM(inner, Cache(tmp_path / "cache.db"))
    prompt = [{"role": "user", "content": "Is it? yes or no?"}]
    inner.yes = 0.7
    assert cached.yes_probability(prompt) == 0.7  # type: ignore[arg-type]
    assert cached.yes_probability(prompt) == 0.7  # type: ignore[arg-type]
    assert inner.asked == 1
    inner.yes = None
    other = [{"role": "user", "content": "Is it not? yes or no?"}]
    assert cached.yes_probability(other) is None  # type: ignore[arg-type]
    assert cached.yes_probability(other) is None  # type: ignore[arg-type]
    assert inner.asked == 3


def test_answer_confidence_reaches_every_shell(answering: tuple[Isotope, Replying],
                                               tmp_path: Path) -> None:
    """``answer_confidence`` in ``query --json`` and the terminal's answer line, ``POST
    /ask`` (whole and streamed), the Client and MCP's view."""
    iso, model = answering
    model.reply = "Unused vacation days can be carried over until March 31 [1]."
    model.yes = 0.99
    asked = iso.ask(CARRY)
    assert asked.answer_kind == "generated" and asked.answer_confidence
    pytest.importorskip("fastapi", reason="pip install 'isotopedb[server]'")
    import httpx

    from isotope import Client
    from isotope.server.app import create_app
    from isotope.server.auth import Keys
    from isotope.server.mcp import agent_view

    from conftest import served_on_loopback

    assert agent_view(asked)["answer_confidence"] == asked.answer_confidence
    app = create_app(iso, keys=Keys(), roots=[], max_bytes=1_000_000,
                     uploads=tmp_path / "up")
    with served_on_loopback(app) as url:
        whole = httpx.post(url + "/ask", json={"query": CARRY}, timeout=30).json()
        assert whole["answer_confidence"] == asked.answer_confidence
        with httpx.stream("POST", url + "/ask", json={"query": CARRY, "stream": True},
                          timeout=30) as reply:
            lines = list(reply.iter_lines())
        answer = json.loads(lines[lines.index("event: answer") + 1].removeprefix("data: "))
        assert answer["answer_confidence"] == asked.answer_confidence
        assert Client(url).ask(CARRY).answer_confidence == asked.answer_confidence
    index = str(iso.settings.index)
    iso.close()
    from isotope import providers

    def confident(name: str, settings: object) -> Replying:
        fixed = Replying()
        fixed.reply, fixed.yes = model.reply, 0.99
        return fixed

    providers.register("fake/confident", confident)  # type: ignore[arg-type]
    env = {"ISOTOPE_ANSWER_MODEL": "fake/confident", "ISOTOPE_QUESTION_MODEL": "fake/echo"}
    result = CliRunner().invoke(app_cli, ["query", CARRY, "--index", index, "--json"],
                                env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["answer_confidence"] == asked.answer_confidence
    table = CliRunner().invoke(app_cli, ["query", CARRY, "--index", index], env=env)
    assert f"answer confidence {asked.answer_confidence:.2f} (generated)" in table.output


def test_a_swapped_name_is_never_generated_even_when_the_check_says_yes(
        answering: tuple[Isotope, Replying]) -> None:
    """The words still decide first: "Japan" asked and answered, "Austria" written; a
    check that says yes does not make it an answer."""
    iso, model = answering
    model.reply = "Express delivery to Japan takes 3 days. [1]"
    model.yes = 0.99
    for level in LEVELS:
        iso.settings.answer_strictness = level  # type: ignore[assignment]
        answered = iso.ask("How long does express delivery to Japan take?")
        assert answered.answer_kind != "generated" and "Japan" not in answered.answer


def test_the_answer_scores_count_generated_precision_and_reliability(
        answering: tuple[Isotope, Replying]) -> None:
    """``isotope eval --answers`` and benchmarks/answers.py: of the generated answers, the
    share that holds a gold answer (an unanswerable question's generated answer counts as
    wrong); the share of each kind; and the answers by ``answer_confidence`` bin."""
    from isotope.search.answer_eval import evaluate_answers

    iso, model = answering
    model.yes = 0.999
    model.reply = "Unused vacation days can be carried over until March 31 [1]."
    asked = [{"question": CARRY, "answers": ["March 31"]},
             {"question": CARRY + " ", "answers": ["April 1"]}]  # (its gold is not said)
    scores = evaluate_answers(iso, asked, unanswerable=[{"question": CARRY + "  "}])
    assert scores.kinds["generated"] == 100.0 and scores.generated_share == 100.0
    assert scores.generated_precision == pytest.approx(33.3)  # (1 right of 3 generated)
    assert scores.contains_gold == 50.0 and scores.unanswerable_declined == 0.0
    top = next(b for b in scores.reliability if b["bin"] == "0.8-1.0")
    assert top["answers"] == 3 and top["right"] == pytest.approx(33.3)
    assert sum(b["answers"] for b in scores.reliability) == 3
