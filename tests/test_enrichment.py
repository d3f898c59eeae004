"""Questions as enrichment, as a user meets it: a source is searchable as soon as its
chunks and atoms are stored, its questions come after (in the same run, or later with
``enrich``), searches meanwhile are fair to chunks still waiting, and the CLI shows the
progress. Real store and embedder; the fake model's replies (the real model goes through
the same stage in test_local_model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from isotope import Isotope
from isotope.cli import app
from isotope.embedders import Embedder
from isotope.ingest.pipeline import Progress

from conftest import FakeLLM, location_of

runner = CliRunner()
PARKING = ("# Parking\n\nThe parking garage opens at six in the morning. Visitors park on "
           "level two.\n")
POOL = ("# Pool\n\nThe swimming pool is heated to twenty-eight degrees. It closes for "
        "cleaning on Mondays.\n")


def _docs(folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "parking.md").write_text(PARKING)
    (folder / "pool.md").write_text(POOL)
    return folder


def _open(index: Path | str, embedder: Embedder, llm: FakeLLM) -> Isotope:
    return Isotope.open(index, embedder=embedder, llm=llm, cache=False)


@pytest.fixture(params=["sqlite", "chroma", "postgresql-chroma"])
def later_location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The embedded index, and its vectors in Chroma beside SQLite and PostgreSQL."""
    return location_of(request, tmp_path)


def test_later_is_searchable_at_once_without_the_model_and_enrich_completes_it(
        tmp_path: Path, embedder: Embedder, later_location: str) -> None:
    llm = FakeLLM()
    with _open(later_location, embedder, llm) as iso:
        report = iso.ingest(_docs(tmp_path / "docs"), questions="later")
        assert llm.calls == 0 and report.questions == 0
        assert report.waiting_chunks == report.chunks == 2
        assert iso.status().counts["chunks_waiting"] == 2
        assert iso.status().counts["sources_waiting"] == 2
        found = iso.search("When does the parking garage open?", k=2)
        assert Path(found.results[0].chunk.source).name == "parking.md"
        assert not found.results[0].has_questions and not found.results[0].matched_questions
        assert iso.search("When does the garage open?", mode="questions-dense").results == []
        assert iso.check() == []
        done = iso.enrich()
        assert done.enriched_chunks == 2 and done.waiting_chunks == 0
        assert done.questions > 0 and llm.calls == done.atoms == report.atoms
        found = iso.search("When does the parking garage open?", k=1)
        assert found.results[0].has_questions and found.results[0].matched_questions
        assert iso.status().counts["chunks_waiting"] == 0
        assert iso.check() == []  # the sources' stored counts follow their new questions
        shown = iso.questions(tmp_path / "docs" / "parking.md")
        stored = next(i for i in iso.sources() if i.source.uri.endswith("parking.md"))
        assert sum(q.kept for q in shown) == stored.questions > 0
        assert any(q.reason.startswith("pronoun only") for q in shown if not q.kept)
        assert done.questions_dropped == len(iso.questions(sample=1000)) - done.questions
        assert iso.enrich().enriched_chunks == 0 and llm.calls == done.atoms  # nothing left


def test_now_stores_every_source_first_then_generates_their_questions(
        tmp_path: Path, embedder: Embedder) -> None:
    events: list[Progress] = []
    with _open(tmp_path / "index", embedder, FakeLLM()) as iso:
        report = iso.ingest(_docs(tmp_path / "docs"), progress=events.append)
        stages = [e.stage for e in events if e.stage in ("store", "generate")]
        assert stages.index("generate") > max(i for i, s in enumerate(stages) if s == "store")
        generating = [e for e in events if e.stage == "generate"]
        assert generating[-1].sources_done == generating[-1].sources_total == 2  # chunks
        assert report.enriched_chunks == 2 and report.waiting_chunks == 0
        assert report.questions == iso.status().counts["questions"] > 0


def test_fusion_neither_rewards_nor_penalises_a_chunk_waiting_for_questions(
        tmp_path: Path, embedder: Embedder) -> None:
    docs = _docs(tmp_path / "docs")
    with _open(tmp_path / "index", embedder, FakeLLM()) as iso:
        iso.ingest(docs / "parking.md")
        iso.ingest(docs / "pool.md", questions="later")
        query = "Is the swimming pool heated?"
        default = {Path(r.chunk.source).name: r
                   for r in iso.search(query, k=2, mode="hybrid").results}
        assert not default["pool.md"].has_questions and default["parking.md"].has_questions
        # the waiting chunk scores exactly as it would in a fusion without question signals
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM(), cache=False,
                      weights={"questions-dense": 0}) as iso:
        alone = iso.search(query, k=2, mode="hybrid")
        pool = next(r for r in alone.results if r.chunk.source.endswith("pool.md"))
        assert abs(default["pool.md"].score - pool.score) < 1e-6
        assert next(iter(default)) == "pool.md"


def test_cli_ingest_later_list_query_and_enrich(tmp_path: Path) -> None:
    docs = _docs(tmp_path / "docs")
    env = {"ISOTOPE_QUESTION_MODEL": "fake/echo", "ISOTOPE_CACHE": "false"}
    index = str(tmp_path / "index")
    done = runner.invoke(app, ["ingest", str(docs), "--index", index, "--questions", "later",
                               "--json"], env=env)
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["waiting_chunks"] == 2
    listed = json.loads(runner.invoke(app, ["list", "--index", index, "--json"],
                                      env=env).output)
    assert [s["chunks_waiting"] for s in listed] == [1, 1]
    hits = json.loads(runner.invoke(app, ["query", "When does the garage open?", "--index",
                                          index, "--raw", "--json"], env=env).output)
    assert hits["results"] and not hits["results"][0]["has_questions"]
    enriched = runner.invoke(app, ["enrich", "--index", index, "--json"], env=env)
    assert enriched.exit_code == 0, enriched.output
    assert json.loads(enriched.output)["enriched_chunks"] == 2
    hits = json.loads(runner.invoke(app, ["query", "When does the garage open?", "--index",
                                          index, "--raw", "--json"], env=env).output)
    assert hits["results"][0]["has_questions"]
    bad = runner.invoke(app, ["ingest", str(docs), "--index", index, "--questions", "soon"],
                        env=env)
    assert bad.exit_code != 0 and "now" in bad.output and "later" in bad.output
    assert "--questions" in runner.invoke(app, ["ingest", "--help"]).output
    assert "waiting" in runner.invoke(app, ["enrich", "--help"]).output


def test_the_model_work_is_told_chunk_by_chunk_as_it_is_written(tmp_path: Path,
                                                                embedder: Embedder) -> None:
    """``isotope ingest`` printed "questions: 0/7 chunks done" for 465 s, then 7/7: a
    window of chunks decoded together said nothing until it all ended. Through a real
    local model (SmolLM2, in-process, batched decoding: one window of six chunks), each
    chunk is told as its questions are written, with the tokens so far and, once a tenth
    is done, the time left; the CLI's lines say them."""
    docs = tmp_path / "docs"
    docs.mkdir()
    topics = ["The harbour ferry leaves at seven.", "The city library opens at nine.",
              "The bakery sells rye bread.", "The museum shows old maps.",
              "The swimming pool closes on Mondays.", "The garden centre sells roses."]
    for i, text in enumerate(topics):
        (docs / f"{i}.md").write_text(text + "\n")
    events: list[Progress] = []
    with Isotope.open(tmp_path / "index", embedder=embedder, cache=False,
                      question_model="local/smollm2-135m", generation="batched",
                      questions_per_atom=1, max_repairs=0) as iso:
        report = iso.ingest(docs, progress=events.append)
    assert report.ok and report.chunks == 6
    told = [e for e in events if e.stage == "generate"]
    done = [e.sources_done for e in told]
    assert done == sorted(done) and done[-1] == 6
    assert len(set(done) - {0, 6}) >= 3, done  # (one by one, not the window at its end)
    tokens = [e.tokens for e in told]
    assert tokens == sorted(tokens) and tokens[-1] > 0
    assert any(e.tokens > 0 for e in told if e.sources_done < 6)  # (as they are written)
    later = [e for e in told if e.sources_done >= 1]
    assert later and all(e.eta_s is not None and e.eta_s >= 0 for e in later)
    assert "tokens written" in later[0].model_work() and "left" in later[0].model_work()
