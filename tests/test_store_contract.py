"""The Store contract, as every backend must keep it. The ``store`` fixture is
parametrised by backend: the embedded SQLite store today; a server store adds its
parameter here and runs the same suite. Real vectors from the bundled embedder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from isotope import stores
from isotope.embedders import Embedder
from isotope.errors import IndexLocked
from isotope.models import Atom, Chunk, DroppedQuestion, Question, Source, content_hash
from isotope.search.filters import parse
from isotope.stores import ChunkQuestions, SourceBatch, Store

import support
from conftest import open_store

DOCS = {
    "/docs/garage.md": ["The parking garage opens at six in the morning.",
                        "Visitors park on level two of the garage."],
    "/docs/pool.md": ["The swimming pool is heated to twenty-eight degrees."],
    "/docs/gym.txt": ["The gym has rowing machines and free weights."],
}



@pytest.fixture
def location(every_location: str) -> str:
    """Every engine: embedded (its vectors with usearch, in a Chroma folder, in a Chroma
    server), and PostgreSQL with each keyword engine."""
    return every_location


@pytest.fixture
def store(location: str) -> Iterator[Store]:
    opened = open_store(location)
    yield opened
    opened.close()


def _batch(embedder: Embedder, uri: str, texts: list[str], **metadata: object) -> SourceBatch:
    chunks = [Chunk(text=t, source=uri, index=i, start=0, end=len(t),
                    metadata={"n": i}) for i, t in enumerate(texts)]
    atoms = [Atom(text=c.text, chunk_id=c.id, index=0, start=0, end=len(c.text))
             for c in chunks]
    questions = [Question(text=f"What is said about {c.text.split()[1]}?", atom_id=a.id,
                          chunk_id=c.id) for c, a in zip(chunks, atoms, strict=True)]
    return SourceBatch(
        source=Source(uri=uri, content_hash=content_hash("".join(texts)), loader="text",
                      metadata=dict(metadata), root="/docs"),
        chunks=chunks, atoms=atoms, questions=questions,
        chunk_vectors=embedder.embed(texts), atom_vectors=embedder.embed(texts),
        question_vectors=embedder.embed([q.text for q in questions]))


@pytest.fixture
def filled(store: Store, embedder: Embedder) -> Store:
    for uri, texts in DOCS.items():
        store.add(_batch(embedder, uri, texts, kind=Path(uri).suffix[1:]))
    return store


def test_add_stores_a_source_with_everything_derived(filled: Store) -> None:
    assert filled.counts() == {"sources": 3, "chunks": 4, "atoms": 4, "questions": 4,
                              "chunks_waiting": 0, "sources_waiting": 0,
                              "sources_without_access": 3}
    source = filled.get_source("/docs/garage.md")
    assert source is not None and source.loader == "text" and source.root == "/docs"
    assert [(i.source.uri, i.chunks, i.atoms, i.questions) for i in filled.sources()] == [
        ("/docs/garage.md", 2, 2, 2), ("/docs/gym.txt", 1, 1, 1), ("/docs/pool.md", 1, 1, 1)]
    assert filled.get_source("/docs/none.md") is None


def test_members_are_those_whose_container_is_asked_for(filled: Store,
                                                       embedder: Embedder) -> None:
    """A search showing an email reads the members of that email only (it read every
    source twice); a name sharing the email's prefix, or a member's member, is not one."""
    box = "/docs/mail[1]*.eml"
    for uri, container in ((f"{box}#a.txt", box), (f"{box}#b.txt", box),
                           (f"{box}#b.txt#c.txt", f"{box}#b.txt"), (f"{box}x#d.txt", None)):
        extra = {"container": container} if container else {}
        filled.add(_batch(embedder, uri, [f"The {uri.rsplit('#')[-1]} note is here."], **extra))
    found = filled.members([box, "/docs/garage.md"])
    assert {k: sorted(s.uri for s in v) for k, v in found.items()} == {
        box: [f"{box}#a.txt", f"{box}#b.txt"]}
    assert [s.uri for s in filled.members([f"{box}#b.txt"])[f"{box}#b.txt"]] == [
        f"{box}#b.txt#c.txt"]


def test_add_replaces_what_a_source_had(filled: Store, embedder: Embedder) -> None:
    filled.add(_batch(embedder, "/docs/garage.md", ["The garage is closed on Sundays."]))
    assert filled.counts()["chunks"] == 3
    texts = [h.text for h in filled.keyword_search("chunks", "garage", 10)]
    assert texts == ["The garage is closed on Sundays."]


def test_add_can_take_the_place_of_another_source(filled: Store, embedder: Embedder) -> None:
    batch = _batch(embedder, "/link/pool.md", DOCS["/docs/pool.md"])
    batch.replaces = "/docs/pool.md"
    filled.add(batch)
    assert [i.source.uri for i in filled.sources()] == [
        "/docs/garage.md", "/docs/gym.txt", "/link/pool.md"]


@pytest.mark.parametrize("kind", ["questions", "atoms", "chunks"])
def test_search_finds_the_nearest_items_best_first(filled: Store, embedder: Embedder,
                                                   kind: str) -> None:
    hits = filled.search(kind, embedder.embed_one("How warm is the swimming pool?"),  # type: ignore[arg-type]
                         3)
    assert len(hits) == 3 and hits[0].kind == kind
    assert filled.get_chunks([hits[0].chunk_id])[hits[0].chunk_id].source == "/docs/pool.md"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert -1.0 <= hits[-1].score <= hits[0].score <= 1.0
    assert filled.search(kind, embedder.embed_one("pool"), 0) == []  # type: ignore[arg-type]


def test_search_keeps_only_chunks_meeting_the_filters(filled: Store, embedder: Embedder
                                                      ) -> None:
    query = embedder.embed_one("How warm is the swimming pool?")
    hits = filled.search("chunks", query, 10, parse({"kind": "txt"}))
    assert [filled.get_chunks([h.chunk_id])[h.chunk_id].source for h in hits] == [
        "/docs/gym.txt"]
    assert filled.search("chunks", query, 10, parse({"source": "/docs/garage*"})) != []
    assert filled.search("chunks", query, 10, parse({"n": {"gte": 1}})) and all(
        filled.get_chunks([h.chunk_id])[h.chunk_id].metadata["n"] >= 1
        for h in filled.search("chunks", query, 10, parse({"n": {"gte": 1}})))


def test_access_lists_are_a_condition_of_every_search(filled: Store,
                                                      embedder: Embedder) -> None:
    from isotope.access import Principal, condition

    assert filled.set_access(["/docs/pool.md", "/docs/nothing.md"], ["group:swim"]) == 1
    assert filled.get_source("/docs/pool.md").access == ["group:swim"]  # type: ignore[union-attr]
    swimmer = [condition(Principal("ada", ("swim",)), control=True)]
    other = [condition(Principal("bob"), control=True)]
    open_ = [condition(Principal("bob"), control=False)]  # unlisted sources seen
    query = embedder.embed_one("How warm is the swimming pool?")
    sources = {name: {filled.get_chunks([h.chunk_id])[h.chunk_id].source
                      for h in filled.search("chunks", query, 10, cond)}  # type: ignore[arg-type]
               for name, cond in (("swimmer", swimmer), ("other", other), ("open", open_))}
    assert sources == {"swimmer": {"/docs/pool.md"}, "other": set(),
                       "open": {"/docs/garage.md", "/docs/gym.txt"}}
    assert filled.keyword_search("chunks", "pool", 5, other) == []  # type: ignore[arg-type]
    assert filled.keyword_search("chunks", "pool", 5, swimmer)  # type: ignore[arg-type]
    pool = filled.search("chunks", query, 1)[0].chunk_id
    assert filled.visible_chunks([pool], swimmer) == {pool}  # type: ignore[arg-type]
    assert filled.visible_chunks([pool], open_) == set()  # type: ignore[arg-type]
    assert filled.counts(swimmer)["chunks"] == 1  # type: ignore[arg-type]
    assert [i.source.uri for i in filled.sources(swimmer)] == [  # type: ignore[arg-type]
        "/docs/pool.md"]
    assert filled.counts()["sources_without_access"] == 2


def test_search_by_chunk_groups_the_hits_of_each_chunk(filled: Store, embedder: Embedder
                                                       ) -> None:
    found = filled.search_by_chunk("questions", embedder.embed_one("garage"), 2, per_chunk=2)
    assert len(found) == 2 and len({chunk for chunk, _ in found}) == 2
    assert all(hits and all(h.chunk_id == chunk for h in hits) for chunk, hits in found)


def test_keyword_search_ranks_by_bm25(filled: Store) -> None:
    hits = filled.keyword_search("chunks", "garage level visitors", 5)
    assert hits[0].text == "Visitors park on level two of the garage."
    assert filled.keyword_search("chunks", "   ", 5) == []
    assert filled.keyword_search("questions", "NOT OR \"AND", 5) == []  # no query syntax
    assert [h.text for h in filled.keyword_search("chunks", "garage", 5,
                                                  parse({"n": 0}))] == [
        "The parking garage opens at six in the morning."]


def test_a_chunk_is_found_by_the_words_of_its_questions(store: Store,
                                                       embedder: Embedder) -> None:
    """A chunk's keyword text holds its questions' text (document expansion), kept in step
    when questions are added by hand, disabled, enabled, carried to a new version of the
    source and generated for a chunk that waited for them."""
    def found(words: str) -> list[str]:
        return [h.chunk_id for h in store.keyword_search("chunks", words, 5)]

    batch = _batch(embedder, "/docs/pool.md", DOCS["/docs/pool.md"])
    store.add(batch)
    chunk, atom = batch.chunks[0], batch.atoms[0]
    assert found("said") == [chunk.id]  # (only its generated question says it)
    assert found("lido") == []
    asked = Question(text="How warm is the lido?", atom_id=atom.id, chunk_id=chunk.id,
                     origin="manual")
    vector = embedder.embed([asked.text])
    assert store.add_kept_questions(chunk.id, [asked], vector) == 1
    assert found("lido") == [chunk.id]
    assert store.disable_question(asked.id) is True
    assert found("lido") == []
    assert store.enable_question(asked.id, vector) is True
    assert found("lido") == [chunk.id]
    # a new version of the source: the question goes to the chunk that covers its text
    new = _batch(embedder, "/docs/pool.md",
                 ["The swimming pool is heated to twenty-nine degrees."])
    store.add(new)
    assert found("lido") == [new.chunks[0].id]
    # a chunk stored before its questions: found by them once they are generated
    later = _batch(embedder, "/docs/gym.txt", DOCS["/docs/gym.txt"])
    later.questions, later.question_vectors = [], later.question_vectors[:0]
    later.pending = {c.id for c in later.chunks}
    store.add(later)
    assert found("treadmill") == []
    generated = [Question(text="Is there a treadmill?", atom_id=later.atoms[0].id,
                          chunk_id=later.chunks[0].id)]
    store.add_questions([ChunkQuestions(later.chunks[0].id, generated,
                                        embedder.embed([generated[0].text]))])
    assert found("treadmill") == [later.chunks[0].id]
    assert found("lido") == [new.chunks[0].id]
    assert store.check() == []
    # written behind the store's back: the check names it, repair writes it again
    support.connection(store).execute(
        "UPDATE chunks SET questions_text = 'zeppelin' WHERE id = " + store.dialect.mark,
        (later.chunks[0].id,))
    assert any("keyword text of 1 chunks" in p for p in store.inspect().problems)
    store.repair()
    assert store.inspect().problems == []
    assert found("zeppelin") == [] and found("treadmill") == [later.chunks[0].id]


def test_delete_source_removes_everything_derived(filled: Store) -> None:
    assert filled.delete_source("/docs/garage.md") is True
    assert filled.delete_source("/docs/garage.md") is False
    assert filled.counts() == {"sources": 2, "chunks": 2, "atoms": 2, "questions": 2,
                              "chunks_waiting": 0, "sources_waiting": 0,
                              "sources_without_access": 2}
    assert filled.keyword_search("chunks", "garage", 5) == []


def test_chunks_stored_before_their_questions_wait_until_they_get_them(
        store: Store, embedder: Embedder) -> None:
    batch = _batch(embedder, "/docs/garage.md", DOCS["/docs/garage.md"])
    batch.questions, batch.question_vectors = [], batch.question_vectors[:0]
    batch.pending = {c.id for c in batch.chunks}
    store.add(batch)
    first, second = batch.chunks
    assert store.counts()["chunks_waiting"] == 2 == store.count_waiting(["/docs/garage.md"])
    assert store.count_waiting(["/docs/pool.md"]) == 0
    assert store.counts()["sources_waiting"] == 1
    assert store.without_questions([first.id, "nope"]) == {first.id}
    page = store.pending_chunks(1)
    assert [p.chunk.id for p in page] == [min(first.id, second.id)]
    assert [a.text for a in page[0].atoms] == [page[0].chunk.text]
    assert page[0].atom_vectors.shape == (1, embedder.dim)
    after = store.pending_chunks(5, after=page[0].chunk.id)
    assert [p.chunk.id for p in after] == [max(first.id, second.id)]
    assert store.pending_chunks(5, sources=["/docs/pool.md"]) == []
    atom = batch.atoms[0]
    asked = [Question(text=f"Question {n} about the garage?", atom_id=atom.id,
                      chunk_id=first.id) for n in range(3)]
    vectors = embedder.embed([q.text for q in asked])
    store.add_questions([ChunkQuestions(first.id, asked, vectors, complete=False),
                         ChunkQuestions("gone", [], vectors[:0])])
    assert store.counts()["questions"] == 3 and store.without_questions([first.id])
    # asked again: its questions are replaced, not added to; then it is complete
    store.add_questions([ChunkQuestions(first.id, asked[:2], vectors[:2])])
    assert store.counts()["questions"] == 2 and not store.without_questions([first.id])
    assert [p.chunk.id for p in store.pending_chunks(5)] == [second.id]
    assert store.search("questions", vectors[0], 1)[0].chunk_id == first.id
    assert store.check() == []


def test_get_chunks_leaves_out_unknown_ids(filled: Store) -> None:
    hit = filled.keyword_search("chunks", "pool", 1)[0]
    found = filled.get_chunks([hit.chunk_id, "nope"])
    assert list(found) == [hit.chunk_id] and found[hit.chunk_id].metadata == {"n": 0}


def test_meta_round_trips_json(store: Store) -> None:
    store.set_meta("settings", {"a": [1, 2.5, None, "x"]})
    assert store.get_meta("settings") == {"a": [1, 2.5, None, "x"]}
    assert store.get_meta("nothing") is None


def test_stored_chunks_are_keyed_by_the_text_hash(filled: Store) -> None:
    stored = filled.stored_chunks("/docs/garage.md")
    text = DOCS["/docs/garage.md"][1]
    assert set(stored) == {content_hash(t) for t in DOCS["/docs/garage.md"]}
    assert [q.text for q in stored[content_hash(text)].questions] == [
        "What is said about park?"]


def test_writers_are_one_at_a_time_unless_declared_concurrent(store: Store,
                                                               location: str) -> None:
    other = stores.open(location, create=False)
    try:
        if store.concurrent_writers:
            with store.writer(), other.writer():  # both write, each locking its sources
                pass
        else:
            with store.writer(), pytest.raises(IndexLocked), other.writer():
                pass
        with other.writer():  # free again
            pass
    finally:
        other.close()


def test_a_sound_store_checks_clean(filled: Store) -> None:
    with filled.snapshot():
        assert filled.counts()["sources"] == 3
    assert filled.check() == [] and filled.damaged_sources() == []


def test_a_source_that_lost_rows_is_named_by_the_check(filled: Store) -> None:
    """A row lost behind the store's back (a manual DELETE) is found against the counts
    the source stored, on both engines, naming the source and what it lost."""
    conn = support.connection(filled)
    with conn:  # (a transaction that commits, in either driver)
        conn.execute("DELETE FROM questions WHERE chunk_id IN (SELECT id FROM chunks WHERE "
                     "source = '/docs/garage.md' AND idx = 1)")
    found = filled.inspect()
    assert found.damaged_sources == ["/docs/garage.md"]
    assert any("lost rows" in p and "1 questions" in p and "/docs/garage.md" in p
               for p in found.problems), found.problems


def test_generated_questions_keep_the_dropped_ones_with_why(store: Store,
                                                            embedder: Embedder) -> None:
    batch = _batch(embedder, "/docs/garage.md", DOCS["/docs/garage.md"])
    first, second = batch.chunks
    batch.dropped = [DroppedQuestion(text="What did it do?", atom_id=batch.atoms[0].id,
                                     chunk_id=first.id, reason="pronoun only: ..."),
                     DroppedQuestion(text="Where do visitors park their cars?",
                                     atom_id=batch.atoms[1].id, chunk_id=second.id,
                                     reason="near-duplicate of ...")]
    store.add(batch)
    store.add(_batch(embedder, "/docs/pool.md", DOCS["/docs/pool.md"]))
    shown = store.generated_questions(source="/docs/garage.md")
    assert [(q.chunk_index, q.text, q.kept, q.reason) for q in shown] == [
        (0, "What is said about parking?", True, ""),
        (0, "What did it do?", False, "pronoun only: ..."),
        (1, "What is said about park?", True, ""),
        (1, "Where do visitors park their cars?", False, "near-duplicate of ...")]
    assert shown[1].atom == DOCS["/docs/garage.md"][0] and shown[1].atom_id == batch.atoms[0].id
    assert store.generated_questions(chunk_id=second.id) == shown[2:]
    # never searched
    assert all(h.text != "What did it do?" for h in store.keyword_search("questions", "did do", 10))
    sample = store.generated_questions(sample=3, seed=7)
    assert len(sample) == 3 and sample == store.generated_questions(sample=3, seed=7)
    assert len(store.generated_questions(sample=50)) == 5  # 3 kept, 2 dropped

    # carried over when a chunk is reused, replaced with new questions by enrichment
    reused = store.stored_chunks("/docs/garage.md")[content_hash(first.text)]
    assert [d.text for d in reused.dropped] == ["What did it do?"]
    store.add_questions([ChunkQuestions(first.id, [], embedder.embed([]), dropped=[
        DroppedQuestion(text="Why?", atom_id=batch.atoms[0].id, chunk_id=first.id,
                        reason="off its atom")])])
    assert [(q.text, q.kept) for q in store.generated_questions(chunk_id=first.id)] == [
        ("Why?", False)]
    exported = store.export_source("/docs/garage.md")
    assert exported is not None and {d.text for d in exported.dropped} == {
        "Why?", "Where do visitors park their cars?"}
    store.delete_source("/docs/garage.md")
    assert store.generated_questions(chunk_id=second.id) == []
    assert [q.kept for q in store.generated_questions(sample=10)] == [True]


def test_export_source_gives_back_what_was_added_in_order(filled: Store,
                                                          embedder: Embedder) -> None:
    """Every engine exports a source as it was added: chunks by position, each atom and
    question in the order stored, with their vectors and hashes; a chunk's questions are
    found from its atoms."""
    added = _batch(embedder, "/docs/garage.md", DOCS["/docs/garage.md"], kind="md")
    exported = filled.export_source("/docs/garage.md")
    assert exported is not None and filled.export_source("/docs/none.md") is None
    assert [c.text for c in exported.chunks] == [c.text for c in added.chunks]
    assert [a.id for a in exported.atoms] == [a.id for a in added.atoms]
    assert [(q.text, q.atom_id, q.chunk_id) for q in exported.questions] == [
        (q.text, q.atom_id, q.chunk_id) for q in added.questions]
    assert exported.chunk_vectors.shape == added.chunk_vectors.shape
    assert np.allclose(exported.question_vectors, added.question_vectors, atol=2e-3)
    assert exported.chunk_hashes == [content_hash(t) for t in DOCS["/docs/garage.md"]]
    assert exported.pending == set()


def test_not_equal_keeps_what_has_no_such_value(filled: Store, embedder: Embedder) -> None:
    """``!=`` is the negation of ``=`` as a whole, in every engine: a source without the
    key is kept, one whose value equals it is not."""
    query = embedder.embed_one("What is in the gym?")
    kept = {filled.get_chunks([h.chunk_id])[h.chunk_id].source
            for h in filled.search("chunks", query, 10, parse({"kind": {"ne": "md"}}))}
    assert kept == {"/docs/gym.txt"}
    missing = {filled.get_chunks([h.chunk_id])[h.chunk_id].source
               for h in filled.search("chunks", query, 10, parse({"team": {"ne": "a"}}))}
    assert missing == set(DOCS)
