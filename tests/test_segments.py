"""The embedded store's vectors in segments: each compaction saves the log as a new small
segment (never rewriting the base), the tail is folded into the base once it holds a
quarter of it, a search reads them all as one index, deletes hide items in older
segments, `compact` folds everything into one, a writer waits for a compaction that falls
behind, and damage, crashes and indexes saved before segments are handled. Real store,
real embedder, the fake model's replies; compactions forced at small sizes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from isotope import Isotope
from isotope.embedders import Embedder
from isotope.stores import sqlite_vectors
from isotope.stores.sqlite_schema import set_meta
from test_vector_storage import TOPICS, _docs, _sources

import support
from conftest import FakeLLM

QUERIES = ["When was the billing service started?", "Which channel gets the alerts of "
           "backups?", "How many servers does metrics run on?", "Who started caching?"]
MODES = ("questions-dense", "atoms-dense", "chunks-dense", "hybrid")


def _open(index: Path, embedder: Embedder, **settings: object) -> Isotope:
    return Isotope.open(index, embedder=embedder, llm=FakeLLM(), cache=False, **settings)


def _segments(iso: Isotope, kind: str = "questions") -> list[dict[str, object]]:
    return sqlite_vectors.segments_of(iso.store.get_meta("vectors")[kind])


def _answers(iso: Isotope) -> dict[tuple[str, str], list[str]]:
    return {(q, m): _sources(iso, q, mode=m, k=5) for q in QUERIES for m in MODES}


def _agree(found: dict[tuple[str, str], list[str]],
           expected: dict[tuple[str, str], list[str]]) -> None:
    """The same first result, and the next two among the expected top 5 (int8 vectors and
    exact float32 ones may order near ties apart)."""
    for key, sources in expected.items():
        assert found[key][0] == sources[0], (key, found[key], sources)
        assert set(found[key][:3]) <= set(sources), (key, found[key], sources)


def _counts_agree(iso: Isotope) -> None:
    """The meta's count of each kind is how many items its segments show."""
    vectors = iso.store._place.vectors  # type: ignore[attr-defined]
    for kind, info in vectors.bases().items():
        assert info["count"] == len(vectors._open_base(kind, info, writable=False)), kind


def _vectors_are_their_texts(iso: Isotope, embedder: Embedder) -> None:
    """Every question's vector is its text's (int8 close), none an older text's."""
    import numpy as np

    rows = support.connection(iso).execute("SELECT rowid, text FROM questions").fetchall()
    ids, vectors = iso.store._place.vectors.index("questions").get(  # type: ignore[attr-defined]
        np.array([r[0] for r in rows], dtype=np.int64))
    texts = dict(rows)
    fresh = embedder.embed([texts[int(i)] for i in ids])
    assert len(ids) == len(rows)
    assert float(np.min(np.sum(vectors * fresh, axis=1))) > 0.98


@pytest.fixture
def small_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_vectors, "COMPACT_AFTER", 4)


def _retire_now(iso: Isotope, monkeypatch: pytest.MonkeyPatch) -> None:
    """Delete the replaced files now (kept RETIRE_AFTER seconds for readers otherwise)."""
    iso.store.settle()
    monkeypatch.setattr(sqlite_vectors, "RETIRE_AFTER", 0.0)
    iso.store._place.vectors.remove_stale()  # type: ignore[attr-defined]


def _ingest_one_by_one(iso: Isotope, docs: Path, topics: list[str]) -> int:
    """Ingest each topic in its own write, letting its compaction finish; returns the most
    question segments seen at once."""
    most = 0
    for topic in topics:
        iso.ingest(docs / f"{topic}.md")
        iso.store.settle()
        most = max(most, len(_segments(iso)))
    return most


@pytest.mark.usefixtures("small_segments")
def test_writes_add_segments_folded_into_the_base_and_search_as_one(
        tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = _docs(tmp_path / "docs")
    with _open(tmp_path / "exact", embedder, vector_index="exact") as iso:
        iso.ingest(docs)
        expected = _answers(iso)
    with _open(tmp_path / "index", embedder, vector_index="hnsw",
               keyword_index="postings") as iso:
        most = _ingest_one_by_one(iso, docs, TOPICS)
        segments = _segments(iso)
        assert most > 1 and len(segments) > 1  # the log went to new segments
        # the tail is folded into the base once it holds a quarter of it
        counts = [int(s["count"]) for s in segments]  # type: ignore[call-overload]
        assert sum(counts[1:]) < sqlite_vectors.TAIL_SHARE * counts[0] + counts[-1]
        assert len(segments) <= sqlite_vectors.MAX_TAIL + 1
        _counts_agree(iso)
        # one file of keyword postings per kind: the replaced ones go with their state
        _retire_now(iso, monkeypatch)
        assert len(list((tmp_path / "index" / "vectors").glob("*.keywords"))) == 3
        _agree(_answers(iso), expected)
        assert iso.check() == []
        with _open(tmp_path / "index", embedder) as other:  # another handle reads them too
            _agree(_answers(other), expected)
        # everything into one segment, the replaced files gone, the same answers
        iso.compact()
        assert len(_segments(iso)) == 1
        _agree(_answers(iso), expected)
        _retire_now(iso, monkeypatch)
        named = set().union(*(sqlite_vectors._tags(info) for info in
                              iso.store.get_meta("vectors").values()))
        on_disk = {p.name.split(".")[0] for p in (tmp_path / "index" / "vectors").iterdir()}
        assert on_disk <= named  # (a state's own tag names only its postings, if any)


@pytest.mark.usefixtures("small_segments")
def test_deletes_and_changes_hide_items_of_older_segments(tmp_path: Path,
                                                         embedder: Embedder) -> None:
    docs = _docs(tmp_path / "docs")
    with _open(tmp_path / "index", embedder, vector_index="hnsw") as iso:
        _ingest_one_by_one(iso, docs, TOPICS)
        iso.delete(docs / "billing.md")  # its vectors sit in the oldest segment
        (docs / "billing.md").unlink()
        (docs / "metrics.md").write_text("# Metrics\n\nThe metrics service moved to Bergen "
                                         "in 2024 and runs on one server.\n")
        iso.ingest(docs / "metrics.md")
        for topic in TOPICS[2:6]:  # enough writes for another compaction or two
            (docs / f"{topic}.md").write_text(f"# {topic}\n\nThe {topic} service now "
                                              "belongs to team nine.\n")
            iso.ingest(docs / f"{topic}.md")
            iso.store.settle()
        # the delete and the changes hide items of the older segments
        assert any(int(s.get("gone", 0)) for s in _segments(iso))  # type: ignore[call-overload]
        _counts_agree(iso)
        _vectors_are_their_texts(iso, embedder)
        for mode in (m for m in MODES if m != "graph"):  # (no knowledge graph here)
            assert "billing" not in _sources(iso, "When was the billing service started?",
                                             mode=mode)
        assert _sources(iso, "Where did the metrics service move?", k=1) == ["metrics"]
        assert iso.check() == []
    with _open(tmp_path / "fresh", embedder, vector_index="exact") as fresh:
        fresh.ingest(docs)
        expected = _answers(fresh)
    with _open(tmp_path / "index", embedder) as iso:
        _agree(_answers(iso), expected)
        iso.compact()
        _agree(_answers(iso), expected)
        assert iso.check() == []


@pytest.mark.usefixtures("small_segments")
def test_new_questions_change_a_chunks_keywords_never_its_vector(
        tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """A question added by hand changes its chunk's keyword text, not its vector: the log
    entries saying so leave the chunk's vector in its older segment, whether a compaction
    folds them alone (no new segment: the keyword postings are made again) or beside new
    vectors (a new segment that hides nothing of theirs)."""
    docs = _docs(tmp_path / "docs")
    with _open(tmp_path / "index", embedder, vector_index="hnsw",
               keyword_index="postings") as iso:
        _ingest_one_by_one(iso, docs, TOPICS)
        monkeypatch.setattr(sqlite_vectors, "TAIL_SHARE", 10.0)  # (new segments, kept)
        before = iso.store.get_meta("vectors")["chunks"]
        for topic in TOPICS[:4]:  # alone: the segments stay, the postings are new
            iso.add_question(docs / f"{topic}.md", f"Is {topic} ever zeppelined?", chunk=0)
        iso.store.settle()
        after = iso.store.get_meta("vectors")["chunks"]
        assert after["segments"] == before["segments"] and after["tag"] != before["tag"]
        for n, topic in enumerate(TOPICS[4:8]):  # beside new vectors: a new segment
            iso.add_question(docs / f"{topic}.md", f"Is {topic} ever zeppelined?", chunk=0)
            (docs / f"extra{n}.md").write_text(f"# Extra {n}\n\nThe extra service {n} "
                                               "watches the Oslo data centre.\n")
            iso.ingest(docs / f"extra{n}.md")
            iso.store.settle()
        assert len(_segments(iso, "chunks")) > len(before["segments"])
        _counts_agree(iso)
        for topic in TOPICS[:8]:
            assert _sources(iso, f"The {topic} service was started", k=1,
                            mode="chunks-dense") == [topic]
        assert set(_sources(iso, "zeppelined", k=20, mode="chunks-bm25")) == set(TOPICS[:8])
        assert iso.check() == []


@pytest.mark.usefixtures("small_segments")
def test_a_damaged_segment_is_named_and_repair_embeds_what_it_and_older_ones_held(
        tmp_path: Path, embedder: Embedder) -> None:
    """The newest segment, damaged, hid replaced vectors in older ones: check names it,
    and after repair every vector is its text's."""
    docs = _docs(tmp_path / "docs")
    with _open(tmp_path / "index", embedder, vector_index="hnsw") as iso:
        _ingest_one_by_one(iso, docs, TOPICS)
        # a file changed: its new vectors go to the newest segment, hiding its old ones
        (docs / "email.md").write_text("# Email\n\nThe email service moved to Bergen in "
                                       "2019 and now runs on one server.\n")
        iso.ingest(docs / "email.md")
        iso.store.settle()
        expected = _answers(iso)
        segments = _segments(iso)
        assert int(segments[-1].get("gone", 0))  # type: ignore[call-overload]
    assert len(segments) > 1
    damaged = tmp_path / "index" / "vectors" / f"{segments[-1]['tag']}.ids.npy"
    raw = bytearray(damaged.read_bytes())
    raw[-8:] = b"\x7f" * 8  # the same size: only the digest sees it
    damaged.write_bytes(bytes(raw))
    with _open(tmp_path / "index", embedder) as iso:
        problems = iso.check()
        assert any(str(segments[-1]["tag"]) in p and "damaged" in p for p in problems), \
            problems
        assert iso.repair().problems == []
        assert iso.check() == []
        _agree(_answers(iso), expected)
        _vectors_are_their_texts(iso, embedder)


@pytest.mark.usefixtures("small_segments")
def test_a_crash_while_a_segment_is_saved_loses_nothing(
        tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    docs = _docs(tmp_path / "docs")
    with _open(tmp_path / "index", embedder, vector_index="hnsw") as iso:
        _ingest_one_by_one(iso, docs, TOPICS[:6])
        segments = _segments(iso)
        saved = sqlite_vectors.digest

        def crash(*args: object, **kwargs: object) -> str:
            raise OSError("disk gone")  # the new segment is saved; the meta never names it

        monkeypatch.setattr(sqlite_vectors, "digest", crash)
        _ingest_one_by_one(iso, docs, TOPICS[6:])
        assert _segments(iso) == segments  # nothing committed: the log holds the rest
        assert "they stay in the log" in caplog.text
        monkeypatch.setattr(sqlite_vectors, "digest", saved)
    with _open(tmp_path / "fresh", embedder, vector_index="exact") as fresh:
        fresh.ingest(docs)
        expected = _answers(fresh)
    with _open(tmp_path / "index", embedder) as iso:
        assert iso.check() == []
        _agree(_answers(iso), expected)
        monkeypatch.setattr(sqlite_vectors, "STALE_AFTER", 0.0)
        iso.compact()  # and the crash's orphan files are cleared
        _retire_now(iso, monkeypatch)
        assert iso.check() == []
        _agree(_answers(iso), expected)
        named = set().union(*(sqlite_vectors._tags(info) for info in
                              iso.store.get_meta("vectors").values()))
        assert {p.name.split(".")[0] for p in (tmp_path / "index" / "vectors").iterdir()} \
            <= named


@pytest.mark.usefixtures("small_segments")
def test_an_index_saved_before_segments_reads_its_base_as_one(
        tmp_path: Path, embedder: Embedder) -> None:
    docs = _docs(tmp_path / "docs")
    with _open(tmp_path / "index", embedder, vector_index="hnsw") as iso:
        iso.ingest(docs / "billing.md")
        iso.ingest(docs / "routing.md")
        iso.compact()
        bases = iso.store.get_meta("vectors")
    # the meta as schema 6 wrote it: one base per kind, named by its tag
    for info in bases.values():
        (segment,) = info.pop("segments")
        info.update({key: segment[key] for key in ("tag", "impl", "count", "digest",
                                                   "bytes")})
    conn = sqlite3.connect(tmp_path / "index" / "isotope.db")
    with conn:
        set_meta(conn, "vectors", bases)
    conn.close()
    with _open(tmp_path / "index", embedder, vector_index="hnsw") as iso:
        assert _sources(iso, "When was the billing service started?", k=1) == ["billing"]
        _ingest_one_by_one(iso, docs, TOPICS[2:])
        assert len(_segments(iso)) > 1  # the old base is the oldest segment
        assert iso.check() == []
        assert _sources(iso, "When was the billing service started?", k=1) == ["billing"]
        assert _sources(iso, "Who started caching?", k=1) == ["caching"]


@pytest.mark.usefixtures("small_segments")
def test_repair_of_a_damaged_newer_segment_never_shows_the_vectors_it_hid(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Row ids come back (a re-ingested newest file numbers its rows as the deleted ones
    were): a segment that replaced vectors of an older one, once damaged, cannot say which
    of the older vectors are stale, so repair embeds the older ones again too."""
    import numpy as np

    from isotope.stores.sqlite import SQLiteStore

    monkeypatch.setattr(sqlite_vectors, "TAIL_SHARE", 100.0)  # a tail, never folded
    store = SQLiteStore(tmp_path / "index")
    store.set_meta("embedding", {"dim": 8})
    vectors = store._place.vectors
    vectors.policy = "hnsw"
    rng = np.random.default_rng(7)
    current: dict[int, np.ndarray] = {}

    def write(ids: list[int]) -> None:
        made = rng.standard_normal((len(ids), 8)).astype(np.float32)
        made /= np.linalg.norm(made, axis=1, keepdims=True)
        with store._write() as conn:
            for item, vector in zip(ids, made, strict=True):
                conn.execute("INSERT INTO vector_log(kind, item, grp, vector) VALUES "
                             "('questions', ?, ?, ?)", (item, item % 3,
                                                        vector.astype(np.float16).tobytes()))
                current[item] = vector
        vectors.compact("questions", store._write)

    write(list(range(1, 7)))  # the older segment
    write([1, 2, 3, 4])  # the newer one: new vectors under the same ids
    newer = sqlite_vectors.segments_of(store.get_meta("vectors")["questions"])[-1]
    assert newer["gone"] == 4
    path = vectors.folder / f"{newer['tag']}.ids.npy"
    raw = bytearray(path.read_bytes())
    raw[-8:] = b"\x7f" * 8
    path.write_bytes(bytes(raw))
    ids = np.array(sorted(current), dtype=np.int64)
    table = (ids, ids % 3)
    assert vectors.check("questions", table)  # named
    again: list[int] = []

    def embed_rows(rows: np.ndarray) -> np.ndarray:
        again.extend(int(r) for r in rows)
        return np.stack([current[int(r)] for r in rows])

    vectors.rebuild("questions", store._write, table, embed_rows)
    assert {1, 2, 3, 4} <= set(again)
    found, held = vectors.index("questions").get(ids)
    assert all(float(v @ current[int(i)]) > 0.97 for i, v in zip(found, held, strict=True))
    assert vectors.check("questions", table) == []
    store.close()


@pytest.mark.usefixtures("small_segments")
def test_a_writer_waits_for_a_compaction_that_falls_behind(
        tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bulk load faster than the graph takes vectors: once a kind's log holds BEHIND
    entries, the next write waits for the running compaction, so the vectors saved never
    fall further behind the rows (the log is searched exactly and kept in the database)."""
    import time

    monkeypatch.setattr(sqlite_vectors, "BEHIND", 12)
    slow = sqlite_vectors.VectorStore._compact

    def slower(self: sqlite_vectors.VectorStore, *args: object, **kwargs: object) -> bool:
        time.sleep(0.3)  # a compaction slower than the writes
        return slow(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(sqlite_vectors.VectorStore, "_compact", slower)
    docs = _docs(tmp_path / "docs")
    most = 0
    with _open(tmp_path / "index", embedder, vector_index="hnsw") as iso:
        vectors = iso.store._place.vectors  # type: ignore[attr-defined]
        grown = []
        for topic in TOPICS:
            before = vectors.log_size("questions")
            iso.ingest(docs / f"{topic}.md")
            grown.append(vectors.log_size("questions") - before)
            most = max(most, vectors.log_size("questions"))
        # at most BEHIND, plus what one write added after its wait
        assert most <= 12 + max(grown) + sqlite_vectors.COMPACT_AFTER
        iso.store.settle()
        assert iso.check() == []
        assert _sources(iso, "Who started caching?", k=1) == ["caching"]
