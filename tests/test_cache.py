"""Never pay twice: the reply and embedding cache, dry runs, partial failures."""

from __future__ import annotations

from pathlib import Path

from isotope import IngestReport, Isotope
from isotope.embedders import Embedder
from isotope.providers import BatchGenerationError, Prompt

from conftest import FakeLLM


class RenamedEmbedder(Embedder):
    """The real MiniLM under another model id: another embedding model, as the cache and
    the index see it."""

    model_id = "renamed/minilm"
    dim = 384

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.calls = 0

    def embed_batch(self, texts):  # type: ignore[no-untyped-def]
        self.calls += len(texts)
        return self.inner.embed_batch(texts)


def _ingest(index: Path, examples: Path, **open_args: object) -> IngestReport:
    """Ingest the examples into a new index (sharing the cache of the test's home)."""
    with Isotope.open(index, **open_args) as iso:  # type: ignore[arg-type]
        return iso.ingest(examples)


def test_a_second_index_of_the_same_corpus_makes_no_model_or_embedding_call(
    tmp_path: Path, embedder: Embedder, examples: Path
) -> None:
    llm = FakeLLM()
    first = _ingest(tmp_path / "one", examples, embedder=embedder, llm=llm)
    assert first.llm_calls == first.atoms > 0 and first.embedded > 0
    with Isotope.open(tmp_path / "two", embedder=embedder, llm=llm) as iso:
        calls = llm.calls
        second = iso.ingest(examples)
        assert llm.calls == calls
        assert second.llm_calls == 0 and second.llm_cache_hits == first.atoms
        assert second.embedded == 0
        assert second.embedding_cache_hits == first.embedded + first.embedding_cache_hits
        assert second.questions == first.questions
        assert iso.search("How many vacation days do new employees get?", k=1).results[
            0].chunk.source.endswith("handbook.md")


def test_changing_the_embedding_model_re_embeds_but_does_not_regenerate(
    tmp_path: Path, embedder: Embedder, examples: Path
) -> None:
    llm = FakeLLM()
    first = _ingest(tmp_path / "one", examples, embedder=embedder, llm=llm)
    other = RenamedEmbedder(embedder)
    with Isotope.open(tmp_path / "two", embedder=other, llm=llm) as iso:
        second = iso.ingest(examples)
        assert iso.status().embedding["model_id"] == "renamed/minilm"
    assert second.llm_calls == 0 and second.llm_cache_hits == first.atoms
    assert other.calls == second.embedded > 0


def test_dry_run_counts_calls_and_cache_hits_without_calling_the_model(
    tmp_path: Path, embedder: Embedder, examples: Path
) -> None:
    llm = FakeLLM()
    with Isotope.open(tmp_path / "one", embedder=embedder, llm=llm) as iso:
        plan = iso.plan(examples)
        assert llm.calls == 0 and iso.status().counts["sources"] == 0
        assert plan.sources == 4 and plan.chunks == 4 and plan.cached_calls == 0
        assert plan.llm_calls == plan.atoms > 0
        assert plan.estimated_prompt_tokens > plan.atoms * 20
        report = iso.ingest(examples)
        assert report.atoms == plan.atoms and report.llm_calls == plan.llm_calls
        assert iso.plan(examples).unchanged == 4
    with Isotope.open(tmp_path / "two", embedder=embedder, llm=llm) as iso:
        again = iso.plan(examples)
        assert again.cached_calls == again.llm_calls == plan.llm_calls
        assert again.estimated_prompt_tokens == 0


class Flaky(FakeLLM):
    """Fails every prompt about the HEPA filter until ``healed``."""

    healed = False

    def complete_batch(self, prompts, **kwargs):  # type: ignore[no-untyped-def]
        bad = {i for i, p in enumerate(prompts) if "HEPA" in _statement(p)}
        if self.healed or not bad:
            return super().complete_batch(prompts, **kwargs)
        good = super().complete_batch([p for i, p in enumerate(prompts) if i not in bad], **kwargs)
        replies = iter(good)
        results = [None if i in bad else next(replies) for i in range(len(prompts))]
        raise BatchGenerationError(results, dict.fromkeys(bad, "HTTP 503"))


def _statement(prompt: Prompt) -> str:
    return prompt[-1]["content"].split("Statement:", 1)[-1].split("\n", 1)[0].strip()


def test_a_partly_failed_batch_keeps_its_successes_and_a_rerun_asks_only_for_the_rest(
    tmp_path: Path, embedder: Embedder, examples: Path
) -> None:
    llm = Flaky()
    with Isotope.open(tmp_path / "idx", embedder=embedder, llm=llm) as iso:
        report = iso.ingest(examples)
        assert report.ok  # every file is stored ...
        assert len(report.failed_atoms) == 1  # ... but one atom has no questions yet
        assert "HEPA" in report.failed_atoms[0].message
        assert "HTTP 503" in report.failed_atoms[0].message
        atoms = report.atoms
        llm.healed = True
        llm.prompts.clear()
        assert report.waiting_chunks == 1  # that atom's chunk waits for the rest
        again = iso.ingest(examples)  # every file current: the waiting chunk is enriched
        assert again.replaced == [] and len(again.unchanged) == 4
        assert again.enriched_chunks == 1 and again.waiting_chunks == 0
        assert [_statement(p) for p in llm.prompts] == [
            "Replace the HEPA filter of the Orbit R2 every two months."]
        assert again.llm_calls == 1 and again.llm_cache_hits == 5 and not again.failed_atoms
        assert atoms == report.atoms
        top = iso.search("How often is the HEPA filter replaced?", k=1).results[0]
        assert "HEPA" in top.matched_questions[0].atom


def test_one_call_per_chunk_keeps_each_question_with_its_atom(
    tmp_path: Path, embedder: Embedder, examples: Path
) -> None:
    llm = FakeLLM()
    with Isotope.open(tmp_path / "idx", embedder=embedder, llm=llm, generation="chunk") as iso:
        report = iso.ingest(examples)
        assert report.llm_calls == report.chunks == 4 < report.atoms
        assert report.questions > report.atoms
        assert all("Statements:" in p[-1]["content"] for p in llm.prompts)
        hit = iso.search("How often should the HEPA filter be replaced?", k=1).results[0]
        assert "HEPA" in hit.matched_questions[0].atom
        assert "HEPA" in hit.matched_questions[0].text


def test_chunk_reply_parsing_accepts_json_or_numbered_lines() -> None:
    from isotope.ingest.generation import chunk_schema, parse_chunk_reply

    assert parse_chunk_reply('{"1": ["Who won the game?"], "2": ["When was it played?", '
                             '"Where was the game played?"]}', 2, 5) == [
        ["Who won the game?"], ["When was it played?", "Where was the game played?"]]
    assert parse_chunk_reply("1: Who won the game?\n2: Where was the game played?\n"
                             "3: out of range question?", 2, 5) == [
        ["Who won the game?"], ["Where was the game played?"]]
    assert parse_chunk_reply("nothing useful", 2, 5) == [[], []]
    assert chunk_schema(2, 3)["required"] == ["1", "2"]
