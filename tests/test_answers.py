"""Answers that use what retrieval found (issue 25): a reply is judged by whether the
passages support it, not by its citation marks; when it is not supported, the statement
that matched best is quoted if the search is sure, else the answer is declined; and
``answer_kind`` says which. The real store and embedder; the answer model's reply is
written by the test (the outermost boundary). The real model is in test_local_model.py."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from isotope import Isotope
from isotope.cli import app as app_cli
from isotope.embedders import Embedder
from isotope.providers import LLM, Prompt

from conftest import FakeLLM

HANDBOOK = """# Handbook

New employees receive 25 days of paid vacation per year. Unused vacation days can be
carried over until March 31 of the following year.

The core hours at Northwind Robotics are 10:00 to 15:00 on weekdays.
"""
SHIPPING = """# Shipping

Express delivery to Austria takes 3 days. Standard delivery to Austria takes 9 days.
"""
BATTERY = """# Battery

The Orbit R2 battery lasts 9 hours on a full charge. A red light blinks when it runs low.
The case is made of recycled aluminium from Norway. Every unit ships with a blue strap.
Replacement straps come in four colours. Store the pack between 10 and 25 degrees
Celsius; charge it between 5 and 40 degrees Celsius.
"""


class Replying(LLM):
    """An answer model whose reply the test sets (``reply``); it records the prompts."""

    model_id = "fake/replying"

    def __init__(self) -> None:
        self.reply = ""
        self.prompts: list[Prompt] = []
        self.yes: float | None = 0.99
        """P(yes) of the answer check: a model sure of its answers unless a test says
        otherwise (None: a model that gives no log-probabilities)."""
        self.checks: list[Prompt] = []

    def yes_probability(self, prompt: Prompt) -> float | None:
        self.checks.append(prompt)
        return self.yes

    def complete_batch(self, prompts: Sequence[Prompt], *, max_tokens: int = 256,
                       temperature: float = 0.0, json_schema: dict[str, Any] | None = None,
                       ) -> list[str]:
        self.prompts.extend(prompts)
        return [self.reply for _ in prompts]


@pytest.fixture
def answering(tmp_path: Path, embedder: Embedder) -> tuple[Isotope, Replying]:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "handbook.md").write_text(HANDBOOK)
    (docs / "battery.md").write_text(BATTERY)
    (docs / "shipping.md").write_text(SHIPPING)
    model = Replying()
    iso = Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM(),
                       answer_llm=model, cache=False)
    iso.ingest(docs)
    return iso, model


def _rank_of(response: Any, name: str) -> int:
    return next(r.rank for r in response.results if r.chunk.source.endswith(name))


def test_a_right_answer_without_a_citation_is_attributed(answering: tuple[Isotope, Replying]
                                                         ) -> None:
    iso, model = answering
    model.reply = "According to the notes, new employees get 25 days of paid vacation."
    response = iso.ask("How many vacation days do new employees get?")
    assert response.answer_kind == "generated"
    assert response.citations == [_rank_of(response, "handbook.md")]
    assert "25 days" in response.answer and response.answer.endswith("]")


def test_a_wrong_citation_is_corrected(answering: tuple[Isotope, Replying]) -> None:
    iso, model = answering
    found = iso.search("How long does the Orbit R2 battery last?", 3)
    wrong = next(r.rank for r in found.results if not r.chunk.source.endswith("battery.md"))
    model.reply = f"The Orbit R2 battery lasts 9 hours on a full charge [{wrong}]."
    response = iso.answer(found)
    assert response.answer_kind == "generated"
    assert response.citations == [_rank_of(response, "battery.md")]


def test_a_reply_that_speaks_of_the_passages_first_is_read_past_that(
        answering: tuple[Isotope, Replying]) -> None:
    iso, model = answering
    model.reply = ("This information is found in passage [1]. Unused vacation days can be "
                   "carried over until March 31.")
    response = iso.ask("Until when can unused vacation days be carried over?")
    assert response.answer_kind == "generated"
    assert response.answer.startswith("Unused vacation days can be carried over until March")


def test_according_to_the_passage_is_tidied_away(answering: tuple[Isotope, Replying]
                                                 ) -> None:
    iso, model = answering
    model.reply = ("According to passage [2], new employees receive 25 days of paid "
                   "vacation, as stated in [2].")
    response = iso.ask("How many vacation days do new employees get?")
    rank = _rank_of(response, "handbook.md")
    assert response.answer == f"New employees receive 25 days of paid vacation. [{rank}]"


def test_an_invented_number_is_never_shown(answering: tuple[Isotope, Replying]) -> None:
    iso, model = answering
    model.reply = "The Orbit R2 battery lasts 14 hours [1]."
    response = iso.ask("How long does the Orbit R2 battery last?")
    assert "14" not in (response.answer or "")
    assert response.answer_kind in ("quoted", "declined")
    if response.answer_kind == "quoted":  # the search was sure: the statement, quoted
        assert response.answer.startswith("The index says: ") and "9 hours" in response.answer


@pytest.mark.parametrize(("question", "reply"), [
    ("How long does express delivery to Japan take?",
     "Express delivery to Japan takes 3 days. [1]"),
    ("How long does the Orbit R3 battery last?", "The Orbit R3 battery lasts 9 hours [1]."),
    ("Which strap ships with the Orbit R2 in Sweden?",
     "Every unit in Sweden ships with a blue strap [1]."),
])
def test_a_claim_taken_from_the_question_needs_the_passage_too(
        answering: tuple[Isotope, Replying], question: str, reply: str) -> None:
    """A wrong answer passed the check because its wrong words were the question's
    (issue 42, item 16): the passage says Austria, the answer Japan, and "Japan" is a
    word of the question. An answer's names and numbers must be the cited passage's."""
    iso, model = answering
    model.reply = reply
    response = iso.ask(question)
    assert response.answer_kind != "generated", response.answer
    assert reply.split(" [")[0].rstrip(".") not in (response.answer or "")
    if response.answer_kind == "quoted":  # (the passage's own words, never the swap)
        assert "The index says: " in response.answer
    model.reply = "Express delivery to Austria takes 3 days. [1]"
    right = iso.ask("How long does express delivery to Austria take?")
    assert right.answer_kind == "generated" and "Austria takes 3 days" in right.answer


def test_a_refusal_is_declined_even_when_the_search_is_sure(
        answering: tuple[Isotope, Replying]) -> None:
    """The model found nothing: the answer is declined, whether or not the search is sure
    of its first result (issue 65: quoting the best matched statement then gave an answer
    to questions no passage answers, which a search is as often sure of; a reply that
    fails its check quotes its own passage's sentence instead, test_answer_confidence)."""
    iso, model = answering
    model.reply = "not found"
    sure = iso.search("How long does the Orbit R2 battery last on a full charge?", 3)
    sure.suggested_action = "deliver"  # as a large index's search would say
    declined = iso.answer(sure)
    assert declined.answer_kind == "declined" and declined.citations == []
    assert declined.answer == "The indexed documents do not contain the answer."
    assert declined.answer_confidence == 0.0
    unsure = iso.search("What is the capital of Australia?", 3)
    assert unsure.suggested_action != "deliver"
    assert iso.answer(unsure).answer_kind == "declined"


def test_an_answer_drawn_from_elsewhere_in_a_passage_is_trusted_less(
        answering: tuple[Isotope, Replying]) -> None:
    """An answer whose words are in the passage but not where it speaks of what was
    asked (a small model's usual invention) gets a lower confidence than one said where
    the question's words are, for the same check; at some P(yes) the right one is
    generated at ``balanced`` and the invention is not."""
    iso, model = answering
    question = "How long does the Orbit R2 battery last?"
    found = iso.search(question, 3)
    found.suggested_action = "query_more"
    apart = []
    for yes in (0.5, 0.8, 0.9, 0.95, 0.98):
        model.yes = yes
        model.reply = "It keeps between 5 and 40 degrees Celsius [1]."
        invented = iso.answer(found.model_copy(deep=True))
        model.reply = "The Orbit R2 battery lasts 9 hours on a full charge [1]."
        right = iso.answer(found.model_copy(deep=True))
        assert right.answer_confidence >= invented.answer_confidence, yes  # (0: declined)
        if right.answer_confidence:
            assert right.answer_confidence > invented.answer_confidence, yes
        if right.answer_kind == "generated" != invented.answer_kind:
            apart.append(yes)
    assert apart


def test_a_typo_in_the_question_still_finds_its_words() -> None:
    """Evidence matches a word one letter off when it is no English word (SQuAD's
    "championshipt"), never an English word one letter off another ("cat" for "car")."""
    from isotope.search.answer import evidence

    passage = ("The Panthers beat the Arizona Cardinals in the NFC Championship Game. "
               "The game was played in Charlotte.")
    answer = "The Panthers beat the Arizona Cardinals."
    assert evidence(answer, "Who did the Panthers beat in the NFC championshipt game?",
                    passage) == 1.0
    assert evidence(answer, "Who did the Panthers beat in the NFC championship game?",
                    passage) == 1.0
    assert evidence(answer, "Who did the Panthers beat at the NFC baseball game?",
                    passage) < 1.0


def test_the_passages_lead_with_the_statement_that_matched(
        answering: tuple[Isotope, Replying]) -> None:
    iso, model = answering
    model.reply = "not found"
    found = iso.search("How long does the Orbit R2 battery last?", 3, mode="questions-dense")
    iso.answer(found)
    prompt = model.prompts[-1][-1]["content"]
    assert "[1] " in prompt, prompt
    first = prompt.split("[1] ", 1)[1].split("\n\n[2]")[0]
    statement = found.results[0].matched_questions[0].atom
    assert first.startswith(f"{statement} ... ")  # moved to the front, not repeated
    assert first.count(statement) == 1
    assert prompt.rstrip().endswith("Question: How long does the Orbit R2 battery last?")


def test_answer_kind_reaches_every_shell(answering: tuple[Isotope, Replying],
                                         tmp_path: Path) -> None:
    """``answer_kind`` in ``query --json``, ``POST /ask`` (whole and streamed) and the
    Client."""
    iso, model = answering
    model.reply = "New employees receive 25 days of paid vacation per year [1]."
    question = "How many vacation days do new employees get?"
    assert iso.ask(question).answer_kind == "generated"
    pytest.importorskip("fastapi", reason="pip install 'isotopedb[server]'")
    import httpx

    from isotope import Client
    from isotope.server.app import create_app
    from isotope.server.auth import Keys

    from conftest import served_on_loopback

    app = create_app(iso, keys=Keys(), roots=[], max_bytes=1_000_000,
                     uploads=tmp_path / "up")
    with served_on_loopback(app) as url:
        assert httpx.post(url + "/ask", json={"query": question}, timeout=30
                          ).json()["answer_kind"] == "generated"
        with httpx.stream("POST", url + "/ask", json={"query": question, "stream": True},
                          timeout=30) as reply:
            lines = list(reply.iter_lines())
        answer = json.loads(lines[lines.index("event: answer") + 1].removeprefix("data: "))
        assert answer["answer_kind"] == "generated" and answer["citations"]
        assert Client(url).ask(question).answer_kind == "generated"
    index = str(iso.settings.index)
    iso.close()
    from isotope import providers

    providers.register("fake/replying", lambda name, settings: _fixed(model.reply))
    result = CliRunner().invoke(app_cli, ["query", question, "--index", index, "--json"],
                                env={"ISOTOPE_ANSWER_MODEL": "fake/replying",
                                     "ISOTOPE_QUESTION_MODEL": "fake/echo"})
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["answer_kind"] == "generated"


def _fixed(reply: str) -> LLM:
    model = Replying()
    model.reply = reply
    return model


def test_a_reworded_statement_is_put_before_the_passage() -> None:
    """A statement the chunk does not hold word for word (an LLM atomizer resolved its
    pronoun) is not lost: it leads the passage, marked as what matched."""
    from isotope.models import Chunk, MatchedQuestion, SearchResult
    from isotope.search.answer import passage_note

    chunk = Chunk(text="The Orbit R2 is sold in Oslo. It lasts 9 hours.", source="b")
    result = SearchResult(rank=1, score=0.9, chunk=chunk, matched_questions=[
        MatchedQuestion(text="How long does it last?", score=0.8,
                        atom="The Orbit R2 lasts 9 hours.")])
    assert passage_note(result, 2000) == ('(matched: "The Orbit R2 lasts 9 hours.") The '
                                          "Orbit R2 is sold in Oslo. It lasts 9 hours.")
    result.matched_questions[0].atom = "It lasts 9 hours."
    assert passage_note(result, 2000) == "It lasts 9 hours. ... The Orbit R2 is sold in Oslo."


def test_an_answer_is_made_from_answer_k_chunks_a_search_returns_top_k(
        answering: tuple[Isotope, Replying], tmp_path: Path, embedder: Embedder) -> None:
    """``ask`` (and ``search(for_answer=True)``, which the CLI, the server and the eval
    use before answering) gives the model ``answer_k`` chunks; a plain search returns
    ``top_k``."""
    iso, model = answering
    iso.close()
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM(), answer_llm=model,
                      cache=False, top_k=2, answer_k=1) as again:
        assert len(again.search("How long does the battery last?").results) == 2
        assert len(again.search("How long does the battery last?", for_answer=True).results) == 1
        model.reply = "The battery lasts 9 hours [1]."
        asked = again.ask("How long does the battery last?")
        assert len(asked.results) == 1 and asked.results[0].chunk.source.endswith("battery.md")
        assert "[2]" not in model.prompts[-1][-1]["content"]


def test_two_passages_back_a_two_hop_answer_only_when_a_name_joins_them() -> None:
    """A two-hop answer (``judge(two_hop=True)``, an index with a graph): the question's
    names in one passage, the answer in another that names what the first one leads to.
    Each condition of :func:`isotope.search.answer.joined` is needed; the answer cites
    both passages, and is checked over both."""
    from isotope.models import Chunk, SearchResult
    from isotope.search.answer import joined, judge

    def given(*texts: str) -> list[SearchResult]:
        return [SearchResult(rank=n, score=0.5, chunk=Chunk(text=t, source=f"s{n}"))
                for n, t in enumerate(texts, start=1)]

    mace = ("The Presiding Officer sits in the chamber of the Scottish Parliament. "
            "Before the Presiding Officer's chair lies the ornamental staff of office.")
    silver = "The mace of the Presiding Officer is made of silver and gold. It is old."
    other = "The mace of the Lord Mayor of Leeds is made of silver and gold."
    question = "What is the ornamental staff before the Scottish Parliament's chair made of?"
    answer = "The ornamental staff before the Scottish Parliament's chair is made of silver."
    assert joined(answer, question, given(mace, silver), 0.5) == (1, 2)
    assert joined(answer, question, given(silver, mace), 0.5) == (2, 1)
    assert joined(answer, question, given(mace, other), 0.0) is None  # (no name joins them)
    # a word that starts a sentence is no name: "Tickets" joins nothing
    tickets = ("Before the Scottish Parliament's chair lies the ornamental staff. Tickets "
               "are sold at the door.", "Tickets to the zoo are cheap. The statue there is "
                                        "made of silver.")
    assert joined(answer, question, given(*tickets), 0.0) is None
    # the passage of the answer says its numbers: one the first passage says is not its
    metals = ("The ornamental staff before the Scottish Parliament's chair is silver, gold "
              "and copper since 1999.")
    alloy = "The mace of the Presiding Officer is made of silver, gold and copper."
    assert joined(metals, question, given(mace + " It was given in 1999.", alloy), 0.0) is None
    assert joined(metals, question, given(mace, alloy + " It dates from 1999."), 0.0) == (1, 2)
    # of two passages that could say what was asked, the one that says more of it
    less = "The Presiding Officer of the Scottish Parliament has a staff."
    assert joined(answer, question, given(less, silver, mace), 0.0) == (3, 2)
    assert joined(answer, question, given(mace, silver), 0.9) is None  # (too little asked)
    assert joined(answer.replace("silver", "bronze"), question, given(mace, silver),
                  0.0) is None  # (the answer is said nowhere)
    assert joined(answer.replace("Scottish", "Welsh"), question.replace(
        "Scottish", "Welsh"), given(mace, silver), 0.0) is None  # (Welsh said nowhere)
    apart = ("The mace of the Presiding Officer is made of silver. It was given in 1999. It "
             "is kept in a case. The case is locked. It has copper. Visitors may see it. "
             "Guides speak of it. Its head is gold.")
    spread = ("The ornamental staff before the Scottish Parliament's chair has silver, "
              "copper, gold.")
    assert joined(spread, question, given(mace, apart), 0.0) is None  # (said apart)
    together = "The mace of the Presiding Officer is made of silver, copper and gold."
    assert joined(spread, question, given(mace, together), 0.0) == (1, 2)
    said_first = mace + " It is made of silver."  # (the first one says it: it must back it)
    assert joined(answer, question, given(said_first, silver), 0.0) is None
    def confirmed(prompt: object) -> float:  # (a model that confirms the answer)
        return 0.99

    assert judge(answer, question, given(mace, silver), sure=False,
                 check=confirmed).kind == "declined"
    both = judge(answer, question, given(mace, silver), sure=False, two_hop=True,
                 check=confirmed)
    assert both.kind == "generated" and both.cited == [1, 2]
    assert both.text.endswith("made of silver. [1] [2]")
    assert judge(answer, question, given(silver, mace), sure=False, two_hop=True,
                 check=confirmed).cited == [1, 2]  # (cited in order)
    # a search sure of its first result lowers no bar for a pair (which need not hold it)
    long = ("What precious metal is the ornamental ceremonial staff lying before the "
            "Scottish Parliament's chair made of?")
    few = "The Scottish Parliament has a Presiding Officer."  # (a fifth of the question)
    for sure in (False, True):
        assert judge(answer, long, given(few, silver), sure=sure, two_hop=True,
                     check=confirmed).kind != "generated"
    assert judge(answer, long, given(few, silver), sure=False, two_hop=True, check=confirmed,
                 strictness="lenient").kind == "generated"
    assert judge(answer, question, given(mace, silver), sure=False, two_hop=True,
                 check=confirmed, strictness="strict").kind == "declined"  # (one passage)
    # (issue 65, d) the check reads both passages' sentences (what was asked, then the
    # answer); the check saying no keeps a two-hop answer from generated, under 0.8
    read: list[str] = []
    doubted = judge(answer, question, given(mace, silver), sure=False, two_hop=True,
                    strictness="lenient",
                    check=lambda prompt: read.append(prompt[-1]["content"]) or 0.01)
    assert doubted.kind != "generated" and doubted.confidence < 0.8
    assert "ornamental staff of office" in read[-1] and "made of silver and gold" in read[-1]
