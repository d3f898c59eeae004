"""Email, LaTeX and Word documents end to end: ingested through the loader registry,
their metadata filterable with --where and shown in results. The real store and
embedder; the fake model (conftest) writes the questions."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from isotope import Isotope
from isotope.cli import app
from isotope.embedders import Embedder

from conftest import FakeLLM

runner = CliRunner()


def test_the_formats_are_ingested_searchable_and_filterable(
        tmp_path: Path, embedder: Embedder, formats: Path) -> None:
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM()) as iso:
        report = iso.ingest(formats)
        assert report.ok and report.warnings == [] and len(report.added) == 3
        found = iso.search("What is the daily budget for the Lisbon offsite?", k=1)
        top = found.results[0]
        assert Path(top.chunk.source).name == "offsite-planning.eml"
        assert top.source_metadata["from"] == "alice@example.com"  # shown with the result
        only = iso.search("budget", filters={"from": "alice@example.com",
                                             "date": {"gte": "2024-01-01"}})
        assert {Path(r.chunk.source).name for r in only.results} == {"offsite-planning.eml"}
        assert iso.search("budget", filters={"date": {"gte": "2025-01-01"}}).results == []
        assert iso.search("budget", filters={"to": "bob@example.com"}).results

        # a query about a cited work finds the chunk that cites it
        cited = iso.search("Who studied lithium-ion ageing in warehouse fleets?", k=1)
        chunk = cited.results[0].chunk
        assert Path(chunk.source).name == "robot-navigation.tex"
        assert "okafor2021" in chunk.metadata["cite_keys"]
        assert any(w["authors"] == ["Okafor, Chidi", "Müller, Lena"]
                   for w in chunk.metadata["cites"])
        assert iso.search("charger", filters={"cite_keys": "okafor2021"}).results

        word = iso.search("When is the building open on Saturday?", k=1).results[0]
        assert Path(word.chunk.source).name == "visitor-policy.docx"
        assert iso.search("hours", filters={"author": "Facilities Team"}).results


def test_cli_where_on_email_headers_and_warnings_named(
        tmp_path: Path, formats: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("ISOTOPE_QUESTION_MODEL", "fake/echo")
    (formats / "broken.tex").write_text("\\section{Open\nThe lift is out of order.\n")
    index = str(tmp_path / "index")
    done = runner.invoke(app, ["ingest", str(formats), "--index", index, "--plain"])
    assert done.exit_code == 0, done.output
    assert "warning:" in done.stderr and "broken.tex: unbalanced braces" in done.stderr
    found = json.loads(runner.invoke(app, [
        "query", "budget per day", "--raw", "--index", index, "--json",
        "--where", "from=alice@example.com", "--where", "date>=2024-01-01"]).stdout)
    assert [Path(r["chunk"]["source"]).name for r in found["results"]] == [
        "offsite-planning.eml"]
    none = json.loads(runner.invoke(app, [
        "query", "budget per day", "--raw", "--index", index, "--json",
        "--where", "from=bob@example.com"]).stdout)
    assert none["results"] == []


def test_one_real_model_run_over_a_latex_paper(tmp_path: Path, embedder: Embedder,
                                               formats: Path) -> None:
    """The bundled offline model writes the questions of the LaTeX paper: the math and the
    citations reach it and its questions are stored."""
    import pytest

    pytest.importorskip("llama_cpp")
    with Isotope.open(tmp_path / "index", embedder=embedder) as iso:
        report = iso.ingest(formats / "robot-navigation.tex")
        assert report.ok and report.questions > 0
        shown = iso.questions(formats / "robot-navigation.tex")
        assert any(q.kept for q in shown)
