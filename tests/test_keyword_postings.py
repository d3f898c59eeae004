"""Keyword search from saved postings (what large atoms and chunks get; forced on here at
small sizes): the same ranking and scores as FTS5's bm25, rows written or deleted since
the last compaction counted at once, and a lost postings file costing speed, never
results. Real store, real embedder, the fake model's replies."""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from isotope import Isotope
from isotope.embedders import Embedder
from isotope.stores import KINDS

import support
from conftest import FakeLLM

TOPICS = ["billing", "routing", "login", "search", "reports", "alerts", "backups", "metrics",
          "caching", "queues", "storage", "email", "payments", "invoices", "tickets"]
QUERIES = ["billing service started", "alerts channel ops", "servers Oslo data centre",
           "invoices team", "which service runs on 7 servers", "payments payment paid",
           "started 2003", "queues storage caching"]


def _docs(folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    for n, topic in enumerate(TOPICS):
        (folder / f"{topic}.md").write_text(
            f"# The {topic} service\n\nThe {topic} service was started in {2000 + n} by "
            f"team {n}. It runs on {n + 2} servers in the Oslo data centre"
            + " and the Bergen one" * (n % 3) + f".\n\nAlerts for {topic} go to channel "
            f"{topic}-ops. {'Payments are paid daily. ' * (n % 4)}\n")
    return folder


def _open(index: Path, embedder: Embedder, **settings: object) -> Isotope:
    return Isotope.open(index, embedder=embedder, llm=FakeLLM(), cache=False, **settings)


def _compacted(tmp_path: Path, embedder: Embedder) -> Isotope:
    """An index of the docs in ``tmp_path/docs``, with saved postings for every kind."""
    iso = _open(tmp_path / "index", embedder, keyword_index="postings")
    iso.ingest(_docs(tmp_path / "docs"))
    iso.compact()
    return iso


def _fts5(iso: Isotope, kind: str, query: str, k: int) -> list[tuple[int, float]]:
    """The store's FTS5 ranking, asked directly."""
    words = dict.fromkeys(query.lower().split())
    match = " OR ".join(f'"{w}"' for w in words)
    return [(r, -s) for r, s in support.connection(iso).execute(
        f"SELECT rowid, bm25({kind}_fts) FROM {kind}_fts WHERE {kind}_fts MATCH ? "
        f"ORDER BY bm25({kind}_fts), rowid LIMIT ?", (match, k)).fetchall()]


def _postings(iso: Isotope, kind: str, query: str, k: int) -> list[tuple[int, float]]:
    layer = support.keyword_layer(iso, kind)
    assert layer is not None, f"{kind} has no saved postings"
    found = layer.search(list(dict.fromkeys(query.lower().split())), k)
    assert found is not None
    return found


def _same(found: list[tuple[int, float]], expected: list[tuple[int, float]]) -> None:
    assert [r for r, _ in found] == [r for r, _ in expected]
    assert [round(s, 9) for _, s in found] == [round(s, 9) for _, s in expected]


def test_the_keyword_unit_scores_as_fts5_does(tmp_path: Path) -> None:
    """BM25 from the plain functions every engine uses (terms, weights, idf, saturation)
    gives FTS5's own bm25() for every row and query, repeated and split words included."""
    import sqlite3

    import numpy as np

    from isotope.stores import keywords

    texts = [(tmp_path.name + " " + text) for text in (
        "The billing service runs on seven servers in Oslo.",
        "Billing invoices are paid daily; payments are paid by the billing team.",
        "Alerts go to the ops channel at 09:30, e-mail alerts to the on-call rota.",
        "Servers, servers and more servers: the routing service runs on 12 of them.")]
    conn = sqlite3.connect(":memory:")
    conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(text, tokenize='{keywords.TOKENIZE}')")
    conn.executemany("INSERT INTO t(rowid, text) VALUES (?, ?)", enumerate(texts, 1))
    counts = keywords.TOKENIZER.texts(texts)
    lengths = np.array([sum(c.values()) for c in counts], float)
    for query in ("billing servers", "paid paid billing", "alerts 09 e-mail", "Oslo rota",
                  "the service"):
        words = keywords.query_words(query)
        terms = keywords.query_terms(words)
        held = np.array([sum(1 for c in counts if t in c) for t in terms], float)
        weights = keywords.idf(len(texts), held) * np.array(list(terms.values()), float)
        ours = {}
        for row, held_terms in enumerate(counts, 1):
            freqs = np.array([float(held_terms[t]) for t in terms])
            parts = keywords.saturation(freqs, np.full(len(terms), lengths[row - 1]),
                                        float(lengths.mean()))
            ours[row] = float((weights * parts).sum())
        match = " OR ".join(f'"{w}"' for w in words)
        fts = dict(conn.execute("SELECT rowid, -bm25(t) FROM t WHERE t MATCH ?", (match,)))
        assert fts, query
        assert {r: round(s, 9) for r, s in fts.items()} == {
            r: round(s, 9) for r, s in ours.items() if s}, query


def test_postings_rank_as_fts5_and_follow_writes_at_once(tmp_path: Path,
                                                         embedder: Embedder) -> None:
    docs = tmp_path / "docs"
    with _compacted(tmp_path, embedder) as iso:
        bases = iso.store.get_meta("vectors")
        assert all(bases[kind].get("keywords") for kind in KINDS)
        for kind in KINDS:
            for query in QUERIES:
                _same(_postings(iso, kind, query, 5), _fts5(iso, kind, query, 5))
        # written since the compaction: found at once, deleted: gone at once
        (docs / "radar.md").write_text("# Radar\n\nThe radar service watches the Oslo "
                                       "data centre.\n")
        iso.ingest(docs / "radar.md")
        iso.delete(docs / "billing.md")
        for mode in ("atoms-bm25", "chunks-bm25", "questions-bm25"):
            found = [Path(r.chunk.source).stem
                     for r in iso.search("radar service Oslo", k=20, mode=mode).results]
            assert found[0] == "radar", mode
            assert "billing" not in [
                Path(r.chunk.source).stem
                for r in iso.search("billing service", k=20, mode=mode).results]
        # a new process reads the saved postings and the log after them
        with _open(tmp_path / "index", embedder) as other:
            assert Path(other.search("radar", k=1, mode="chunks-bm25").results[0]
                        .chunk.source).stem == "radar"
        # folded in by the next compaction: FTS5's ranking again, to the last digit
        iso.compact()
        for kind in KINDS:
            for query in [*QUERIES, "radar watches"]:
                _same(_postings(iso, kind, query, 10), _fts5(iso, kind, query, 10))
        assert iso.check() == []


def test_hybrid_gives_the_same_results_from_postings_and_fts5(tmp_path: Path,
                                                              embedder: Embedder) -> None:
    docs = _docs(tmp_path / "docs")
    results = {}
    for policy in ("postings", "fts5"):
        with _open(tmp_path / policy, embedder, keyword_index=policy) as iso:
            iso.ingest(docs)
            iso.compact()
            results[policy] = [
                [(r.chunk.source, round(r.score, 5))
                 for r in iso.search(q, k=5, mode="hybrid").results]
                for q in QUERIES]
    assert results["postings"] == results["fts5"]


def test_lost_postings_fall_back_to_fts5_and_compact_makes_them_again(
        tmp_path: Path, embedder: Embedder, caplog: pytest.LogCaptureFixture) -> None:
    with _compacted(tmp_path, embedder) as iso:
        before = [r.chunk.id for r in iso.search("payments paid", k=5,
                                                 mode="chunks-bm25").results]
        tag = iso.store.get_meta("vectors")["chunks"]["tag"]
    path = tmp_path / "index" / "vectors" / f"{tag}.keywords"
    path.write_bytes(path.read_bytes()[:100])  # cut
    with _open(tmp_path / "index", embedder, keyword_index="postings") as iso:
        with caplog.at_level(logging.WARNING):
            after = [r.chunk.id for r in iso.search("payments paid", k=5,
                                                    mode="chunks-bm25").results]
        assert after == before
        assert "keyword index" in caplog.text and "FTS5" in caplog.text
        problems = iso.check()
        assert any("keyword postings" in p and "isotope compact" in p for p in problems)
        iso.compact()
        assert iso.check() == []
        assert support.keyword_layer(iso, "chunks") is not None


def test_common_words_rank_as_fts5_and_split_words_go_to_fts5(tmp_path: Path,
                                                               embedder: Embedder) -> None:
    with _compacted(tmp_path, embedder) as iso:
        # "service" is in every chunk (FTS5's floor idf): all of them, ranked by length
        _same(_postings(iso, "chunks", "service the", 20), _fts5(iso, "chunks", "service the", 20))
        # a word FTS5 splits in two terms is a phrase: FTS5 answers it
        layer = support.keyword_layer(iso, "chunks")
        assert layer.search(["billing_ops"], 5) is None
        found = iso.search("billing-ops billing_ops", k=3, mode="chunks-bm25").results
        assert Path(found[0].chunk.source).stem == "billing"


def _array_span(path: Path, name: str) -> tuple[int, int]:
    """Where array ``name`` lies in a saved keyword index: (offset, bytes)."""
    import json

    import numpy as np

    raw = path.read_bytes()
    size = int.from_bytes(raw[8:16], "little")
    header = json.loads(raw[16:16 + size])
    dtype, offset, count, _ = header["arrays"][name]
    return 16 + (size + 7) // 8 * 8 + offset, np.dtype(dtype).itemsize * count


def _edit_header(path: Path, edit: Any) -> None:
    """Rewrite a saved keyword index's header in place (``edit(header)``), in the room
    it had (JSON ends in spaces), so that no offset or size moves."""
    import json

    raw = bytearray(path.read_bytes())
    size = int.from_bytes(raw[8:16], "little")
    header = json.loads(raw[16:16 + size])
    edit(header)
    new = json.dumps(header, separators=(",", ":")).encode()
    assert len(new) <= size
    raw[16:16 + size] = new + b" " * (size - len(new))
    path.write_bytes(bytes(raw))


def _damage_header(damage: str) -> Any:
    def edit(header: dict[str, Any]) -> None:
        if damage == "header count":  # idf and average length would change
            header["total"] += 3
            header["tokens"] *= 2
        elif damage == "header type":  # the same bytes read as another type
            header["arrays"]["docs"][0] = header["arrays"]["docs"][0].replace("i", "u")
        else:
            header["total"] = None
    return edit


@pytest.mark.parametrize("damage", ["shuffled", "out of range", "header count",
                                    "header type", "header null"])
def test_postings_damaged_in_place_are_never_used(tmp_path: Path, embedder: Embedder,
                                                  damage: str) -> None:
    """The postings (or the header that says how to read them) rewritten in place (the
    same size, so no size check can see it): the results stay FTS5's in every mode,
    hybrid included, and check says so truly."""
    import numpy as np

    modes = ("atoms-bm25", "chunks-bm25", "questions-bm25", "hybrid")
    with _compacted(tmp_path, embedder) as iso:
        expected = {(q, m): [(r.chunk.id, round(r.score, 6))
                             for r in iso.search(q, k=5, mode=m).results]
                    for q in QUERIES for m in modes}
        tags = {kind: iso.store.get_meta("vectors")[kind]["tag"] for kind in KINDS}
    for tag in tags.values():
        path = tmp_path / "index" / "vectors" / f"{tag}.keywords"
        if damage.startswith("header"):
            _edit_header(path, _damage_header(damage))
            continue
        start, size = _array_span(path, "docs")
        raw = bytearray(path.read_bytes())
        docs = np.frombuffer(bytes(raw[start:start + size]), dtype=np.int32).copy()
        docs = docs[::-1].copy() if damage == "shuffled" else docs + 10_000_000
        raw[start:start + size] = docs.tobytes()
        path.write_bytes(bytes(raw))
    with _open(tmp_path / "index", embedder, keyword_index="postings") as iso:
        for (query, mode), before in expected.items():
            found = [(r.chunk.id, round(r.score, 6))
                     for r in iso.search(query, k=5, mode=mode).results]
            assert found == before, (query, mode)
        problems = iso.check()
        assert len([p for p in problems if "keyword postings" in p]) == len(KINDS)
        assert all("FTS5" in p for p in problems if "keyword postings" in p)
        iso.compact()
        assert iso.check() == []
        for kind in KINDS:
            layer = support.keyword_layer(iso, kind)
            assert layer is not None and not layer.base.damaged


def test_postings_of_an_index_without_questions_then_enriched(tmp_path: Path,
                                                              embedder: Embedder) -> None:
    """Compacted before any question existed (an empty base), then questions are added:
    questions-bm25, and hybrid weighing it, work and rank as FTS5."""
    with _open(tmp_path / "index", embedder, keyword_index="postings") as iso:
        iso.ingest(_docs(tmp_path / "docs"), questions="later")
        iso.compact()
        assert iso.search("billing service", mode="questions-bm25").results == []
        iso.enrich()
        found = iso.search("When was the billing service started?", k=3,
                           mode="questions-bm25").results
        assert Path(found[0].chunk.source).stem == "billing"
        hybrid = iso.search("billing service started", k=3,
                            weights={"questions-bm25": 1.0}).results
        assert Path(hybrid[0].chunk.source).stem == "billing"
        iso.compact()
        _same(_postings(iso, "questions", "billing service started", 5),
              _fts5(iso, "questions", "billing service started", 5))


def test_postings_follow_a_chunks_questions_at_once(tmp_path: Path,
                                                   embedder: Embedder) -> None:
    """A question added or disabled by hand after the compaction changes its chunk's
    keyword text: the saved chunk postings score that chunk from its new text at once (in
    this process and in a new one; with the statistics of the last compaction), and give
    FTS5's scores again after the next compaction."""
    docs = tmp_path / "docs"
    with _compacted(tmp_path, embedder) as iso:
        assert iso.search("zeppelin", mode="chunks-bm25").results == []
        asked = iso.add_question(docs / "billing.md", "Does billing bill zeppelin rides?",
                                 chunk=0)
        found = iso.search("zeppelin", mode="chunks-bm25").results
        assert [Path(r.chunk.source).stem for r in found] == ["billing"]
        assert [r for r, _ in _postings(iso, "chunks", "zeppelin", 5)] == [
            r for r, _ in _fts5(iso, "chunks", "zeppelin", 5)]
        with _open(tmp_path / "index", embedder) as other:
            assert [Path(r.chunk.source).stem for r in other.search(
                "zeppelin", mode="chunks-bm25").results] == ["billing"]
        iso.disable_question(asked)
        assert iso.search("zeppelin", mode="chunks-bm25").results == []
        iso.enable_question(asked)
        iso.compact()
        _same(_postings(iso, "chunks", "zeppelin billing", 5),
              _fts5(iso, "chunks", "zeppelin billing", 5))
        assert Path(iso.search("zeppelin", mode="chunks-bm25").results[0].chunk.source
                    ).stem == "billing"
        assert iso.check() == []


def test_term_frequencies_over_255_count_in_full(tmp_path: Path, embedder: Embedder) -> None:
    """A word written 600, 300 and 256 times: three different scores, in FTS5's order
    (frequencies were capped at 255, which tied them and changed the ranking)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, times in (("a", 256), ("b", 600), ("c", 300)):
        (docs / f"{name}.txt").write_text("zebra " * times + "stripes here.\n")
    with _open(tmp_path / "index", embedder, keyword_index="postings", chunk_size=4000,
               chunk_overlap=0) as iso:
        iso.ingest(docs, questions="later")
        iso.compact()
        found = _postings(iso, "chunks", "zebra", 3)
        _same(found, _fts5(iso, "chunks", "zebra", 3))
        assert len({round(s, 9) for _, s in found}) == 3


def test_postings_read_in_small_batches_are_the_same(tmp_path: Path, embedder: Embedder,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The build counts occurrences a batch at a time; a term whose occurrences run past
    a batch's end (every term, with batches this small) is counted once, whole."""
    from isotope.stores import sqlite_keywords

    with _compacted(tmp_path, embedder) as iso:
        conn = support.connection(iso)
        for kind in KINDS:
            whole = sqlite_keywords.KeywordBase.build(conn, kind)
            with monkeypatch.context() as patch:
                patch.setattr(sqlite_keywords, "_postings",
                              functools.partial(sqlite_keywords._postings, batch=3))
                small = sqlite_keywords.KeywordBase.build(conn, kind)
            assert len(whole.docs) > 100
            for name in sqlite_keywords.KeywordBase._ARRAYS:
                assert np.array_equal(getattr(whole, name), getattr(small, name)), name
            # every posting is a (row, frequency) FTS5 holds
            held = {(term, doc) for term, doc in conn.execute(
                f"SELECT term, doc FROM temp.isotope_{kind}_instance")}
            assert len(held) == len(whole.docs)


def test_postings_with_filters_and_access_rank_as_fts5_restricted(
        tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """A filtered keyword search (a principal's, a --where) reads the saved postings among
    the rows that meet the conditions: FTS5's restricted ranking, to the last digit, and
    never fewer than k rows where k match."""
    from isotope.access import Principal, condition
    from isotope.search.filters import parse

    with _compacted(tmp_path, embedder) as iso:
        sources = sorted(s.source.uri for s in iso.sources(check_files=False))
        iso.store.set_access(sources[::3], ["group:a"])
        iso.store.set_access(sources[1::3], ["public"])
        conditions = [
            [condition(Principal("x", ("a",)), control=True)],
            [condition(Principal("x"), control=True)],
            [condition(Principal("x"), control=False)],
            parse({"source": "*/billing.md"}),
            [*parse({"type": "markdown"}), condition(Principal("y", ("a",)), control=True)]]
        store = iso.store
        for kind in KINDS:
            assert support.keyword_layer(iso, kind) is not None
            for conds in conditions:
                allowed = store._rows_meeting(kind, conds)  # type: ignore[attr-defined]
                assert support.keyword_layer(iso, kind).search(  # type: ignore[union-attr]
                    ["billing"], 4, allowed) is not None  # (the saved postings answer)
                for query in QUERIES:
                    saved = store.keyword_search(kind, query, 4, conds)  # type: ignore[arg-type]
                    with monkeypatch.context() as patch:
                        patch.setattr(store._place.vectors, "keywords", lambda kind: None)
                        fts5 = store.keyword_search(kind, query, 4, conds)  # type: ignore[arg-type]
                    assert [(h.chunk_id, round(h.score, 9)) for h in saved] == [
                        (h.chunk_id, round(h.score, 9)) for h in fts5], (kind, conds, query)
        # a row written since the postings were saved: found where it may be, not elsewhere
        iso.ingest_chunks(["The quetzal radar watches the Oslo centre."], source="late",
                          allow=["group:b"])
        for kind in KINDS:
            for conds, found in (([condition(Principal("x", ("b",)), control=True)], True),
                                 (conditions[0], False), (conditions[3], False)):
                hits = store.keyword_search(kind, "quetzal radar", 4, conds)  # type: ignore[arg-type]
                assert any("quetzal" in h.text for h in hits) == found, (kind, conds)
