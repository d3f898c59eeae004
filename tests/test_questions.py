from pathlib import Path

import numpy as np
import pytest

from isotope import Isotope
from isotope.embedders import Embedder
from isotope.ingest.questions import (
    answer_kind,
    duplicates,
    is_pronoun_only,
    parse_questions,
    relevance_reasons,
)

from conftest import FakeLLM


def test_parse_strips_numbering_bullets_answers_and_duplicates() -> None:
    reply = """Here are the questions:
1. Which team finished the regular season with a 15-1 record?
   - The Broncos
2) Who was named the NFL Most Valuable Player?
Q3: Who was named the NFL Most Valuable Player?
- **When was the franchise founded?** (answer: 1995)
* What?
Question 5: How many games did the Panthers win in 2015?
6. Which city hosted the game?
"""
    assert parse_questions(reply, 5) == [
        "Which team finished the regular season with a 15-1 record?",
        "Who was named the NFL Most Valuable Player?",
        "When was the franchise founded?",
        "How many games did the Panthers win in 2015?",
        "Which city hosted the game?",
    ]
    assert len(parse_questions(reply, 2)) == 2
    assert parse_questions("", 5) == []
    assert parse_questions("No questions here. Just text.", 5) == []


def test_pronoun_only_questions_are_detected() -> None:
    assert is_pronoun_only("What did he do?")
    assert is_pronoun_only("When was it built?")
    assert not is_pronoun_only("When was the Eiffel Tower built?")
    assert not is_pronoun_only("What did Marie Curie discover in her lab?")


def test_filters_drop_off_topic_and_near_duplicate_questions(embedder) -> None:  # type: ignore[no-untyped-def]
    atom = "The Orbit R2 battery lasts about 140 minutes on a full charge."
    questions = [
        "How long does the Orbit R2 battery last on a full charge?",
        "How long does the battery of the Orbit R2 last when fully charged?",
        "What is the capital city of Mongolia?",
        "What did it do?",
    ]
    vectors = embedder.embed(questions)
    atom_vector = embedder.embed_one(atom)
    reasons = relevance_reasons(questions, vectors, atom_vector, min_similarity=0.3)
    assert reasons[:2] == ["", ""]
    assert reasons[2].startswith("off its atom: similarity ")
    assert reasons[2].endswith("< min_similarity 0.30")
    assert reasons[3] == "pronoun only: its subject is only a pronoun"
    near = duplicates(vectors[:2], 0.85)
    assert near[0] is None and near[1] is not None and near[1][0] == 0 and near[1][1] > 0.85
    assert duplicates(vectors[:2], None) == [None, None]
    assert duplicates(np.zeros((0, 384), dtype=np.float32), 0.85) == []


def test_an_answer_counts_only_when_grounded_in_the_passages_it_cites() -> None:
    from isotope.models import Chunk, SearchResult
    from isotope.search.answer import grounded

    results = [SearchResult(rank=1, score=0.9, chunk=Chunk(
        text="New employees receive 25 days of paid vacation per year.", source="hb"))]
    question = "How many vacation days do new employees get?"
    assert grounded("New employees receive 25 days of paid vacation per year [1].",
                    question, results) == [1]
    assert grounded("New employees receive 30 days of vacation [1].", question, results) == []
    assert grounded("New employees get 25 days.", question, results) == []  # no citation
    assert grounded("The capital of Australia is Canberra [1].",
                    "What is the capital of Australia?", results) == []


@pytest.mark.parametrize(("question", "kind"), [
    ("When was the current hardware revision launched?", "when"),
    ("In what year was the current hardware revision launched?", "when"),
    ("What year did the Orbit R3 ship?", "when"),
    ("On what date did the store open?", "when"),
    ("In which month and day did Luther begin preaching?", "when"),
    ("Who designed the current hardware revision?", "who"),
    ("By whom was the garage built?", "who"),
    ("Whose idea was the redesign?", "who"),
    ("Which person leads the team?", "who"),
    ("Where was the current hardware revision made?", "where"),
    ("In what country was the game broadcast?", "where"),
    ("In what regions did the pamphlets spread?", "where"),
    ("How many hardware revisions have there been?", "quantity"),
    ("How much paid vacation do new staff receive?", "quantity"),
    ("How long does the battery last?", "quantity"),
    ("What number of games did the team win?", "quantity"),
    ("What percentage of staff work remotely?", "quantity"),
    ("Why was the revision delayed?", "why"),
    ("How does the robot find its dock?", "how"),
    ("In what way did the revision change?", "what"),
    ("What is the current hardware revision?", "what"),
    ("What's the current hardware revision?", "what"),
    ("Which team won the game?", "what"),
    ("[2] Who defined Turing machines?", "who"),
    ("According to the text, how many games did they win?", "quantity"),
    ("Is the garage open on Sundays?", None),
    ("Wann wurde die aktuelle Hardware-Revision eingeführt?", None),
])
def test_a_questions_answer_kind_is_read_from_its_first_wh_word(question: str,
                                                                kind: str | None) -> None:
    assert answer_kind(question) == kind


ASKED = [
    "What is the current hardware revision?",
    "When was the current hardware revision launched?",  # another kind: kept
    "What is the current revision of the hardware?",  # a near duplicate of the first
    "In what year was the current hardware revision launched?",  # and of the second
    "How many hardware revisions have there been?",  # another kind: kept
    "Who designed the current hardware revision?",
    "Where was the current hardware revision made?",  # close to who, another kind: kept
    "Was the current hardware revision launched?",  # no kind known: compared with all
]
KEPT = [True, True, False, False, True, True, True, False]


def test_questions_asking_for_another_kind_of_answer_are_not_near_duplicates(
        embedder: Embedder) -> None:
    """Issue 64, item 16: "When was the current hardware revision launched?" was dropped
    as a near-duplicate of "What is the current hardware revision?"."""
    vectors = embedder.embed(ASKED)
    similarity = vectors @ vectors.T
    # the filter would drop them on their vectors alone
    assert similarity[0, 1] > 0.85 and similarity[0, 4] > 0.85 and similarity[5, 6] > 0.85
    near = duplicates(vectors, 0.85, [answer_kind(q) for q in ASKED])
    assert [n is None for n in near] == KEPT
    assert near[2] is not None and near[2][0] == 0  # the same kind is still dropped
    assert near[3] is not None and near[3][0] == 1  # (the kept one of its kind)
    assert near[7] is not None and near[7][0] == 1 and near[7][1] > 0.85


def test_an_ingest_keeps_each_kind_of_question_and_drops_the_same_kind(
        tmp_path: Path, embedder: Embedder) -> None:
    class Asked(FakeLLM):
        def _reply(self, user: str) -> str:  # type: ignore[override]
            if "Statement: " in user:
                return "\n".join(f"{n}. {q}" for n, q in enumerate(ASKED, 1))
            return FakeLLM._reply(user)

    doc = tmp_path / "robot.md"
    doc.write_text("The current hardware revision of the Orbit robot is R3, designed by "
                   "Ada Lindqvist and made in Malmo, launched in March 2024 as the robot's "
                   "fourth hardware revision.\n")
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=Asked(), cache=False,
                      questions_per_atom=len(ASKED)) as iso:
        iso.ingest(doc)
        shown = {q.text: q for q in iso.questions(doc)}
    assert [shown[q].kept for q in ASKED] == KEPT, {q: shown[q].reason for q in ASKED}
    assert shown[ASKED[2]].reason.startswith(f"near-duplicate of {ASKED[0]!r}")
    assert shown[ASKED[3]].reason.startswith(f"near-duplicate of {ASKED[1]!r}")
