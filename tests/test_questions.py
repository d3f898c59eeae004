import numpy as np

from isotope.ingest.questions import duplicates, is_pronoun_only, parse_questions, relevance_reasons


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
