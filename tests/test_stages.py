"""The pure stage functions the pipeline sequences, tested on their own with the real
embedder: question selection and file discovery."""

from __future__ import annotations

from pathlib import Path

from isotope.discovery import discover
from isotope.embedders import Embedder
from isotope.models import Atom, Chunk, Question
from isotope.selection import select_questions


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
    kept, keep = select_questions(
        atoms, embedder.embed([a.text for a in atoms]), questions,
        embedder.embed(asked), min_similarity=0.3, dedup_threshold=0.85)
    assert keep == [True, False, True, False]
    assert kept[2].atom_id == atoms[1].id and kept[0].atom_id == atoms[0].id
    _, everything = select_questions(
        atoms, embedder.embed([a.text for a in atoms]), questions, embedder.embed(asked),
        min_similarity=-1, dedup_threshold=None)
    assert everything == [True, True, True, True]


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
