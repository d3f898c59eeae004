"""What an index fixes when it is made, and what it shows of itself (issue 64, items 8,
9, 10 and 15): a setting the index fixed, given with another value, is refused in one line
that says how to change it, and nothing is stored; ``isotope config`` and ``status`` show
the index's own values; a Chroma prefix another index holds is refused before anything is
written; equal scores come out in the order of their chunk ids on every engine and in a
copy. Real stores, the bundled embedder, the fake model's replies."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from isotope import Isotope, stores
from isotope.cli import app
from isotope.embedders import Embedder
from isotope.errors import FixedSetting, SettingsError, StoreError
from isotope.search.retrieval import MODES

from conftest import FakeLLM, fresh_schema

runner = CliRunner()
ENV = {"ISOTOPE_QUESTION_MODEL": "fake/echo", "ISOTOPE_ANSWER_MODEL": "fake/echo"}
FERRY = ("The harbour ferry to Dalby leaves from the eastern pier at nine, and the last "
         "one comes back at six.")
GYM = "The staff gym on the second floor opens at seven and closes at ten."


def _one_line(stderr: str) -> str:
    assert stderr.count("\n") == 1, stderr
    assert "Traceback" not in stderr
    return stderr


def _made(path: Path, embedder: Embedder, **settings: Any) -> Path:
    """An index with one source (questions later: no model is called)."""
    with Isotope.open(path, embedder=embedder, cache=False, **settings) as iso:
        iso.ingest_chunks([GYM], source="gym", questions="later")
    return path


def _state(path: Path | str) -> tuple[Any, ...]:
    """What a refused call must leave as it was: the counts, the entities, the saved
    settings and where the vectors are."""
    store = stores.open(path, create=False)
    try:
        return (store.counts(), store.entities([], top=100), store.get_meta("settings"),
                store.get_meta("vector_backend"))
    finally:
        store.close()


# -- 8. a setting the index fixed, given with another value ------------------------------
FIXED = [("graph", True, "true", "ingest --force"),
         ("questions_per_atom", 3, "3", "ingest --force"),
         ("vector_backend", "chroma", "chroma", "isotope copy")]


@pytest.mark.parametrize(("name", "value", "text", "how"), FIXED)
def test_a_fixed_setting_given_otherwise_is_refused_and_nothing_is_stored(
        tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch, name: str,
        value: Any, text: str, how: str) -> None:
    index = _made(tmp_path / "index", embedder)
    before = _state(index)
    with pytest.raises(FixedSetting, match=rf"{name} = .*{text}.* \(from an argument\): the "
                       rf"index at .* was made with {name} = .*; to change it, .*{how}") as got:
        Isotope.open(index, embedder=embedder, llm=FakeLLM(), cache=False, **{name: value})
    assert isinstance(got.value, SettingsError) and got.value.setting == name
    monkeypatch.setenv(f"ISOTOPE_{name.upper()}", text)
    with pytest.raises(FixedSetting, match=rf"from \$ISOTOPE_{name.upper()}"):
        Isotope.open(index, embedder=embedder, cache=False)
    for command in (["enrich"], ["query", "When does the gym open?"], ["status"]):
        said = runner.invoke(app, [*command, "--index", str(index)], env=ENV)
        assert said.exit_code == 1, said.output
        assert f"{name} = " in _one_line(said.stderr) and how in said.stderr
    assert _state(index) == before
    monkeypatch.delenv(f"ISOTOPE_{name.upper()}")
    monkeypatch.chdir(tmp_path)  # (a config file: .env)
    (tmp_path / ".env").write_text(f"ISOTOPE_{name.upper()}={text}\n")
    said = runner.invoke(app, ["enrich", "--index", str(index)], env=ENV)
    assert said.exit_code == 1 and f"ISOTOPE_{name.upper()} in .env" in _one_line(said.stderr)
    assert _state(index) == before
    (tmp_path / ".env").unlink()
    with Isotope.open(index, embedder=embedder, cache=False) as iso:  # (unset: the index's)
        assert iso.origins[name] == "index"
        assert getattr(iso.settings, name) == {"graph": False, "questions_per_atom": 5,
                                               "vector_backend": "usearch"}[name]


def test_the_same_value_given_is_taken_and_an_index_made_with_chroma_keeps_it(
        tmp_path: Path, embedder: Embedder, caplog: pytest.LogCaptureFixture) -> None:
    index = _made(tmp_path / "index", embedder, vector_backend="chroma", graph=True,
                  questions_per_atom=2)
    with caplog.at_level(logging.WARNING), Isotope.open(
            index, embedder=embedder, cache=False, vector_backend="chroma", graph=True,
            questions_per_atom=2) as iso:
        assert iso.vector_backend == "chroma" and iso.settings.graph
    assert not caplog.records
    with pytest.raises(FixedSetting, match="vector_backend = usearch"):
        Isotope.open(index, embedder=embedder, cache=False, vector_backend="usearch")


def test_the_issue_s_case_enrich_with_the_graph_on_is_refused_and_ingest_force_turns_it_on(
        tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ISOTOPE_GRAPH=true isotope enrich`` on an index made without the graph stored
    entities while the index kept graph = false; now it is refused, and ``ingest --force``
    makes the graph the index's (``--dry-run`` first plans it and changes nothing)."""
    doc = tmp_path / "ferry.md"
    doc.write_text(FERRY + "\n")
    index = str(tmp_path / "index")
    made = runner.invoke(app, ["ingest", str(doc), "--index", index, "--questions", "later"],
                         env=ENV)
    assert made.exit_code == 0, made.output
    before = _state(Path(index))
    monkeypatch.setenv("ISOTOPE_GRAPH", "true")
    refused = runner.invoke(app, ["enrich", "--index", index], env=ENV)
    assert refused.exit_code == 1 and "graph = true" in _one_line(refused.stderr)
    assert _state(Path(index)) == before
    planned = runner.invoke(app, ["ingest", str(doc), "--index", index, "--force",
                                  "--dry-run"], env=ENV)
    assert planned.exit_code == 0, planned.output
    assert _state(Path(index)) == before
    forced = runner.invoke(app, ["ingest", str(doc), "--index", index, "--force"], env=ENV)
    assert forced.exit_code == 0, forced.output
    monkeypatch.delenv("ISOTOPE_GRAPH")
    shown = json.loads(runner.invoke(app, ["config", "--index", index, "--json"]).stdout)
    assert shown["graph"] == {"value": True, "from": "index", "group": "questions"}
    found = runner.invoke(app, ["query", "Where does the ferry to Dalby leave from?",
                                "--index", index, "--mode", "graph", "--json"], env=ENV)
    assert found.exit_code == 0, found.output
    assert json.loads(found.stdout)["results"], found.output


def test_remake_changes_the_index_s_value_only_through_a_forced_ingest(
        tmp_path: Path, embedder: Embedder) -> None:
    index = _made(tmp_path / "index", embedder)
    with Isotope.open(index, embedder=embedder, llm=FakeLLM(), cache=False,
                      questions_per_atom=2, remake=True) as iso:
        with pytest.raises(FixedSetting, match="questions_per_atom = 2 is not the index's"):
            iso.enrich()
        assert iso.plan([]).sources == 0
        assert Isotope.saved_settings(index)["questions_per_atom"] == 5  # type: ignore[index]
    doc = tmp_path / "gym.md"
    doc.write_text(GYM + "\n")
    with Isotope.open(index, embedder=embedder, llm=FakeLLM(), cache=False,
                      questions_per_atom=2, remake=True) as iso:
        iso.ingest(doc, force=True)
    with Isotope.open(index, embedder=embedder, cache=False) as iso:
        assert iso.settings.questions_per_atom == 2 and iso.origins["questions_per_atom"] == \
            "index"
        asked = [q for q in iso.store.generated_questions(source=str(doc)) if q.kept]
        assert 0 < len(asked) <= 2 * iso.counts()["atoms"]


# -- 9. config and status show what the index is ------------------------------------------
def test_config_and_status_show_the_index_s_backend_and_graph(
        tmp_path: Path, embedder: Embedder) -> None:
    chroma = str(_made(tmp_path / "chroma", embedder, vector_backend="chroma"))
    graph = str(_made(tmp_path / "graph", embedder, graph=True))
    for index, backend, on in ((chroma, "chroma", False), (graph, "usearch", True)):
        shown = json.loads(runner.invoke(app, ["config", "--index", index, "--json"]).stdout)
        assert shown["vector_backend"]["value"] == backend
        assert shown["vector_backend"]["from"] == "index"
        assert shown["graph"]["value"] is on and shown["graph"]["from"] == "index"
        assert shown["refused"] == []
        table = runner.invoke(app, ["config", "--index", index])
        row = next(line for line in table.stdout.splitlines() if "vector_backend" in line)
        assert f'"{backend}"' in row and "index" in row and "default" not in row
        status = json.loads(runner.invoke(app, ["status", "--index", index, "--json"]).stdout)
        assert (status["vector_backend"], status["keyword_engine"], status["graph"]) == (
            backend, "fts5", on)
        rows = [line.split() for line in
                runner.invoke(app, ["status", "--index", index]).stdout.splitlines()]
        for row in (["vector", "backend", backend], ["keyword", "search", "fts5"],
                    ["graph", "on" if on else "off"]):
            assert row in rows, rows


def test_config_names_a_refused_value_and_shows_the_index_s(
        tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    index = str(_made(tmp_path / "index", embedder))
    monkeypatch.setenv("ISOTOPE_GRAPH", "true")
    said = runner.invoke(app, ["config", "--index", index, "--json"])
    assert said.exit_code == 0
    shown = json.loads(said.stdout)
    assert shown["graph"] == {"value": False, "from": "index", "group": "questions"}
    assert len(shown["refused"]) == 1 and "graph = true" in shown["refused"][0]
    assert "refused: graph = true" in _one_line(said.stderr)


# -- 10. a Chroma prefix another index holds -------------------------------------------------
def test_a_prefix_another_index_holds_is_refused_before_anything_is_written(
        tmp_path: Path, embedder: Embedder, chroma_server: str,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("ISOTOPE_VECTOR_BACKEND", f"{chroma_server}/taken")
    doc = tmp_path / "gym.md"
    doc.write_text(GYM + "\n")
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    made = runner.invoke(app, ["ingest", str(doc), "--index", first, "--questions", "later"])
    assert made.exit_code == 0, made.output
    refused = runner.invoke(app, ["ingest", str(doc), "--index", second, "--questions",
                                  "later"])
    assert refused.exit_code == 1
    assert "holds another index's vectors" in refused.stderr
    assert "nothing was stored" in refused.stderr
    assert not Path(second).exists()  # (the folder this ingest made is gone)
    kept = tmp_path / "kept"  # (a folder that was there stays: an index with nothing in it)
    kept.mkdir()
    with pytest.raises(StoreError, match="holds another index's vectors"):
        Isotope.open(kept, embedder=embedder, cache=False)
    assert _state(kept)[0]["sources"] == 0 and _state(kept)[2:] == (None, None)
    with Isotope.open(kept, embedder=embedder, cache=False,
                      vector_backend=f"{chroma_server}/own") as iso:
        iso.ingest_chunks([GYM], source="gym", questions="later")
        assert iso.vector_backend == f"{chroma_server}/own" and iso.check() == []
    monkeypatch.delenv("ISOTOPE_VECTOR_BACKEND")
    with caplog.at_level(logging.WARNING):
        shown = runner.invoke(app, ["query", "When does the gym open?", "--index", first],
                              env=ENV)
        assert shown.exit_code == 0 and "WARNING" not in shown.output, shown.output
    assert not caplog.records
    with Isotope.open(first, embedder=embedder, cache=False) as iso:
        assert iso.check() == [] and iso.counts()["sources"] == 1


# -- 15. ties ----------------------------------------------------------------------------------
def test_equal_scores_come_out_by_chunk_id_in_every_mode_and_in_a_copy(
        tmp_path: Path, embedder: Embedder, location: str) -> None:
    """Two sources of the same text score the same in every mode: they come out in the
    order of their chunk ids, in the index and in its copy on each engine (whose rows are
    numbered in another order: the sources are copied by name, they were ingested z
    first)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("zeta.md", "alpha.md"):
        (docs / name).write_text(FERRY + "\n")
    first, copy = tmp_path / "first", location
    query = "When does the ferry to Dalby leave?"

    def ranked(index: Path | str) -> dict[str, list[tuple[str, float]]]:
        with Isotope.open(index, embedder=embedder, llm=FakeLLM(), cache=False) as iso:
            return {mode: [(r.chunk.id, r.score) for r in iso.search(
                query, k=2, mode=mode, weights={"graph": 1.0}).results] for mode in MODES}

    with Isotope.open(first, embedder=embedder, llm=FakeLLM(), cache=False,
                      graph=True) as iso:
        for name in ("zeta.md", "alpha.md"):
            iso.ingest(docs / name)
    copied = runner.invoke(app, ["copy", str(first), str(copy)])
    assert copied.exit_code == 0, copied.output
    before, after = ranked(first), ranked(copy)
    for mode in MODES:
        for found in (before[mode], after[mode]):
            (one, first_score), (other, second_score) = found
            assert first_score == second_score, mode  # (a tie)
            assert one < other, mode
        assert [c for c, _ in after[mode]] == [c for c, _ in before[mode]], mode
        if "://" not in location:  # (PostgreSQL's BM25 and half floats score otherwise)
            assert after[mode] == before[mode], mode


def test_a_postgresql_index_refused_a_prefix_holds_nothing(
        postgres_server: str, chroma_server: str, embedder: Embedder) -> None:
    url = f"{chroma_server}/pg-taken"
    first, second = fresh_schema(postgres_server), fresh_schema(postgres_server)
    with Isotope.open(first, embedder=embedder, cache=False, vector_backend=url) as iso:
        iso.ingest_chunks([GYM], source="gym", questions="later")
    with pytest.raises(StoreError, match=r"holds another index's vectors.*nothing was stored"):
        Isotope.open(second, embedder=embedder, cache=False, vector_backend=url)
    counts, _, settings, backend = _state(second)
    assert counts["sources"] == 0 and settings is None and backend is None
    with Isotope.open(first, embedder=embedder, cache=False) as iso:
        assert iso.check() == [] and iso.counts()["sources"] == 1
