"""The pure stage functions the pipeline sequences, tested on their own with the real
embedder: question selection, file discovery, generation windows, change detection and
reuse."""

from __future__ import annotations

from pathlib import Path

from isotope.embedders import Embedder
from isotope.ingest.discovery import discover
from isotope.ingest.selection import select_questions
from isotope.models import Atom, Chunk, Question


def test_select_questions_reattributes_filters_and_dedups(embedder: Embedder) -> None:
    chunk = Chunk(text="x", source="s")
    atoms = [Atom(text="The parking garage opens at six in the morning.", chunk_id=chunk.id,
                  index=0),
             Atom(text="The swimming pool is heated to twenty-eight degrees.",
                  chunk_id=chunk.id, index=1)]
    asked = ["When does the parking garage open?",
             "When does the parking garage open in the morning?",  # a near duplicate
             "How warm is the swimming pool?",  # written for atom 0, about atom 1
             "What is the capital of Mongolia?"]  # off topic
    questions = [Question(text=t, atom_id=atoms[0].id, chunk_id=chunk.id) for t in asked]
    kept, reasons = select_questions(
        atoms, embedder.embed([a.text for a in atoms]), questions,
        embedder.embed(asked), min_similarity=0.3, dedup_threshold=0.85)
    assert [not r for r in reasons] == [True, False, True, False]
    assert reasons[1].startswith("near-duplicate of 'When does the parking garage open?'")
    assert reasons[3].startswith("off its atom")
    assert kept[2].atom_id == atoms[1].id and kept[0].atom_id == atoms[0].id
    _, everything = select_questions(
        atoms, embedder.embed([a.text for a in atoms]), questions, embedder.embed(asked),
        min_similarity=-1, dedup_threshold=None)
    assert everything == ["", "", "", ""]


def test_discover_walks_filters_and_reports(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "a.md").write_text("A")
    (docs / "sub" / "b.txt").write_text("B")
    (docs / ".hidden.md").write_text("H")
    (docs / "c.xyz").write_text("C")
    files, skipped, missing = discover([docs, tmp_path / "nope"], [], [".*"])
    assert sorted(p.name for p in files) == ["a.md", "b.txt"]
    assert all(root == docs for root in files.values())
    assert [Path(s.path).name for s in skipped] == ["c.xyz"]
    assert [Path(m.path).name for m in missing] == ["nope"]
    only, _, _ = discover([docs], ["sub/*"], [])
    assert [p.name for p in only] == ["b.txt"]


def test_windows_hold_about_a_window_of_atoms_and_never_split_an_item() -> None:
    from isotope.ingest.windows import windows

    assert windows([3, 3, 3, 3], 6) == [(0, 2), (2, 4)]
    assert windows([10, 1, 1], 4) == [(0, 1), (1, 3)]  # a large item goes alone
    assert windows([0, 0], 4) == [(0, 2)]
    assert windows([], 4) == []


def test_is_current_needs_same_content_pipeline_and_completeness() -> None:
    from isotope.ingest.changes import is_current
    from isotope.models import Source

    def source(**metadata: object) -> Source:
        return Source(uri="a.md", content_hash="h", metadata={"pipeline": "p", **metadata})

    def current(existing: Source | None, digest: str = "h", **kw: object) -> bool:
        options = {"force": False, "strategy": "source_aware", **kw}
        return is_current(existing, digest, "p", **options)  # type: ignore[arg-type]

    assert current(source())
    assert not current(None)
    assert not current(source(), "other")
    assert not current(source(pipeline="older"))
    assert not current(source(incomplete_atoms=2))
    assert not current(source(incomplete_contexts=1))
    assert not current(source(), force=True)
    assert not current(source(), strategy="full")


def test_reusable_keeps_stored_chunks_by_text_except_incomplete_ones() -> None:
    import numpy as np

    from isotope.ingest.changes import reusable
    from isotope.models import content_hash
    from isotope.stores import StoredChunk

    old = [Chunk(text=t, source="s", index=i) for i, t in enumerate(["one", "two", "three"])]

    def stored(chunk: Chunk, atoms: int = 1) -> StoredChunk:
        made = [Atom(text=chunk.text, chunk_id=chunk.id, index=0)][:atoms]
        return StoredChunk(vector=np.zeros((1, 4)), atoms=made,
                           atom_vectors=np.zeros((atoms, 4)), questions=[],
                           question_vectors=np.zeros((0, 4)))

    held = {content_hash(c.text): stored(c) for c in old[:2]}
    held[content_hash("three")] = stored(old[2], atoms=0)  # nothing to reuse
    new = [Chunk(text=t, source="s", index=i) for i, t in enumerate(["zero", "two", "one",
                                                                     "three"])]
    assert sorted(reusable(new, held)) == [1, 2]
    assert sorted(reusable(new, held, [content_hash("one")])) == [1]


def test_texts_of_any_lengths_embed_as_they_do_alone(embedder: Embedder) -> None:
    """A chunk and its sentences are embedded in batches of similar lengths (less
    padding); each text still gets its own vector, in the order given."""
    import numpy as np

    sentences = [f"Room {i} of the library has {i + 2} desks." for i in range(40)]
    chunk = " ".join(sentences)
    texts = [sentences[3], chunk, *sentences[:10], "Desks?", sentences[-1]]
    together = embedder.embed(texts)
    alone = np.vstack([embedder.embed([t]) for t in texts])
    assert together.shape == (len(texts), 384)
    assert np.allclose(together, alone, atol=1e-4)
    assert float(together[0] @ together[5]) > 0.999  # the same sentence twice
