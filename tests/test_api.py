"""The Python API end to end: real loaders, chunker, MiniLM embedder and SQLite store;
only the language model's replies are faked."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from isotope import Chunk, Isotope, ModelMismatch, Progress, SourceNotFound
from isotope.embedders import Embedder
from isotope.errors import InvalidIndex
from isotope.settings import Settings
from isotope.stores import SCHEMA_VERSION

from conftest import FakeLLM


def test_ingest_examples_then_the_right_passage_comes_first(iso: Isotope, examples: Path) -> None:
    report = iso.ingest(examples)
    assert report.ok, report.errors
    assert len(report.added) == 4
    assert report.chunks >= 4 and report.atoms > 10 and report.questions > report.atoms
    assert report.questions_dropped > 0  # the pronoun-only question of every atom
    cases = {
        "How many vacation days do new employees get?": "handbook.md",
        "How long does the Orbit R2 battery last?": "faq.html",
        "What is the quiet mode of firmware 3.2?": "release-notes.txt",
        "Where do damaged batteries go?": "battery-safety.pdf",
    }
    for query, expected in cases.items():
        response = iso.search(query, k=3)
        assert Path(response.results[0].chunk.source).name == expected, query
        assert response.results[0].matched_questions
        scores = [r.score for r in response.results]
        assert scores == sorted(scores, reverse=True)
        assert [r.rank for r in response.results] == list(range(1, len(scores) + 1))


def test_provenance_runs_from_question_to_source_offsets(iso: Isotope, examples: Path) -> None:
    iso.ingest(examples)
    result = iso.search("How often should the HEPA filter be replaced?", k=1).results[0]
    chunk = result.chunk
    assert chunk.metadata["headings"][0] == "Orbit R2 FAQ"
    # a file chunk's offsets point into its source text
    md = iso.search("How many vacation days do new employees get?", k=1).results[0].chunk
    raw = Path(md.source).read_text()
    assert raw[md.start : md.end] == md.text
    assert md.metadata["headings"] == ["Employee handbook"]  # where the chunk starts
    pdf = iso.search("How should spare batteries be stored?", k=1).results[0].chunk
    assert pdf.metadata["page"] == 1
    # question -> atom -> chunk
    match = result.matched_questions[0]
    assert match.atom and match.atom in chunk.text


def test_reingesting_unchanged_files_makes_no_llm_call(
    iso: Isotope, examples: Path, fake_llm: FakeLLM
) -> None:
    iso.ingest(examples)
    calls = fake_llm.calls
    report = iso.ingest(examples)
    assert fake_llm.calls == calls
    assert len(report.unchanged) == 4 and not report.added and not report.replaced


def test_a_changed_file_replaces_its_old_chunks(iso: Isotope, examples: Path) -> None:
    iso.ingest(examples)
    before = iso.store.counts()
    notes = examples / "release-notes.txt"
    notes.write_text("Firmware 3.3 adds a turbo mode that doubles the suction power of the robot.")
    report = iso.ingest(examples)
    assert report.replaced == [str(notes.resolve())]
    assert len(report.unchanged) == 3
    hit = iso.search("What does firmware 3.3 add?", k=1).results[0]
    assert "turbo mode" in hit.chunk.text
    for result in iso.search("quiet mode 52 decibels", k=10).results:
        assert "quiet mode" not in result.chunk.text  # the old text is gone
    assert iso.store.counts()["sources"] == before["sources"]
    assert iso.store.keyword_search("chunks", "decibels", 5) == []


def test_bad_files_are_reported_and_the_rest_ingested_without_losing_data(
    iso: Isotope, examples: Path, tmp_path: Path
) -> None:
    iso.ingest(examples / "handbook.md")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "empty.txt").write_bytes(b"")
    (bad / "binary.txt").write_bytes(bytes(range(256)) * 10)
    (bad / "latin1.txt").write_bytes("Caf\xe9 au lait is served at nine.".encode("latin-1"))
    (bad / "corrupt.pdf").write_bytes(b"%PDF-1.4\n1 0 obj << /Type /Catalog")
    (bad / "good.txt").write_text("The cafeteria opens at eight in the morning on weekdays.")
    (bad / "notes.pptx").write_bytes(b"PK")
    report = iso.ingest([bad, tmp_path / "missing.md"])
    failed = {Path(e.path).name: e.message for e in report.errors}
    assert set(failed) == {"empty.txt", "binary.txt", "latin1.txt", "corrupt.pdf", "missing.md"}
    assert "no such file" in failed["missing.md"]
    assert [Path(s.path).name for s in report.skipped] == ["notes.pptx"]
    assert [Path(a).name for a in report.added] == ["good.txt"]
    names = sorted(Path(s.source.uri).name for s in iso.sources())
    assert names == ["good.txt", "handbook.md"]  # the earlier source is still there
    top = iso.search("When does the cafeteria open?", k=1).results[0]
    assert Path(top.chunk.source).name == "good.txt"


def test_include_and_exclude_globs(iso: Isotope, examples: Path) -> None:
    report = iso.ingest(examples, include=["*.md", "*.txt"])
    assert sorted(Path(a).name for a in report.added) == ["handbook.md", "release-notes.txt"]
    report = iso.ingest(examples, exclude=["*.pdf", "*.md", "*.txt"])
    assert [Path(a).name for a in report.added] == ["faq.html"]


def test_delete_sources_and_status(iso: Isotope, examples: Path) -> None:
    iso.ingest(examples)
    status = iso.status()
    assert status.counts["sources"] == 4
    assert status.embedding["model_id"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert status.embedding["dim"] == 384
    assert status.disk_bytes and status.disk_bytes > 0
    assert status.schema_version == SCHEMA_VERSION == 13
    iso.delete(examples / "faq.html")
    assert iso.status().counts["sources"] == 3
    assert all("faq" not in r.chunk.source for r in iso.search("Orbit R2 battery", k=5).results)
    assert iso.store.keyword_search("questions", "HEPA", 5) == []
    with pytest.raises(SourceNotFound, match="isotope list"):
        iso.delete("nope.md")


def test_ingest_chunks_sync_and_async(iso: Isotope) -> None:
    report = iso.ingest_chunks(
        ["The Eiffel Tower is 330 metres tall.", "Mount Everest is 8,849 metres high."],
        source="facts",
    )
    assert report.chunks == 2 and report.added == ["facts"]
    chunk = Chunk(text="The Danube flows through ten countries.", source="rivers")
    report = asyncio.run(iso.aingest_chunks([chunk]))
    assert report.added == ["rivers"]
    assert iso.search("How tall is the Eiffel Tower?", k=1).results[0].chunk.source == "facts"
    assert iso.search("Which river crosses ten countries?", k=1).results[0].chunk.source == "rivers"


def test_progress_callback_sees_counts_grow(iso: Isotope, examples: Path) -> None:
    events: list[Progress] = []
    iso.ingest(examples, progress=events.append)
    assert events[-1].stage == "done"
    assert events[-1].sources_done == events[-1].sources_total == 4
    questions = [e.questions for e in events]
    assert questions == sorted(questions) and questions[-1] > 0
    assert {"load", "generate", "store"} <= {e.stage for e in events}


def test_ask_answers_with_citations_and_declines(iso: Isotope, examples: Path) -> None:
    iso.ingest(examples)
    response = iso.ask("How many vacation days do new employees receive?")
    assert response.answer and "25 days" in response.answer
    assert response.citations == [1]
    assert "handbook" in response.results[0].chunk.source
    assert iso.as_retriever(k=2)("Orbit R2 warranty")[0].chunk.source.endswith("faq.html")


def test_the_index_describes_itself_and_refuses_another_embedding_model(
    tmp_path: Path, embedder: Embedder, fake_llm: FakeLLM
) -> None:
    path = tmp_path / "idx"
    with Isotope.open(path, embedder=embedder, llm=fake_llm, questions_per_atom=2,
                      chunk_size=128) as iso:
        iso.ingest_chunks(["Water boils at 100 degrees Celsius at sea level."])
    with Isotope.open(path, embedder=embedder, llm=fake_llm) as iso:
        assert iso.settings.questions_per_atom == 2  # from the index
        assert iso.origins["questions_per_atom"] == "index"
        assert iso.settings.chunk_size == 128

    class Other(Embedder):
        model_id = "other/model"
        dim = 384

        def embed_batch(self, texts):  # type: ignore[no-untyped-def]
            return embedder.embed_batch(texts)

    with pytest.raises(ModelMismatch, match="all-MiniLM-L6-v2"):
        Isotope.open(path, embedder=Other(), llm=fake_llm)


def test_settings_come_from_env_and_dotenv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, embedder: Embedder
) -> None:
    (tmp_path / ".env").write_text("ISOTOPE_TOP_K=7\nISOTOPE_QUESTIONS_PER_ATOM=4\n")
    monkeypatch.setenv("ISOTOPE_QUESTIONS_PER_ATOM", "3")
    monkeypatch.setenv("ISOTOPE_DEDUP_THRESHOLD", "none")
    with Isotope.open(tmp_path / "idx", embedder=embedder, llm=FakeLLM()) as iso:
        assert iso.settings.top_k == 7 and iso.origins["top_k"] == ".env"
        assert iso.settings.questions_per_atom == 3 and iso.origins["questions_per_atom"] == "env"
        assert iso.settings.dedup_threshold is None
    assert Settings().index == ".isotope"  # a location: a folder or a store URL


def test_opening_a_missing_or_broken_index_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(InvalidIndex, match="no index at"):
        Isotope.open(tmp_path / "nothing", create=False)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "isotope.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(InvalidIndex, match="not a readable isotope index"):
        Isotope.open(broken)


def test_a_new_process_maps_the_vectors_and_sees_new_writes(
    iso: Isotope, examples: Path, embedder: Embedder, fake_llm: FakeLLM
) -> None:
    iso.ingest(examples / "handbook.md")
    assert iso.compact()["questions"] == "exact"
    first = iso.search("vacation days", k=1).results[0].chunk.id
    vectors = Path(iso.settings.index) / "vectors"
    saved = sorted(p.name for p in vectors.glob("questions*"))
    assert len(saved) == 2  # one base: ids and vectors
    with Isotope.open(iso.settings.index, embedder=embedder, llm=fake_llm) as other:
        assert other.search("vacation days", k=1).results[0].chunk.id == first
        other.ingest(examples / "faq.html")  # logged, not compacted: the base stays
    # the first handle sees the other's write at once
    assert iso.search("Orbit R2 battery", k=1).results[0].chunk.source.endswith("faq.html")
    assert sorted(p.name for p in vectors.glob("questions*")) == saved
    iso.compact()
    # the replaced files stay a while (a reader may have just read their name)
    now = sorted(p.name for p in vectors.glob("questions*"))
    assert len(now) == 4 and set(saved) < set(now)
    assert iso.search("Orbit R2 battery", k=1).results[0].chunk.source.endswith("faq.html")


def test_chunk_size_setting_is_used(tmp_path: Path, embedder: Embedder, examples: Path) -> None:
    long = examples / "long.txt"
    long.write_text(" ".join(f"Fact number {i} is written here for testing." for i in range(200)))
    with Isotope.open(tmp_path / "idx", embedder=embedder, llm=FakeLLM(), chunk_size=64,
                      chunk_overlap=8, questions_per_atom=1) as iso:
        report = iso.ingest(long)
        assert report.chunks > 20
        assert all(embedder.count_tokens(r.chunk.text) <= 64
                   for r in iso.search("fact number 150", k=5).results)
    shutil.rmtree(tmp_path / "idx")


def test_llm_atomizer_writes_the_atoms(tmp_path: Path, embedder: Embedder) -> None:
    llm = FakeLLM()
    with Isotope.open(tmp_path / "idx", embedder=embedder, llm=llm, atomizer="llm") as iso:
        report = iso.ingest_chunks(
            ["The Orbit R2 is a vacuum robot. It maps up to five floors."], source="robot"
        )
        assert report.atoms == 2
        assert "list of atomic facts" in llm.prompts[0][0]["content"]
        hit = iso.search("How many floors can the robot map?", k=1).results[0]
        atom = hit.matched_questions[0].atom
        assert atom == "The robot maps up to five floors."  # the model's atom, not the sentence
        assert iso.status().models["atomizer"].startswith("llm")


def test_folders_are_walked_recursively_and_hidden_files_skipped(
    iso: Isotope, tmp_path: Path
) -> None:
    root = tmp_path / "tree"
    (root / "a" / "b").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "a" / "b" / "deep.md").write_text("The deep file explains the cooling system.")
    (root / ".git" / "config.txt").write_text("This hidden file must not be ingested at all.")
    (root / ".hidden.txt").write_text("This hidden file must not be ingested either.")
    (root / "a" / "loop").symlink_to(root)  # a symlink loop ends, it does not recurse
    report = iso.ingest(root)
    assert [Path(p).name for p in report.added] == ["deep.md"]
    assert report.ok


def test_equal_chunks_and_repeated_questions_are_stored_once_each(
    tmp_path: Path, embedder: Embedder
) -> None:
    class Repeating(FakeLLM):
        def _reply(self, user: str) -> str:  # type: ignore[override]
            return "What is the boiling point of water at sea level?"

    with Isotope.open(tmp_path / "idx", embedder=embedder, llm=Repeating(),
                      dedup_threshold=None) as iso:
        text = "Water boils at 100 degrees Celsius at sea level. Water is wet at room temperature."
        report = iso.ingest_chunks([text, text], source="water")
        assert report.chunks == 2 and report.ok
        # one question per chunk: the second atom asked the same question
        assert iso.status().counts["questions"] == 2


def test_a_language_model_failure_leaves_that_file_waiting_for_questions_only(
    tmp_path: Path, embedder: Embedder, examples: Path
) -> None:
    from isotope.errors import ProviderError

    class Failing(FakeLLM):
        def _reply(self, user: str) -> str:  # type: ignore[override]
            if "Orbit R2 FAQ" in user:
                raise ProviderError("fake/echo: the prompt does not fit the context window")
            return FakeLLM._reply(user)

    with Isotope.open(tmp_path / "idx", embedder=embedder, llm=Failing()) as iso:
        report = iso.ingest(examples)
        assert [Path(e.path).name for e in report.errors] == ["faq.html"]
        assert "language model failed" in report.errors[0].message
        # every file is stored and searchable; only the failing one waits for questions
        assert len(report.added) == 4 and report.waiting_chunks >= 1
        waiting = {Path(i.source.uri).name: i.pending for i in iso.sources()}
        assert waiting["faq.html"] >= 1 and sum(waiting.values()) == waiting["faq.html"]
        top = iso.search("Orbit R2 FAQ", k=1, mode="chunks-bm25").results[0]
        assert top.chunk.source.endswith("faq.html")


def test_query_transformation_rewrites_keyword_queries(
    iso: Isotope, examples: Path, fake_llm: FakeLLM
) -> None:
    iso.ingest(examples)
    plain = iso.search("Orbit R2 battery charge time", k=3)
    assert plain.rewrites == []
    rewritten = iso.search("Orbit R2 battery charge time", k=3, transform=True)
    assert rewritten.rewrites == ["What is the Orbit R2 battery charge time?",
                                  "How do I find the Orbit R2 battery charge time?"]
    assert rewritten.results[0].chunk.source.endswith("faq.html")
    assert rewritten.results[0].score >= plain.results[0].score
    assert "transform" in rewritten.timings
    calls = fake_llm.calls
    assert iso.search("How long does the battery last?", transform=True).rewrites == []
    assert fake_llm.calls == calls  # a question is searched as it is


def test_the_stores_grouped_search_agrees_with_the_contracts_default(
    iso: Isotope, examples: Path
) -> None:
    from isotope.stores import Store

    iso.ingest(examples)
    for query in ("Orbit R2 battery", "vacation days", "firmware quiet mode"):
        vector = iso.embedder.embed_one(query)
        fast = iso.store.search_by_chunk("questions", vector, 3, 2)
        default = Store.search_by_chunk(iso.store, "questions", vector, 3, 2)
        assert [(c, [h.text for h in hits]) for c, hits in fast] == [
            (c, [h.text for h in hits]) for c, hits in default]
        assert len(fast) == 3
