"""The first hour of a new user at the command line (issue 42, items 19, 22, 23): `ask`
as the library, HTTP and MCP name it, one style of error, a filter naming a key the
index does not have, limits the same on every surface, a short top-level help. The
bundled embedder and the real SQLite store; the model is the fake provider."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from isotope import Isotope
from isotope.cli import app
from isotope.embedders import Embedder
from isotope.errors import InvalidArgument
from isotope.models import Chunk
from isotope.search.filters import FilterError

from conftest import FakeLLM

runner = CliRunner()


@pytest.fixture
def index(tmp_path: Path, examples: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ISOTOPE_QUESTION_MODEL", "fake/echo")
    monkeypatch.setenv("ISOTOPE_ANSWER_MODEL", "fake/echo")
    path = tmp_path / "idx"
    done = runner.invoke(app, ["ingest", str(examples), "--index", str(path), "--plain"])
    assert done.exit_code == 0, done.output
    return path


def test_ask_is_query(index: Path) -> None:
    question = "How many vacation days do new employees get?"
    asked = runner.invoke(app, ["ask", question, "--index", str(index), "--raw"])
    queried = runner.invoke(app, ["query", question, "--index", str(index), "--raw"])
    def without_id(output: str) -> list[str]:
        return [line for line in output.splitlines() if not line.startswith("query id")]

    assert asked.exit_code == 0 and without_id(asked.output) == without_id(queried.output)
    assert "[1]" in asked.output


def test_usage_errors_are_one_line_like_every_other(index: Path) -> None:
    for args, says in ((["qurey", "x"], "No such command 'qurey'. Did you mean 'query'?"),
                       (["ingest", str(index), "-n", "0", "--index", str(index)],
                        "--questions-per-atom"),
                       (["query", "x", "-k", "0", "--index", str(index)], "k = 0")):
        done = runner.invoke(app, args)
        assert done.exit_code in (1, 2), done.output
        assert says in done.output and done.output.startswith("error:"), done.output
        assert "╭" not in done.output and len(done.output.strip().splitlines()) == 1


def test_a_filter_naming_a_key_the_index_lacks_names_those_it_has(
        index: Path, tmp_path: Path, embedder: Embedder) -> None:
    done = runner.invoke(app, ["query", "vacation days", "--index", str(index), "--raw",
                               "--where", "yaer>=2020"])
    assert done.exit_code == 1
    assert "no chunk or source of this index has the key 'yaer'" in done.output
    assert "title" in done.output and "type" in done.output
    kept = runner.invoke(app, ["query", "vacation days", "--index", str(index), "--raw",
                               "--where", "title=No such title"])
    assert kept.exit_code == 0 and "no results" in kept.output  # (a key it has)
    with Isotope.open(tmp_path / "chunks", embedder=embedder, llm=FakeLLM(),
                      cache=False) as iso:  # (chunks given with metadata of their own)
        iso.ingest_chunks([Chunk(source="boats", text="The kayak is red.",
                                 metadata={"colour": "red"})])
        assert iso.search("kayak", filters={"colour": "red"}).results
        assert iso.search("kayak", filters={"shade": "red"}).results == []


def test_a_query_longer_than_http_takes_is_refused_everywhere(
        index: Path, tmp_path: Path, embedder: Embedder) -> None:
    long = "why " * 2_501  # 10,004 characters: HTTP and MCP refuse past 10,000
    done = runner.invoke(app, ["query", long, "--index", str(index), "--raw"])
    assert done.exit_code == 1 and "at most 10,000" in done.output
    with Isotope.open(index, embedder=embedder, llm=FakeLLM(), cache=False) as iso, \
            pytest.raises(InvalidArgument, match="at most 10,000"):
        iso.search(long)
    with Isotope.open(index, embedder=embedder, llm=FakeLLM(), cache=False) as iso, \
            pytest.raises(FilterError, match="'yaer'"):
        iso.search("vacation days", filters={"yaer": {"gte": 2020}})


def test_the_top_level_help_is_short_and_starts_with_the_first_steps() -> None:
    shown = runner.invoke(app, ["--help"]).output
    commands = [line.split()[1] for line in shown.splitlines()
                if line.startswith("│ ") and len(line.split()) > 1
                and line.split()[1].isalpha() and line[2] != " "]
    assert commands[:3] == ["ingest", "ask", "query"] and "audit" in commands
    assert len(shown.splitlines()) < 60


def test_a_first_try_from_the_package_alone(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Getting started worked only in a clone (``examples/``), and a mistyped path made
    an empty index (issue 42, item 20)."""
    monkeypatch.chdir(tmp_path)
    missing = runner.invoke(app, ["ingest", "no-such-folder", "--index", "idx"])
    assert missing.exit_code == 1 and "no index was made" in missing.output
    assert not (tmp_path / "idx").exists()
    written = runner.invoke(app, ["sample", "my-docs"])
    assert written.exit_code == 0, written.output
    assert (tmp_path / "my-docs" / "handbook.md").read_bytes() == (
        Path(__file__).parent.parent / "examples" / "handbook.md").read_bytes()
    again = runner.invoke(app, ["sample", "my-docs"])
    assert again.exit_code == 1 and "not an empty folder" in again.output
    done = runner.invoke(app, ["ingest", "my-docs", "--index", "idx", "--questions", "later"])
    assert done.exit_code == 0 and "11 new" in done.output, done.output
    asked = runner.invoke(app, ["ask", "How many vacation days do new employees get?",
                                "--index", "idx", "--raw"])
    assert asked.output.startswith("[1]") and "my-docs/handbook.md" in asked.output
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    assert "isotope sample" in readme


def test_an_ingest_into_a_pipe_says_how_far_the_model_is(
        tmp_path: Path, examples: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Piped, an ingest printed nothing for 17 minutes; on a terminal the bar said
    ``questions 0`` for the whole model phase (issue 42, item 21): a line at each stage
    and every 15 s, the model phase's chunks and questions counted as they come."""
    from isotope.cli import ingesting

    monkeypatch.setenv("ISOTOPE_QUESTION_MODEL", "fake/echo")
    monkeypatch.setattr(ingesting, "EVERY", 0.01)
    done = runner.invoke(app, ["ingest", str(examples), "--index", str(tmp_path / "i")])
    assert done.exit_code == 0, done.output
    lines = [line for line in done.output.splitlines() if line.startswith("[")]
    phases = [line.split("] ")[1].split(":")[0] for line in lines]
    assert phases[0] == "documents" and "questions" in phases, lines
    generating = [line for line in lines if "] questions:" in line]
    assert _questions_said(generating[-1]) > 0  # questions counted


def test_a_piped_ingest_says_where_each_phase_ended(
        tmp_path: Path, examples: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The questions phase's last line could be its first event's (0 questions) when no
    timed line came between the last reply and the end (a loaded box: the test above
    failed so): a phase's last state is said before the next phase's first line."""
    from isotope.cli import ingesting

    monkeypatch.setenv("ISOTOPE_QUESTION_MODEL", "fake/echo")
    monkeypatch.setattr(ingesting, "EVERY", 3600.0)  # (no timed lines at all)
    done = runner.invoke(app, ["ingest", str(examples), "--index", str(tmp_path / "i")])
    assert done.exit_code == 0, done.output
    generating = [line for line in done.output.splitlines() if "] questions:" in line]
    assert generating and _questions_said(generating[-1]) > 0, done.output


def _questions_said(line: str) -> int:
    """The questions a progress line counts (``..., 1210 questions[, N tokens written,
    about N s left]``)."""
    found = re.search(r", (\d+) questions\b", line)
    assert found is not None, line
    return int(found.group(1))


def test_status_and_a_client_show_what_means_something(index: Path) -> None:
    """``status`` said ``sources_without_access 4`` with access control off, and a
    ``Client`` had no useful repr (issue 42, item 23)."""
    from isotope import Client

    shown = runner.invoke(app, ["status", "--index", str(index)]).output
    assert "sources_without_access" not in shown and "chunks" in shown
    guarded = runner.invoke(app, ["status", "--index", str(index)],
                            env={"ISOTOPE_ACCESS_CONTROL": "true"}).output
    assert "sources_without_access" in guarded
    client = Client("http://alice:pa55word@127.0.0.1:8000/", api_key="k" * 24)
    assert repr(client) == "Client(url='http://alice:***@127.0.0.1:8000', api_key='set')"


def test_a_right_first_hit_on_a_small_index_is_not_said_to_be_missing(
        tmp_path: Path, examples: Path) -> None:
    """On the sample's few documents, ingested with ``--questions later``, right first
    hits scored 0.70-0.77 and were told ``refine_query`` (issue 42, item 18: hybrid's
    score is standardised over few candidates). A chunk waiting for its questions is also
    judged by how similar the query is to its best atom and its text (cosines, the same
    at every size and under every filter); a question the documents do not answer still
    reads ``refine_query``."""
    path = tmp_path / "idx"
    done = runner.invoke(app, ["ingest", str(examples), "--index", str(path),
                               "--questions", "later", "--plain"])
    assert done.exit_code == 0, done.output
    with Isotope.open(path, create=False) as iso:
        for query, source in (("What does the warranty cover?", "faq.html"),
                              ("Who replaces a lost badge?", "handbook.md"),
                              ("Can I carry unused vacation over?", "handbook.md")):
            for where in ({}, {"source": str(examples / source)}):
                found = iso.search(query, 3, filters=where)
                assert found.results[0].chunk.source.endswith(source)
                assert not found.results[0].has_questions
                assert found.suggested_action != "refine_query", (query, where, found.top_score)
        for query in ("What is the capital of France?", "Who won the 1998 football world cup?"):
            assert iso.search(query, 3).suggested_action == "refine_query", query


@pytest.mark.parametrize("left_out", [None, "release-notes.txt"])
def test_a_right_first_hit_scoring_under_0_72_on_a_few_files_is_not_told_to_rephrase(
        tmp_path: Path, examples: Path, embedder: Embedder, left_out: str | None) -> None:
    """On the example files with their questions made (four files, four chunks; or three),
    right first hits scored 0.68-0.72 and, their best matched question too far for the
    cosine rule, read ``refine_query``: below 5 chunks hybrid's thresholds were those of 5
    (refine 0.723, set where the questions the index cannot answer outnumber the others),
    under which fell 16% of SQuAD's right first results on 4 passages, 28% on 3 (issue 64,
    item 20). ``refine`` by size is now no higher than the score under which fall 5% of the
    right first results (0.688 at 4 chunks, 0.647 at 3); questions about nothing in the
    files still read ``refine_query``."""
    from isotope.search.retrieval import CONFIDENCE

    if left_out:
        (examples / left_out).unlink()
    with Isotope.open(tmp_path / "idx", embedder=embedder, llm=FakeLLM()) as iso:
        iso.ingest(examples)
        assert iso.store.counts()["chunks"] == (3 if left_out else 4)
        for query, source in (("Can I carry unused vacation over?", "handbook.md"),
                              ("How often do I change the filter?", "faq.html"),
                              ("How long is the warranty?", "faq.html")):
            for where in ({}, {"source": str(examples / source)}):
                found = iso.search(query, 3, filters=where)
                first = found.results[0]
                assert first.chunk.source.endswith(source) and first.has_questions
                assert found.top_score < 0.723, (query, found.top_score)  # (0.685-0.722)
                # (no cosine lifts it: its best matched question is under questions-dense's)
                assert max(q.score for q in first.matched_questions) < CONFIDENCE[
                    "questions-dense"][1]
                assert found.suggested_action != "refine_query", (query, where,
                                                                  found.top_score)
        for query in ("What is the capital of France?", "Who won the 1998 football world cup?",
                      "zebra migration patterns in the Serengeti"):
            assert iso.search(query, 3).suggested_action == "refine_query", query
