"""The CLI as a user runs it. The language model is the fake provider registered in
conftest (``fake/echo``), selected through the environment like any model."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from isotope.cli import app

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = ["ingest", "query", "ask", "list", "delete", "status", "config", "eval",
            "feedback", "log", "weights fit", "weights reset"]
runner = CliRunner()


@pytest.fixture
def fake_models(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ISOTOPE_QUESTION_MODEL", "fake/echo")
    monkeypatch.setenv("ISOTOPE_ANSWER_MODEL", "fake/echo")


@pytest.fixture
def index(tmp_path: Path, examples: Path, fake_models: None) -> Path:
    path = tmp_path / "idx"
    result = runner.invoke(app, ["ingest", str(examples), "--index", str(path), "--plain"])
    assert result.exit_code == 0, result.output
    return path


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_and_is_documented_in_the_readme(command: str) -> None:
    result = runner.invoke(app, [*command.split(), "--help"])
    assert result.exit_code == 0
    assert "--index" in result.output
    readme = (ROOT / "README.md").read_text()
    assert f"isotope {command}" in readme


def test_ingest_json_reports_counts(tmp_path: Path, examples: Path, fake_models: None) -> None:
    result = runner.invoke(app, ["ingest", str(examples), "--index", str(tmp_path / "i"), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] and len(report["added"]) == 4
    assert report["questions"] > 0 and report["llm_calls"] == report["atoms"]
    assert set(report["timings"]) == {"load", "chunk", "context", "atomize", "generate", "embed",
                                      "store"}


def test_plain_ingest_prints_a_line_per_file_and_a_summary(
    tmp_path: Path, examples: Path, fake_models: None
) -> None:
    result = runner.invoke(
        app, ["ingest", str(examples), "--index", str(tmp_path / "i"), "--plain"]
    )
    assert result.exit_code == 0
    assert result.stderr.count("store ") == 4
    assert re.search(r"ingested 4 new, 0 changed, 0 unchanged", result.stdout)


def test_query_raw_json_and_answer(index: Path) -> None:
    result = runner.invoke(
        app, ["query", "How many vacation days do new employees get?", "--index", str(index),
              "--raw", "--json", "-k", "2"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["answer"] is None and len(data["results"]) == 2
    assert data["results"][0]["chunk"]["source"].endswith("handbook.md")
    assert data["results"][0]["matched_questions"]
    assert data["suggested_action"] in {"deliver", "query_more", "refine_query"}
    assert data["top_score"] == data["results"][0]["score"]

    result = runner.invoke(app, ["query", "How many vacation days do new employees get?",
                                 "--index", str(index)])
    assert result.exit_code == 0
    assert "25 days" in result.stdout and "[1]" in result.stdout
    assert "handbook.md" in result.stdout and "suggested action: " in result.stdout


def test_list_status_delete_config(index: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listed = json.loads(runner.invoke(app, ["list", "--index", str(index), "--json"]).stdout)
    assert sorted(Path(s["uri"]).name for s in listed) == [
        "battery-safety.pdf", "faq.html", "handbook.md", "release-notes.txt"]
    assert all(s["questions"] > 0 for s in listed)
    table = runner.invoke(app, ["list", "--index", str(index)]).stdout
    assert "faq.html" in table

    status = json.loads(runner.invoke(app, ["status", "--index", str(index), "--json"]).stdout)
    assert status["counts"]["sources"] == 4 and status["embedding"]["dim"] == 384
    assert "questions" in runner.invoke(app, ["status", "--index", str(index)]).stdout

    faq = next(s["uri"] for s in listed if s["uri"].endswith("faq.html"))
    result = runner.invoke(app, ["delete", faq, "--index", str(index)])
    assert result.exit_code == 0 and "deleted" in result.stdout
    result = runner.invoke(app, ["delete", faq, "--index", str(index)])
    assert result.exit_code == 1 and "no source" in result.stderr

    monkeypatch.setenv("ISOTOPE_TOP_K", "9")
    config = json.loads(runner.invoke(app, ["config", "--index", str(index), "--json"]).stdout)
    assert config["top_k"] == {"value": 9, "from": "env", "group": "retrieval"}
    assert config["question_model"]["from"] == "env"
    assert config["chunk_size"] == {"value": 256, "from": "index", "group": "chunking"}
    assert config["index"]["from"] == "argument"


def test_errors_are_one_clear_line_and_exit_nonzero(
    tmp_path: Path, examples: Path, fake_models: None
) -> None:
    result = runner.invoke(app, ["query", "anything", "--index", str(tmp_path / "none")])
    assert result.exit_code == 1
    assert "no index at" in result.stderr

    (examples / "empty.txt").write_bytes(b"")
    result = runner.invoke(app, ["ingest", str(examples), "--index", str(tmp_path / "i")])
    assert result.exit_code == 1
    assert f"error: {examples / 'empty.txt'}: file is empty" in " ".join(result.stderr.split())
    assert "ingested 4 new" in result.stdout


def test_invalid_settings_are_one_line_naming_the_setting_and_its_origin(
    tmp_path: Path, examples: Path, index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ISOTOPE_CHUNK_SIZE", "abc")
    result = runner.invoke(app, ["status", "--index", str(index)])
    assert result.exit_code == 1 and result.stderr.count("\n") == 1
    assert "chunk_size = 'abc' (from $ISOTOPE_CHUNK_SIZE)" in result.stderr
    monkeypatch.setenv("ISOTOPE_CHUNK_SIZE", "24")  # under the default overlap of 32
    result = runner.invoke(app, ["ingest", str(examples), "--index", str(tmp_path / "new")])
    assert result.exit_code == 1
    assert "chunk_overlap (32) must be smaller than chunk_size (24)" in result.stderr
    assert not (tmp_path / "new").exists()
    monkeypatch.delenv("ISOTOPE_CHUNK_SIZE")
    result = runner.invoke(app, ["project", "create", "p", "--set", "top_k=0"])
    assert result.exit_code == 1
    assert "project 'p': invalid setting: top_k = 0 (from argument)" in result.stderr


def test_query_raw_runs_as_a_fresh_process(index: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "isotope", "query", "What does firmware 3.2 add?", "--raw",
         "--index", str(index)],
        capture_output=True, text=True, timeout=120, check=True,
    )
    assert "release-notes.txt" in done.stdout.splitlines()[0]


def test_readme_opens_with_the_two_commands_and_they_exist() -> None:
    first = [line.strip() for line in (ROOT / "README.md").read_text().splitlines()[:4]]
    assert first[2].startswith("make demo") and first[3].startswith("make test")
    makefile = (ROOT / "Makefile").read_text()
    assert "\ndemo: setup" in makefile and "\ntest: lint" in makefile
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_questions_shows_kept_and_dropped_with_why(index: Path, examples: Path) -> None:
    handbook = str(examples / "handbook.md")
    shown = json.loads(runner.invoke(app, ["questions", handbook, "--index", str(index),
                                           "--json"]).stdout)
    kept = [q for q in shown if q["kept"]]
    dropped = [q for q in shown if not q["kept"]]
    assert kept and dropped and {q["chunk_index"] for q in shown} == {
        q["chunk_index"] for q in kept}
    # the fake model asks "What did it do?" for every atom: the pronoun filter drops it
    assert all(q["reason"] == "" for q in kept)
    assert {q["text"] for q in dropped} >= {"What did it do?"}
    assert all(q["reason"] for q in dropped) and all(q["atom"] for q in shown)
    assert all(q["source"].endswith("handbook.md") for q in shown)

    last = max(q["chunk_index"] for q in shown)
    one = json.loads(runner.invoke(app, ["questions", handbook, "--chunk", str(last),
                                         "--index", str(index), "--json"]).stdout)
    assert one == [q for q in shown if q["chunk_index"] == last]
    text = runner.invoke(app, ["questions", handbook, "--index", str(index)]).stdout
    assert "chunk 0" in text and "dropped: pronoun only" in text and "kept," in text

    sample = json.loads(runner.invoke(app, ["questions", "--sample", "5", "--seed", "3",
                                            "--index", str(index), "--json"]).stdout)
    again = json.loads(runner.invoke(app, ["questions", "--sample", "5", "--seed", "3",
                                           "--index", str(index), "--json"]).stdout)
    assert len(sample) == 5 and sample == again
    assert len({q["source"] for q in json.loads(runner.invoke(app, [
        "questions", "--sample", "60", "--index", str(index), "--json"]).stdout)}) > 1

    missing = runner.invoke(app, ["questions", "nope.md", "--index", str(index)])
    assert missing.exit_code == 1 and "no source 'nope.md'" in missing.stderr
    neither = runner.invoke(app, ["questions", "--index", str(index)])
    assert neither.exit_code == 1 and "give a SOURCE or --sample" in neither.stderr
