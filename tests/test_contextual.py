"""Contextual chunk enrichment (``chunk_context``): the real store and embedder, the model's
replies faked at the provider boundary (one test with the real local model is in
test_local_model.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from isotope import Isotope
from isotope.cli import app
from isotope.embedders import Embedder
from isotope.providers import BatchGenerationError, Prompt

from conftest import FakeLLM

PROJECTS = {
    "zephyr": ("the payments gateway of the web shop", "the on-call engineer with the deploy "
               "tool, within ten minutes"),
    "nimbus": ("the photo storage service", "the release manager from the releases dashboard"),
    "aurora": ("the search backend of the catalogue", "the platform team with a rollback "
               "script"),
    "comet": ("the nightly billing batch", "the database administrators by hand"),
}


def guide(name: str) -> str:
    what, who = PROJECTS[name]
    return (f"# Project {name.title()} operations guide\n\nProject {name.title()} is {what}. "
            f"It has its own team.\n\nRollbacks are done by {who}.\n\nIts dashboards live "
            "in the observability portal and are reviewed every Monday.\n")


ZEPHYR = guide("zephyr")
QUERY = "Who does rollbacks for Zephyr?"


def _context_prompts(llm: FakeLLM) -> list[Prompt]:
    return [p for p in llm.prompts if p[-1]["content"].startswith("<document>")]


def _open(tmp_path: Path, embedder: Embedder, llm: FakeLLM, **settings: object) -> Isotope:
    return Isotope.open(tmp_path / "index", embedder=embedder, llm=llm, cache=False,
                        chunk_size=24, chunk_overlap=0, **settings)


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    for name in PROJECTS:
        (folder / f"{name}.md").write_text(guide(name))
    return folder


def _rank(iso: Isotope, mode: str) -> int:
    """Rank of Zephyr's rollback chunk for QUERY (1 = first)."""
    results = iso.search(QUERY, k=6, mode=mode).results
    for rank, result in enumerate(results, start=1):
        if "on-call engineer" in result.chunk.text:
            return rank
    return 99


def test_a_chunk_is_found_by_what_its_context_says(
    tmp_path: Path, embedder: Embedder, docs: Path
) -> None:
    # Without contexts, Zephyr's rollback chunk is one of four that say "rollbacks", and
    # it never says "Zephyr".
    with Isotope.open(tmp_path / "plain", embedder=embedder, llm=FakeLLM(), cache=False,
                      chunk_size=24, chunk_overlap=0) as plain:
        plain.ingest(docs)
        assert _rank(plain, "chunks-bm25") > 1
    llm = FakeLLM()
    with _open(tmp_path, embedder, llm, chunk_context=True) as iso:
        report = iso.ingest(docs)
        assert report.ok and report.contexts == report.chunks == len(_context_prompts(llm))
        assert _rank(iso, "chunks-bm25") == 1
        assert _rank(iso, "hybrid") == 1
        top = iso.search(QUERY, k=1, mode="chunks-bm25").results[0].chunk
        assert "Zephyr" not in top.text  # results show the chunk's own text...
        assert top.context == ("This chunk is from the document about Project Zephyr "
                               "operations guide.")  # ...and the context, label removed
        assert iso.check() == []
        # the prompt showed the model the document, then the chunk
        prompt = next(p[-1]["content"] for p in _context_prompts(llm)
                      if "on-call" in p[-1]["content"].split("<chunk>")[1])
        assert prompt.index("Project Zephyr is the payments") < prompt.index("<chunk>")
        assert prompt.index("<chunk>") < prompt.rindex("Rollbacks are done by the on-call")
        iso.delete(docs / "zephyr.md")
        assert iso.check() == []  # the keyword index dropped the contexts with the chunks
        assert iso.store.keyword_search("chunks", "Zephyr", 5) == []


def test_contexts_are_written_once_and_kept_for_unchanged_chunks(
    tmp_path: Path, embedder: Embedder, docs: Path
) -> None:
    llm = FakeLLM()
    with _open(tmp_path, embedder, llm, chunk_context=True) as iso:
        first = iso.ingest(docs)
        asked = len(_context_prompts(llm))
        assert asked == first.chunks
        assert len(iso.ingest(docs).unchanged) == 4 and len(_context_prompts(llm)) == asked
        (docs / "zephyr.md").write_text(ZEPHYR.replace("every Monday", "every Friday"))
        report = iso.ingest(docs)
        assert report.reused_chunks == report.chunks - 1 >= 2 and report.contexts == 1
        assert len(_context_prompts(llm)) == asked + 1
        contexts = {r.chunk.text: r.chunk.context
                    for r in iso.search("rollbacks", k=10, mode="chunks-bm25").results}
        assert all(c.startswith("This chunk is from") for c in contexts.values())
        assert iso.check() == []


def test_turning_chunk_context_on_reindexes_and_a_dry_run_counts_its_calls(
    tmp_path: Path, embedder: Embedder, docs: Path
) -> None:
    with _open(tmp_path, embedder, FakeLLM(), context_chars=900) as iso:
        without = iso.plan([docs])
        iso.ingest(docs)
        assert not iso.search(QUERY, k=1).results[0].chunk.context
    # context_chars alone does not change an index made without contexts
    with _open(tmp_path, embedder, FakeLLM(), context_chars=500) as iso:
        assert len(iso.ingest(docs).unchanged) == 4
    llm = FakeLLM()
    with _open(tmp_path, embedder, llm, chunk_context=True) as iso:
        plan = iso.plan([docs])
        assert plan.unchanged == 0 and plan.chunks == without.chunks
        assert plan.llm_calls == without.llm_calls + plan.chunks and llm.calls == 0
        report = iso.ingest(docs)
        assert len(report.replaced) == 4 and report.contexts == report.chunks


class FailingContexts(FakeLLM):
    """Fails the context of every chunk that mentions the deploy tool."""

    def complete_batch(self, prompts: Sequence[Prompt], *, max_tokens: int = 256,
                       temperature: float = 0.0, json_schema: dict[str, Any] | None = None,
                       ) -> list[str]:
        replies = super().complete_batch(prompts, max_tokens=max_tokens,
                                         temperature=temperature, json_schema=json_schema)
        failures = {i: "HTTP 503 from the server" for i, p in enumerate(prompts)
                    if p[-1]["content"].startswith("<document>")
                    and "deploy tool" in p[-1]["content"].split("<chunk>")[1]}
        if failures:
            raise BatchGenerationError(
                [None if i in failures else r for i, r in enumerate(replies)], failures)
        return replies


def test_a_failed_context_is_reported_and_asked_again_alone(
    tmp_path: Path, embedder: Embedder, docs: Path
) -> None:
    with _open(tmp_path, embedder, FailingContexts(), chunk_context=True) as iso:
        report = iso.ingest(docs)
        assert [f.path for f in report.failed_contexts] == [str(docs / "zephyr.md")]
        assert report.contexts == report.chunks - 1
        states = {Path(i.source.uri).name: i.state for i in iso.sources()}
        assert states["zephyr.md"] == "incomplete" and states["nimbus.md"] == "current"
        assert _rank(iso, "chunks-dense") < 99  # stored, searchable, without a context
    llm = FakeLLM()
    with _open(tmp_path, embedder, llm, chunk_context=True) as iso:
        report = iso.ingest(docs)
        assert report.contexts == 1 and len(_context_prompts(llm)) == 1
        assert len(report.unchanged) == 3 and report.reused_chunks == report.chunks - 1
        assert {i.state for i in iso.sources()} == {"current"}
        assert _rank(iso, "chunks-bm25") == 1 and iso.check() == []


def test_cli_ingest_and_eval_with_contexts_over_multi_passage_documents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, docs: Path
) -> None:
    monkeypatch.setenv("ISOTOPE_QUESTION_MODEL", "fake/echo")
    monkeypatch.setenv("ISOTOPE_ANSWER_MODEL", "fake/echo")
    monkeypatch.setenv("ISOTOPE_CHUNK_SIZE", "24")
    monkeypatch.setenv("ISOTOPE_CHUNK_OVERLAP", "0")
    runner = CliRunner()
    result = runner.invoke(app, ["ingest", str(docs), "--index", str(tmp_path / "i"),
                                 "--chunk-context", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["contexts"] == data["chunks"] > 0 and data["failed_contexts"] == []
    shown = runner.invoke(app, ["query", QUERY, "--index", str(tmp_path / "i"), "--json",
                                "--mode", "chunks-bm25"])
    top = json.loads(shown.stdout)["results"][0]["chunk"]
    assert "on-call engineer" in top["text"] and "Zephyr" in top["context"]

    passages, queries = tmp_path / "p.jsonl", tmp_path / "q.jsonl"
    rows = [("z1", "Project Zephyr", "Project Zephyr is the payments gateway."),
            ("z2", "Project Zephyr", "Rollbacks are done by the on-call engineer."),
            ("n1", "Project Nimbus", "Project Nimbus is the photo storage service."),
            ("n2", "Project Nimbus", "Rollbacks of releases are done by the release "
                                     "manager from the releases dashboard.")]
    passages.write_text("".join(json.dumps({"pid": p, "title": t, "text": x}) + "\n"
                                for p, t, x in rows))
    queries.write_text(json.dumps({"question": QUERY, "gold_pid": "z2"}) + "\n")
    scores = {}
    for flag in ("--no-chunk-context", "--chunk-context"):
        result = runner.invoke(app, [
            "eval", str(passages), str(queries), "--documents", "title", flag, "--json",
            "--mode", "chunks-bm25", "--index", str(tmp_path / f"eval{flag}")])
        assert result.exit_code == 0, result.output
        scores[flag] = json.loads(result.stdout)["modes"][0]["recall"]["1"]
    assert scores == {"--no-chunk-context": 0.0, "--chunk-context": 100.0}
    missing = runner.invoke(app, ["eval", str(passages), str(queries), "--documents",
                                  "author"])
    assert missing.exit_code == 1 and "no 'author' field" in missing.output


def test_a_chunk_deep_in_a_long_document_sees_its_own_neighbourhood() -> None:
    """Past ``context_chars``, the model is shown the document's beginning and a window
    around the chunk (not only the first pages); neighbouring chunks share a window."""
    from isotope.ingest import contextual
    from isotope.models import Chunk

    paragraphs = [f"Paragraph {n} is about topic number {n} of the long manual." for n in
                  range(400)]
    document = "\n\n".join(paragraphs)
    chunks = []
    for n in (0, 300, 301, 399):
        start = document.index(paragraphs[n])
        chunks.append(Chunk(text=paragraphs[n], source="manual", index=n, start=start,
                            end=start + len(paragraphs[n])))
    shown = [contextual.excerpt(document, 3000, c.start, c.end) for c in chunks]
    assert all(len(s) <= 3000 + 20 for s in shown)
    assert all(s.startswith("Paragraph 0 is about") for s in shown)  # what it is about
    assert "Paragraph 300 is about" not in shown[0]
    for text, chunk in zip(shown[1:], chunks[1:], strict=True):
        assert chunk.text in text and " [...] " in text  # its own neighbourhood
    assert shown[1] == shown[2]  # neighbours: the same excerpt, one prompt prefix
    assert not shown[3].endswith("[...]")  # the last window runs to the end
    # ready-made chunks (no offsets) are found in the document
    asked = contextual.prompts(document, [Chunk(text=paragraphs[350], source="manual")],
                               max_chars=3000)
    assert "Paragraph 349 is about" in asked[0][-1]["content"].split("<chunk>")[0]
    # a short document is shown whole
    assert contextual.excerpt("short text", 3000, 0, 5) == "short text"


class TooLongTogether(FakeLLM):
    """A server that refuses a batch of several prompts (too long together), and answers
    them one by one."""

    def complete_batch(self, prompts: Sequence[Prompt], *, max_tokens: int = 256,
                       temperature: float = 0.0, json_schema: dict[str, Any] | None = None,
                       ) -> list[str]:
        if len(prompts) > 1:
            from isotope.errors import ProviderError

            raise ProviderError("HTTP 400: the prompts are too long together")
        return super().complete_batch(prompts, max_tokens=max_tokens,
                                      temperature=temperature, json_schema=json_schema)


def test_contexts_asked_again_one_by_one_keep_a_custom_prompt() -> None:
    """A batch the server refuses is asked again chunk by chunk, with the same prompt
    (a ``prompts_dir`` override was dropped on that path before)."""
    from dataclasses import replace

    from isotope.ingest import contextual
    from isotope.models import Chunk
    from isotope.prompts import PROMPTS

    custom = replace(PROMPTS["context"], system="You situate runbook excerpts for SREs.")
    chunks = [Chunk(text=part, source="zephyr") for part in ZEPHYR.split("\n\n")[1:3]]
    llm = TooLongTogether()
    contexts = contextual.situate(llm, ZEPHYR, chunks, title="Zephyr", spec=custom)
    assert len(contexts) == 2 and all(contexts)
    assert len(llm.prompts) == 2  # one by one
    assert all(p[0]["content"] == custom.system for p in llm.prompts)
