"""Sources that change, sync, chunk reuse, filters, projects, file references, the
writer lock and schema migration: real store, real embedder, faked model replies."""

from __future__ import annotations

import shutil
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from isotope import Isotope, projects
from isotope.cli import app
from isotope.embedders import Embedder
from isotope.errors import IndexLocked
from isotope.search.filters import FilterError, parse_where
from isotope.stores import SCHEMA_VERSION

import support
from conftest import FakeLLM

LONG = "\n\n".join(
    f"## Section {n}\n\nThe {name} module handles {task}. It was written in {1990 + n} by "
    f"the {team} team. Its tests run every night on the build farm in Building {n}."
    for n, (name, task, team) in enumerate([
        ("billing", "invoices and refunds", "finance"),
        ("routing", "delivery routes for trucks", "logistics"),
        ("auth", "logins and API keys", "security"),
        ("search", "full-text queries", "platform"),
        ("reports", "monthly PDF reports", "analytics"),
        ("alerts", "pager notifications", "operations"),
    ], start=1)
)


def _open(tmp_path: Path, embedder: Embedder, llm: FakeLLM, **settings: object) -> Isotope:
    return Isotope.open(tmp_path / "index", embedder=embedder, llm=llm, cache=False,
                        chunk_size=48, chunk_overlap=0, **settings)


def test_registry_records_each_file_and_skips_unchanged_ones(
    tmp_path: Path, embedder: Embedder, examples: Path
) -> None:
    llm = FakeLLM()
    with _open(tmp_path, embedder, llm) as iso:
        iso.ingest(examples)
        infos = {Path(i.source.uri).name: i for i in iso.sources()}
        handbook = infos["handbook.md"].source
        assert handbook.content_hash and handbook.size == (examples / "handbook.md").stat().st_size
        assert handbook.mtime and handbook.ingested_at and handbook.loader == "markdown"
        assert handbook.status == "complete" and handbook.root == str(examples.resolve())
        assert {i.state for i in infos.values()} == {"current"}
        calls = llm.calls
        again = iso.ingest(examples)
        assert len(again.unchanged) == 4 and llm.calls == calls  # cache is off


def test_a_changed_file_keeps_its_unchanged_chunks_and_their_questions(
    tmp_path: Path, embedder: Embedder
) -> None:
    doc = tmp_path / "docs" / "modules.md"
    doc.parent.mkdir()
    doc.write_text(LONG)
    llm = FakeLLM()
    with _open(tmp_path, embedder, llm) as iso:
        first = iso.ingest(doc.parent)
        assert first.chunks >= 6
        before = {r.chunk.text: r.matched_questions for r in
                  iso.search("Who wrote the billing module?", k=10).results}
        generated = {(q.atom, q.text, q.kept, q.reason) for q in iso.questions(doc)}
        calls = llm.calls
        doc.write_text(LONG.replace("pager notifications", "pager and SMS notifications"))
        assert iso.sources()[0].state == "changed"
        report = iso.ingest(doc.parent)
        assert report.replaced == [str(doc.resolve())]
        assert report.reused_chunks == first.chunks - 1
        # only the changed chunk's atoms went to the model (one call per atom here)
        changed_atoms = 3
        assert llm.calls - calls == changed_atoms == report.atoms
        after = iso.search("Which module sends SMS notifications?", k=1).results[0]
        assert "pager and SMS notifications" in after.chunk.text
        kept = iso.search("Who wrote the billing module?", k=10).results
        billing = next(r for r in kept if "billing" in r.chunk.text)
        assert billing.matched_questions == before[billing.chunk.text]
        # the reused chunks keep their dropped questions (and why) too
        now = {(q.atom, q.text, q.kept, q.reason) for q in iso.questions(doc)}
        unchanged = {g for g in generated if "pager" not in g[0]}
        assert unchanged and any(not g[2] for g in unchanged) and unchanged <= now
        assert iso.sources()[0].state == "current"
        assert iso.check() == []


def test_sync_removes_sources_of_deleted_files(
    tmp_path: Path, embedder: Embedder, examples: Path
) -> None:
    with _open(tmp_path, embedder, FakeLLM()) as iso:
        iso.sync(examples)
        (examples / "faq.html").unlink()
        (examples / "release-notes.txt").write_text("Firmware 4.0 adds a night mode.\n")
        states = {Path(i.source.uri).name: i.state for i in iso.sources()}
        assert states["faq.html"] == "missing" and states["release-notes.txt"] == "changed"
        report = iso.sync(examples)
        assert report.removed == [str(examples.resolve() / "faq.html")]
        assert [Path(u).name for u in report.replaced] == ["release-notes.txt"]
        names = sorted(Path(i.source.uri).name for i in iso.sources())
        assert names == ["battery-safety.pdf", "handbook.md", "release-notes.txt"]
        # a path that is gone is an error and removes nothing
        gone = iso.sync(tmp_path / "nowhere")
        assert gone.errors and not gone.removed and len(iso.sources()) == 3
        # ingest (not sync) never removes
        (examples / "handbook.md").unlink()
        assert not iso.ingest(examples).removed and len(iso.sources()) == 3


def test_strategy_none_reindexes_everything_and_removes_nothing(
    tmp_path: Path, embedder: Embedder, examples: Path
) -> None:
    llm = FakeLLM()
    with _open(tmp_path, embedder, llm, sync_strategy="none") as iso:
        iso.sync(examples)
        calls = llm.calls
        again = iso.sync(examples)
        assert len(again.replaced) == 4 and not again.unchanged and llm.calls == 2 * calls
        (examples / "faq.html").unlink()
        assert not iso.sync(examples).removed and len(iso.sources()) == 4


def test_filters_by_source_type_metadata_and_ranges(
    tmp_path: Path, embedder: Embedder, examples: Path
) -> None:
    (examples / "policy.md").write_text(
        "---\ntitle: Travel policy\nyear: 2021\nreviewed: 2024-03-01\n---\n# Travel\n\n"
        "Employees book trains for trips under four hours. Flights need approval.\n")
    with _open(tmp_path, embedder, FakeLLM()) as iso:
        iso.ingest(examples)

        def sources(**filters: object) -> set[str]:
            found = iso.search("What do employees get?", k=20, filters=filters).results
            return {Path(r.chunk.source).name for r in found}

        assert sources(source="*.md") == {"handbook.md", "policy.md"}
        assert sources(source="handbook.md") == {"handbook.md"}
        assert sources(source=str(examples / "faq.*")) == {"faq.html"}
        assert sources(type="pdf") == {"battery-safety.pdf"}
        assert sources(type=["pdf", "html"]) == {"battery-safety.pdf", "faq.html"}
        assert sources(title="Travel policy") == {"policy.md"}
        assert sources(headings="Time off") == {"handbook.md"}  # a list contains it
        assert sources(year={"gte": 2020}) == {"policy.md"}
        assert sources(year={"lt": 2020}) == set()
        assert sources(reviewed={"gte": "2024-01-01", "lt": "2025-01-01"}) == {"policy.md"}
        assert sources(page=1) == {"battery-safety.pdf"}
        assert "battery-safety.pdf" not in sources(type={"ne": "pdf"})
        for mode in ("questions-dense", "chunks-bm25", "atoms-bm25", "questions-bm25"):
            found = iso.search("battery", k=10, mode=mode, filters={"type": "text"}).results
            assert {Path(r.chunk.source).name for r in found} <= {"release-notes.txt"}
        # values are bound, never formatted into SQL
        assert sources(title="x' OR 1=1 --") == set()
        with pytest.raises(FilterError, match="has the key"):  # (no source has it)
            sources(**{"title') OR 1=1 --": "x"})
        with pytest.raises(FilterError, match="invalid filter key"):
            sources(**{'a"b': 1})
        with pytest.raises(FilterError, match="unknown operator"):
            sources(year={"between": 1})
    assert parse_where(["year>=2020", "year<2024", "type=pdf", "type=html", "source=*.md"]) == {
        "year": {"gte": 2020, "lt": 2024}, "type": ["pdf", "html"], "source": ["*.md"]}


def test_a_score_means_the_same_with_a_filter_and_without(
        tmp_path: Path, embedder: Embedder, examples: Path) -> None:
    """A filter that left a few chunks gave them fixed scores (0.646 and 0.354, 0.500
    alone: z-scores over two candidates), so a right answer got refine_query (issue 42,
    item 18): the narrowed candidates are standardised as the search without filters
    standardises them."""
    with _open(tmp_path, embedder, FakeLLM()) as iso:
        iso.ingest(examples)
        query = "How many vacation days do new employees get?"
        plain = iso.search(query, k=5)
        assert plain.results[0].chunk.source.endswith("handbook.md")
        narrowed = iso.search(query, k=5, filters={"source": "*handbook.md"})
        assert narrowed.results[0].chunk.id == plain.results[0].chunk.id
        assert narrowed.results[0].score == pytest.approx(plain.results[0].score, abs=0.02)
        assert narrowed.suggested_action == plain.suggested_action == "deliver"
        for filters in ({"type": "pdf"}, {"type": ["pdf", "html"]}):
            scores = [r.score for r in iso.search(query, k=5, filters=filters).results]
            assert scores and round(scores[0], 3) not in (0.646, 0.5, 0.354), scores
            assert max(scores) < plain.results[0].score  # (the wrong documents)


def test_cli_where_filters_query(tmp_path: Path, embedder: Embedder, examples: Path) -> None:
    with _open(tmp_path, embedder, FakeLLM()) as iso:
        iso.ingest(examples)
    runner = CliRunner()
    result = runner.invoke(app, ["query", "What do employees get?", "--raw", "-k", "10",
                                 "--index", str(tmp_path / "index"), "--where", "type=pdf",
                                 "--json"])
    assert result.exit_code == 0, result.output
    import json

    found = json.loads(result.stdout)["results"]
    assert found and {Path(r["chunk"]["source"]).name for r in found} == {"battery-safety.pdf"}
    bad = runner.invoke(app, ["query", "x", "--raw", "--index", str(tmp_path / "index"),
                              "--where", "year"])
    assert bad.exit_code == 1 and "key=value" in bad.output


def test_projects_have_their_own_settings_and_a_default(
    tmp_path: Path, examples: Path
) -> None:
    runner = CliRunner()
    made = runner.invoke(app, ["project", "create", "docs", "--set", "chunk_size=64",
                               "--set", "mode=questions-dense", "--set",
                               "question_model=fake/echo", "--set", "answer_model=fake/echo"])
    assert made.exit_code == 0, made.output
    assert runner.invoke(app, ["project", "create", "docs"]).exit_code == 1
    assert "invalid project name" in runner.invoke(app, ["project", "create", "../x"]).output
    ingest = runner.invoke(app, ["ingest", str(examples), "--project", "docs", "--json"])
    assert ingest.exit_code == 0, ingest.output
    with Isotope.open("docs") as iso:  # a bare name is a project
        assert iso.settings.chunk_size == 64 and iso.settings.mode == "questions-dense"
        assert iso.status().counts["sources"] == 4
        assert iso.settings.index == str(tmp_path / "projects" / "docs")
    shown = runner.invoke(app, ["project", "show", "docs", "--json"])
    assert '"chunk_size": 64' in shown.output
    # no default yet: commands use ./.isotope
    nothing = runner.invoke(app, ["list"])
    assert nothing.exit_code == 1 and "no index at .isotope" in nothing.output
    assert runner.invoke(app, ["project", "use", "docs"]).exit_code == 0
    listed = runner.invoke(app, ["list", "--json"])
    assert "handbook.md" in listed.output
    assert "* " in runner.invoke(app, ["project", "list"]).output
    answer = runner.invoke(app, ["query", "How many vacation days do new employees get?",
                                 "--raw"])
    assert "handbook.md" in answer.output
    missing = runner.invoke(app, ["list", "--project", "nope"])
    assert missing.exit_code == 1 and "isotope project create nope" in missing.output
    # deleting asks; without a terminal it needs --yes
    refused = runner.invoke(app, ["project", "delete", "docs"])
    assert refused.exit_code != 0 and projects.exists("docs")
    assert runner.invoke(app, ["project", "delete", "docs", "--yes"]).exit_code == 0
    assert not projects.exists("docs") and projects.default() is None


def test_file_references_read_text_back_and_report_stale_chunks(
    tmp_path: Path, embedder: Embedder, examples: Path
) -> None:
    llm = FakeLLM()
    iso = Isotope.open(tmp_path / "index", embedder=embedder, llm=llm, cache=False,
                       storage="file-reference")
    with iso:
        iso.ingest(examples)
        query = "How many vacation days do new employees get?"
        top = iso.search(query, k=1).results[0]
        raw = Path(top.chunk.source).read_text()
        assert top.chunk.text == raw[top.chunk.start : top.chunk.end] and not top.chunk.stale
        assert "25 days of paid vacation" in top.chunk.text
        assert iso.ask(query).citations == [1]
        stored = sqlite3.connect(tmp_path / "index" / "isotope.db").execute(
            "SELECT text FROM chunks").fetchall()
        assert all("25 days of paid vacation" not in t for (t,) in stored)
        # keyword search over chunks still works from the stored words
        assert iso.search("paid vacation carried over", k=1, mode="chunks-bm25").results[
            0].chunk.text == top.chunk.text
        handbook = examples / "handbook.md"
        handbook.write_text(raw.replace("25 days", "30 days"))
        stale = iso.search(query, k=1).results[0]
        assert stale.chunk.stale and stale.chunk.text == ""
        assert "stale" in (iso.ask(query, k=1).answer or "")
        iso.sync(examples)
        fresh = iso.search(query, k=1).results[0]
        assert "30 days" in fresh.chunk.text and not fresh.chunk.stale
        # a source is the path it was reached by: read through a link there, as ingest
        # would read it...
        outside = tmp_path / "outside.md"
        outside.write_text(handbook.read_text())
        handbook.unlink()
        handbook.symlink_to(outside)
        assert "30 days" in iso.search(query, k=1).results[0].chunk.text
        # ...but a path outside the root it was ingested from is never read
        db = sqlite3.connect(tmp_path / "index" / "isotope.db")
        db.execute("UPDATE sources SET root = ?", (str(tmp_path / "elsewhere"),))
        db.commit()
        db.close()
        assert iso.search(query, k=1).results[0].chunk.stale


def test_a_second_writer_fails_with_a_clear_message_or_waits(
    tmp_path: Path, embedder: Embedder, examples: Path
) -> None:
    with _open(tmp_path, embedder, FakeLLM()) as iso:
        iso.ingest(examples / "handbook.md")
        other = _open(tmp_path, embedder, FakeLLM(), lock_wait=5)
        with iso.store.writer(), pytest.raises(IndexLocked, match="another process"):
            _open(tmp_path, embedder, FakeLLM()).ingest(examples)
        hold = threading.Event()

        def writer() -> None:
            with iso.store.writer():
                hold.set()
                time.sleep(1.0)

        thread = threading.Thread(target=writer)
        thread.start()
        hold.wait()
        started = time.monotonic()
        report = other.ingest(examples)  # waits for the lock, then ingests
        assert time.monotonic() - started >= 0.5 and len(report.added) == 3
        thread.join()
        other.close()


def _index_at_schema(current: Path, old: Path, version: int) -> None:
    """An index of schema ``version`` holding ``current``'s content: steps 1..version
    applied to an empty database, then the rows copied over in the columns that schema
    has (with the meta an index of that schema kept; a row's vector, before schema 5, its
    last logged one, not an entry of its text alone; from schema 5 the vector log and
    files)."""
    from isotope.stores.sqlite_schema import upgrade

    old.mkdir()
    db = sqlite3.connect(old / "isotope.db", isolation_level=None)
    upgrade(db, version)
    db.execute("ATTACH DATABASE ? AS new", (str(current / "isotope.db"),))
    db.execute("BEGIN")
    for table in ("sources", "chunks", "atoms", "questions"):
        names = [r[1] for r in db.execute(f"PRAGMA main.table_info({table})")]
        cols = ", ".join(f'"{n}"' for n in names)
        # before schema 5 each row held its vector (since, the vector log does)
        values = ", ".join(
            f"(SELECT v.vector FROM new.vector_log v WHERE v.kind = '{table}' AND "
            f"v.item = t.rowid AND length(v.vector) > 0 ORDER BY v.seq DESC LIMIT 1)"
            if n == "vector" and version < 5 else f't."{n}"'
            for n in names)
        db.execute(f"INSERT INTO main.{table}({cols}) SELECT {values} FROM new.{table} t")
    db.execute("INSERT INTO main.meta SELECT * FROM new.meta WHERE key NOT IN "
               "('schema_version', 'state')")
    if version >= 5:  # (the vectors: the log and the files it follows)
        db.execute("INSERT INTO main.vector_log SELECT * FROM new.vector_log")
        if (current / "vectors").exists():
            shutil.copytree(current / "vectors", old / "vectors")
    if version < 4:
        db.execute("INSERT INTO main.meta VALUES ('generation', '7')")
    db.execute("COMMIT")
    db.execute("DETACH DATABASE new")
    for kind in ("questions", "atoms", "chunks"):
        db.execute(f"INSERT INTO {kind}_fts({kind}_fts) VALUES ('rebuild')")
    db.close()


@pytest.mark.parametrize("version", [1, 2, 3, 4, 12])
def test_an_index_of_an_older_schema_is_migrated_in_place(
    tmp_path: Path, embedder: Embedder, examples: Path, version: int
) -> None:
    def expansion(iso: Isotope) -> list[tuple[str, str]]:
        return support.connection(iso).execute(
            "SELECT id, questions_text FROM chunks ORDER BY id").fetchall()

    with _open(tmp_path / "made", embedder, FakeLLM()) as iso:
        iso.ingest(examples)
        before = [r.chunk.id for r in iso.search("vacation days", mode="chunks-bm25").results]
        expanded = expansion(iso)
        assert all(text for _, text in expanded)
        dense = [(r.chunk.id, round(r.score, 5)) for r in iso.search(
            "How many vacation days do I get?", mode="questions-dense").results]
    _index_at_schema(tmp_path / "made" / "index", tmp_path / "index", version)
    assert sqlite3.connect(tmp_path / "index" / "isotope.db").execute(
        "SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (str(version),)
    with _open(tmp_path, embedder, FakeLLM()) as iso:
        assert iso.status().schema_version == SCHEMA_VERSION
        assert len(iso.sources()) == 4 and iso.check() == []
        after = [r.chunk.id for r in iso.search("vacation days", mode="chunks-bm25").results]
        assert after == before and after
        assert expansion(iso) == expanded  # (step 13: the questions in the keyword text)
        assert dense == [(r.chunk.id, round(r.score, 5)) for r in iso.search(
            "How many vacation days do I get?", mode="questions-dense").results]
        # the vectors left the tables: each row's is in the vector log, until compacted
        rows = support.connection(iso).execute(
            "SELECT COUNT(*) FROM questions WHERE length(vector) > 0").fetchone()[0]
        assert rows == 0 and iso.compact() == {
            "questions": "exact", "atoms": "exact", "chunks": "exact"}
        assert dense == [(r.chunk.id, round(r.score, 5)) for r in iso.search(
            "How many vacation days do I get?", mode="questions-dense").results]
        assert len(iso.ingest(examples).unchanged) == 4  # nothing is generated again
        iso.delete(examples / "faq.html")
        assert iso.check() == []


def test_a_new_index_is_the_steps_from_zero(tmp_path: Path) -> None:
    """Creating an index and applying every step to an empty database give one schema."""
    from isotope.stores.sqlite import SQLiteStore
    from isotope.stores.sqlite_schema import upgrade

    SQLiteStore(tmp_path / "a").close()
    (tmp_path / "b").mkdir()
    upgrade(sqlite3.connect(tmp_path / "b" / "isotope.db", isolation_level=None))

    def schema(path: Path) -> list[tuple[str, str]]:
        return sorted(sqlite3.connect(path / "isotope.db").execute(
            "SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL"))

    assert schema(tmp_path / "a") == schema(tmp_path / "b")


def test_cli_sync_list_and_check(tmp_path: Path, embedder: Embedder, examples: Path) -> None:
    import json

    index = str(tmp_path / "index")
    with _open(tmp_path, embedder, FakeLLM()):
        pass  # creates the index with the fake model saved as its question model
    runner = CliRunner()
    env = {"ISOTOPE_QUESTION_MODEL": "fake/echo", "ISOTOPE_ANSWER_MODEL": "fake/echo"}
    first = runner.invoke(app, ["sync", str(examples), "--index", index, "--json"], env=env)
    assert first.exit_code == 0, first.output
    assert len(json.loads(first.stdout)["added"]) == 4
    (examples / "faq.html").unlink()
    listed = json.loads(runner.invoke(app, ["list", "--index", index, "--json"]).stdout)
    assert {Path(s["uri"]).name: s["state"] for s in listed}["faq.html"] == "missing"
    second = runner.invoke(app, ["sync", str(examples), "--index", index], env=env)
    assert second.exit_code == 0 and "1 removed" in second.output
    ok = runner.invoke(app, ["check", "--index", index, "--json"])
    assert ok.exit_code == 0 and json.loads(ok.stdout)["ok"] is True
    conn = sqlite3.connect(tmp_path / "index" / "isotope.db")
    conn.execute("PRAGMA foreign_keys=OFF")
    conn.execute("DELETE FROM sources WHERE uri LIKE '%handbook.md'")
    conn.commit()
    conn.close()
    bad = runner.invoke(app, ["check", "--index", index])
    assert bad.exit_code == 1 and "chunks without their source" in bad.output


def test_a_query_during_replacement_sees_the_old_or_the_new_version(
    tmp_path: Path, embedder: Embedder
) -> None:
    doc = tmp_path / "docs" / "rota.md"
    doc.parent.mkdir()
    versions = [LONG.replace("pager notifications", f"pager notifications, version {v}")
                for v in ("one", "two")]
    doc.write_text(versions[0])
    writer = Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM(),
                          chunk_size=48, chunk_overlap=0)
    writer.ingest(doc)
    reader = _open(tmp_path, embedder, FakeLLM())
    stop = threading.Event()

    def replace() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            doc.write_text(versions[n % 2])
            writer.ingest(doc)

    thread = threading.Thread(target=replace)
    thread.start()
    seen = set()
    try:
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            found = reader.search("Which module sends pager notifications?", k=10,
                                  mode="chunks-bm25").results
            texts = [r.chunk.text for r in found]
            assert len(found) == 6  # never a moment without the source's chunks
            marks = {v for v in ("one", "two") if any(f"version {v}" in t for t in texts)}
            assert len(marks) == 1  # never a mix of the two versions
            seen |= marks
    finally:
        stop.set()
        thread.join()
        writer.close()
        reader.close()
    assert seen == {"one", "two"}
