"""The embedded store's vectors as a user meets them: written once into a log with their
rows, searchable at once in every process, compacted into exact or HNSW indexes (forced
on here at small sizes), deleted at once from every search mode, filtered without
returning too few results, checked and repaired. Real store, real embedder, the fake
model's replies."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from isotope import Isotope
from isotope.ann import hnsw
from isotope.embedders import Embedder
from isotope.search.retrieval import MODES
from isotope.stores import sqlite_vectors

import support
from conftest import FakeLLM

TOPICS = ["billing", "routing", "login", "search", "reports", "alerts", "backups", "metrics",
          "caching", "queues", "storage", "email"]


def _docs(folder: Path, topics: list[str] = TOPICS) -> Path:
    folder.mkdir(exist_ok=True)
    for n, topic in enumerate(topics):
        (folder / f"{topic}.md").write_text(
            f"---\nteam: {'red' if n % 2 else 'blue'}\n---\n# The {topic} service\n\n"
            f"The {topic} service was started in {2000 + n} by team {n}. It runs on {n + 2} "
            f"servers in the Oslo data centre.\n\nAlerts for {topic} go to channel "
            f"{topic}-ops.\n")
    return folder


def _open(index: Path, embedder: Embedder, **settings: object) -> Isotope:
    return Isotope.open(index, embedder=embedder, llm=FakeLLM(), cache=False, **settings)


def _sources(iso: Isotope, query: str, mode: str = "questions-dense", k: int = 20,
             **kw: object) -> list[str]:
    return [Path(r.chunk.source).stem for r in iso.search(query, k=k, mode=mode,
                                                          **kw).results]  # type: ignore[arg-type]


def test_hnsw_indexes_add_delete_and_replace_at_once(tmp_path: Path, embedder: Embedder
                                                     ) -> None:
    docs = _docs(tmp_path / "docs")
    with _open(tmp_path / "index", embedder, vector_index="hnsw") as iso:
        iso.ingest(docs)
        exact = {q: _sources(iso, q, k=1) for q in (
            "Who started billing?", "Which channel gets the alerts of backups?",
            "When was the metrics service started?")}
        assert iso.compact() == {"questions": "hnsw", "atoms": "hnsw", "chunks": "hnsw"}
        assert iso.store.get_meta("vectors")["questions"]["impl"] == "hnsw"
        # at this size the graph finds what exact search found
        assert {q: _sources(iso, q, k=1) for q in exact} == exact
        assert iso.check() == []
        # delete: gone from every mode at once, before any compaction
        iso.delete(docs / "billing.md")
        for mode in (m for m in MODES if m != "graph"):  # (no knowledge graph here)
            assert "billing" not in _sources(iso, "When was the billing service started?",
                                             mode), mode
        # replace: the new text is found, the old is not
        (docs / "routing.md").write_text("# Routing\n\nThe routing service moved to the "
                                         "Bergen data centre in 2024.\n")
        iso.ingest(docs / "routing.md")
        assert _sources(iso, "Which service moved to Bergen?", k=1) == ["routing"]
        assert not any("Oslo" in r.chunk.text for r in iso.search(
            "Where does routing run?", k=20, mode="chunks-dense").results
            if "routing" in r.chunk.source)
        assert iso.check() == []
        # a new process maps the saved graph and applies the log after it
        with _open(tmp_path / "index", embedder) as other:
            assert _sources(other, "Which service moved to Bergen?", k=1) == ["routing"]
            assert "billing" not in _sources(other, "When was billing started?")
        iso.compact()
        assert support.connection(iso).execute(
            "SELECT COUNT(*) FROM vector_log").fetchone()[0] == 0
        assert _sources(iso, "Which service moved to Bergen?", k=1) == ["routing"]
        assert iso.check() == []


@pytest.mark.parametrize("exact_limit", [hnsw.EXACT_LIMIT, 0])
def test_a_filtered_hnsw_search_returns_k_when_k_match(
    tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch, exact_limit: int
) -> None:
    """Both ways a filtered graph search goes: the allowed items scored exactly, or the
    graph widened until k allowed ones are found."""
    monkeypatch.setattr(hnsw, "EXACT_LIMIT", exact_limit)
    with _open(tmp_path / "index", embedder, vector_index="hnsw") as iso:
        iso.ingest(_docs(tmp_path / "docs"))
        iso.compact()
        red = {p.stem for p in (tmp_path / "docs").glob("*.md")
               if "team: red" in p.read_text()}
        for k in (1, 3, 6):
            found = _sources(iso, "When was the service started?", k=k,
                             filters={"team": "red"})
            assert len(found) == k and set(found) <= red
        one = _sources(iso, "When was the service started?", k=5,
                       filters={"source": "*/email.md"})
        assert one == ["email"]  # fewer match than asked: all that match


def test_a_saved_hnsw_index_scores_a_filtered_search_from_its_file(
    tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mapped index reads the allowed items' vectors straight from its file (rows found
    by parsing usearch's layout, also after removals) and ranks them as the graph's own
    vectors do; a file whose layout does not read falls back to the graph."""
    texts = [f"The {topic} service in region {n} was moved to rack {n * 7 % 13}."
             for n in range(40) for topic in TOPICS]
    vectors = embedder.embed(texts)
    ids = np.arange(1000, 1000 + len(texts), dtype=np.int64)
    groups = ids // 4
    index = hnsw.HNSWIndex()
    index.add(ids, groups, vectors)
    index.remove(ids[::9])  # removed rows stay in the file, with no key
    index.save(tmp_path, "q")
    loaded = hnsw.HNSWIndex.load(tmp_path, "q")
    assert loaded is not None and loaded._saved_rows() is not None
    allowed = np.unique(groups)[::3]
    query = embedder.embed(["Which rack holds the billing service?"])[0]
    from_file = loaded.search(query, 25, allowed)
    loaded._saved, loaded._saved_looked = None, True  # the graph's own vectors
    from_graph = loaded.search(query, 25, allowed)
    assert [hit[0] for hit in from_file] == [hit[0] for hit in from_graph]
    assert np.allclose([h[2] for h in from_file], [h[2] for h in from_graph], atol=2e-3)
    assert all(group in set(allowed.tolist()) for _, group, _ in from_file)
    assert not set(ids[::9].tolist()) & {hit[0] for hit in from_file}

    monkeypatch.setattr(hnsw, "_saved_vectors", lambda path: (
        np.zeros((len(texts), 384), np.int8), np.arange(len(texts), dtype=np.uint64)))
    again = hnsw.HNSWIndex.load(tmp_path, "q")
    assert again is not None and again._saved_rows() is None  # keys do not agree
    assert [hit[0] for hit in again.search(query, 25, allowed)] == [
        hit[0] for hit in from_graph]


def test_a_reader_keeps_answering_while_another_handle_compacts(
    tmp_path: Path, embedder: Embedder
) -> None:
    docs = _docs(tmp_path / "docs")
    with _open(tmp_path / "index", embedder, vector_index="hnsw") as writer, \
            _open(tmp_path / "index", embedder) as reader:
        writer.ingest(docs)
        writer.compact()
        before = _sources(reader, "Who runs the alerts channel?")
        writer.compact()  # a new base: the reader's mapped files are replaced
        with reader.store.snapshot():
            assert _sources(reader, "Who runs the alerts channel?") == before
        assert _sources(reader, "Who runs the alerts channel?") == before


def test_writes_compact_by_themselves_and_auto_picks_hnsw_by_size(
    tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_vectors, "COMPACT_AFTER", 10)
    monkeypatch.setattr(sqlite_vectors, "HNSW_FROM", 30)
    with _open(tmp_path / "index", embedder) as iso:
        iso.ingest(_docs(tmp_path / "docs", TOPICS[:2]))
        iso.store.settle()  # compactions run in the background of the writing process
        bases = iso.store.get_meta("vectors") or {}
        assert bases["questions"]["impl"] == "exact"  # compacted while ingesting, small
        iso.ingest(_docs(tmp_path / "docs"))
        iso.store.settle()
        bases = iso.store.get_meta("vectors")
        assert bases["questions"]["impl"] == "hnsw" and bases["chunks"]["impl"] == "exact"
        assert iso.check() == []
        assert _sources(iso, "When was the billing service started?", k=1) == ["billing"]
        for topic in TOPICS[2:]:  # most of it deleted: what is left is small again
            iso.delete(tmp_path / "docs" / f"{topic}.md")
        # the log holds more entries than items are left: the count after it decides
        assert iso.compact()["questions"] == "exact"
        assert iso.check() == []


def test_an_empty_kind_compacted_to_hnsw_takes_vectors_later(
    tmp_path: Path, embedder: Embedder
) -> None:
    with _open(tmp_path / "index", embedder, vector_index="hnsw") as iso:
        iso.compact()  # nothing yet: empty indexes are saved
        iso.ingest(_docs(tmp_path / "docs"))
        assert iso.compact()["questions"] == "hnsw"
        assert iso.check() == []
        assert _sources(iso, "When was the billing service started?", k=1) == ["billing"]


def test_searches_in_threads_while_the_same_handle_writes(
    tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server searches from many threads while it ingests: every search answers, and
    finds only what is stored."""
    import threading

    monkeypatch.setattr(sqlite_vectors, "COMPACT_AFTER", 15)  # compactions meanwhile
    docs = _docs(tmp_path / "docs")
    failures: list[BaseException] = []
    with _open(tmp_path / "index", embedder, vector_index="hnsw") as iso:
        iso.ingest(docs / "billing.md")
        done = threading.Event()

        def search() -> None:
            while not done.is_set():
                try:
                    found = iso.search("When was the billing service started?", k=3)
                    assert found.results and len(found.results) <= 3
                except BaseException as exc:  # reported below
                    failures.append(exc)
                    return

        threads = [threading.Thread(target=search) for _ in range(3)]
        for thread in threads:
            thread.start()
        for topic in TOPICS[1:]:
            iso.ingest(docs / f"{topic}.md")
        done.set()
        for thread in threads:
            thread.join()
        iso.store.settle()
        assert not failures, failures[:3]
        assert iso.check() == []


def test_a_compaction_that_lost_the_race_is_dropped(
    tmp_path: Path, embedder: Embedder
) -> None:
    """Two compactions of one kind at once (two processes, or a background one and
    `isotope compact`): the one that commits second, started from the older base, is
    dropped, and nothing the first folded in is lost."""
    with _open(tmp_path / "index", embedder, vector_index="hnsw") as first, \
            _open(tmp_path / "index", embedder, vector_index="hnsw") as second:
        first.ingest(_docs(tmp_path / "docs"))
        stale = support.stale_compaction(second, "questions")
        first.compact()  # folds the whole log in, and deletes it
        assert not stale()  # the second's work, from before: dropped
        assert first.check() == [] and second.check() == []
        assert "billing" in _sources(second, "When was the billing service started?")


def test_a_crash_before_a_compaction_commits_loses_nothing(
    tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _open(tmp_path / "index", embedder, vector_index="hnsw") as iso:
        iso.ingest(_docs(tmp_path / "docs"))
        before = _sources(iso, "Who runs the alerts channel?")

        def crash(*args: object, **kwargs: object) -> None:
            raise KeyboardInterrupt  # the new base is saved; the meta never names it

        monkeypatch.setattr(sqlite_vectors, "digest", crash)
        with pytest.raises(KeyboardInterrupt):
            iso.compact()
        monkeypatch.undo()
    with _open(tmp_path / "index", embedder) as iso:
        assert iso.check() == [] and _sources(iso, "Who runs the alerts channel?") == before
        monkeypatch.setattr(sqlite_vectors, "STALE_AFTER", 0.0)  # (an hour old, by default)
        iso.compact()  # and the orphan files of the crash are cleared
        tags = set().union(*(sqlite_vectors._tags(info)
                             for info in iso.store.get_meta("vectors").values()))
        assert {p.name.split(".")[0] for p in (tmp_path / "index" / "vectors").iterdir()} \
            <= tags


def test_check_finds_vectors_out_of_step_and_repair_rebuilds_them(
    tmp_path: Path, embedder: Embedder
) -> None:
    with _open(tmp_path / "index", embedder, vector_index="hnsw") as iso:
        iso.ingest(_docs(tmp_path / "docs"))
        iso.compact()
        conn = support.connection(iso)
        # a question whose vector was never logged, and a vector whose row is gone
        conn.execute("INSERT INTO questions(rowid, id, atom_id, chunk_id, text, vector) "
                     "SELECT 99999, 'orphan-q', atom_id, chunk_id, 'Who pays the bills?', "
                     "X'' FROM questions WHERE chunk_id IN (SELECT id FROM chunks WHERE "
                     "source LIKE '%billing.md') LIMIT 1")
        vector = embedder.embed(["nothing"])[0]
        conn.execute("INSERT INTO vector_log(kind, item, grp, vector) VALUES "
                     "('atoms', 88888, 1, ?)", (np.asarray(vector, np.float32).tobytes(),))
        problems = iso.check()
        assert any("1 questions have no sound vector" in p for p in problems), problems
        assert any("vectors of atoms belong to no row" in p for p in problems), problems
        assert iso.repair().problems == []
        assert iso.check() == []
        assert "billing" in _sources(iso, "Who pays the bills?")


def test_an_hnsw_file_of_the_wrong_size_is_never_mapped(tmp_path: Path, embedder: Embedder
                                                       ) -> None:
    """usearch maps what it is given: a file cut short or grown is refused before (a
    damaged graph could crash the process), and repair embeds the vectors again."""
    from isotope.errors import IndexDamaged

    with _open(tmp_path / "index", embedder, vector_index="hnsw") as iso:
        iso.ingest(_docs(tmp_path / "docs"))
        iso.compact()
    graph = next((tmp_path / "index" / "vectors").glob("questions-*.usearch"))
    data = graph.read_bytes()
    graph.write_bytes(data[: len(data) // 2])
    with _open(tmp_path / "index", embedder) as iso:
        with pytest.raises(IndexDamaged, match="check --repair"):
            iso.search("When was the billing service started?", mode="questions-dense")
        assert iso.repair().problems == []
        assert _sources(iso, "When was the billing service started?", k=1) == ["billing"]


def test_replaced_vector_files_go_once_retired(tmp_path: Path, embedder: Embedder,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    docs = _docs(tmp_path / "docs")
    folder = tmp_path / "index" / "vectors"
    with _open(tmp_path / "index", embedder, keyword_index="postings") as iso:
        iso.ingest(docs)
        iso.compact()
        first = set(p.name for p in folder.iterdir())
        iso.compact()
    # kept a while for readers that read the old names just before
    assert first <= set(p.name for p in folder.iterdir())
    monkeypatch.setattr(sqlite_vectors, "RETIRE_AFTER", 0.0)
    with _open(tmp_path / "index", embedder) as iso:  # a writer tidies when it opens
        assert not first & set(p.name for p in folder.iterdir())
        assert _sources(iso, "Who started billing?", k=1) == ["billing"]
        assert _sources(iso, "billing", k=1, mode="chunks-bm25") == ["billing"]
        assert iso.check() == []
