"""A source on its way through the pipeline, and how its parts become one batch for the
store: fresh chunks with their new vectors, reused chunks with what was stored for them,
the questions kept by selection."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from isotope.knowledge.facts import AtomFacts
from isotope.models import Atom, Chunk, DroppedQuestion, Question, Source, content_hash
from isotope.stores import SourceBatch, StoredChunk

Select = Callable[[list[Atom], np.ndarray, list[Question], np.ndarray],
                  tuple[list[Question], list[str]]]
"""Question selection: atoms, their vectors, candidate questions, theirs -> the candidates
and why each is dropped ("" when it is kept)."""


def split(candidates: list[Question], reasons: list[str], vectors: np.ndarray
          ) -> tuple[list[Question], np.ndarray, list[DroppedQuestion]]:
    """The kept questions with their vectors, and the dropped ones with their reasons."""
    kept = [q for q, why in zip(candidates, reasons, strict=True) if not why]
    dropped = [DroppedQuestion(text=q.text, atom_id=q.atom_id, chunk_id=q.chunk_id,
                               reason=why)
               for q, why in zip(candidates, reasons, strict=True) if why]
    if candidates:
        vectors = vectors[np.array([not why for why in reasons], dtype=bool)]
    return kept, vectors, dropped


@dataclass
class Work:
    """A source on its way through the pipeline: chunked and atomized, waiting for its
    questions, then stored."""

    source: Source
    chunks: list[Chunk]
    atoms: list[list[Atom]]
    replacing: bool
    done: int
    total: int
    reused: dict[int, StoredChunk] = field(default_factory=dict)
    """Chunks (by position) whose stored atoms, questions and vectors are kept."""
    questions: dict[int, list[list[str]]] = field(default_factory=dict)
    failed: int = 0
    failed_chunks: set[int] = field(default_factory=set)
    failed_contexts: int = 0
    replaces: str | None = None
    """The stored source this one takes the place of, when its name differs."""

    @property
    def fresh(self) -> list[int]:
        """Positions of the chunks that are not reused."""
        return [i for i in range(len(self.chunks)) if i not in self.reused]

    def mark_incomplete(self) -> None:
        """Record on the source what failed, so that the next ingest asks again for it (the
        cache answers for what succeeded)."""
        if not (self.failed or self.failed_contexts):
            return
        metadata = self.source.metadata
        if self.failed:
            metadata["incomplete_atoms"] = self.failed
        if self.failed_contexts:
            metadata["incomplete_contexts"] = self.failed_contexts
        metadata["incomplete_chunks"] = sorted(
            content_hash(self.chunks[i].text) for i in self.failed_chunks)
        self.source.status = "incomplete"

    def fresh_atoms(self) -> list[Atom]:
        return [a for i in self.fresh for a in self.atoms[i]]

    def candidates(self) -> list[Question]:
        """The generated questions of the fresh chunks, before selection."""
        return [
            Question(text=q, atom_id=atom.id, chunk_id=atom.chunk_id)
            for i in self.fresh
            for atom, questions in zip(self.atoms[i], self.questions[i], strict=True)
            for q in questions
        ]


@dataclass
class Assembled:
    batch: SourceBatch
    dropped: int
    """Generated questions that selection left out."""


def assemble(work: Work, vectors: np.ndarray, select: Select) -> Assembled:
    """One batch from a source's work and the vectors of its fresh texts, in the order
    ``[fresh chunks, fresh atoms, candidate questions]``. Reused chunks go back in their
    places, their atoms and questions re-keyed to the chunk's new id."""
    chunks, fresh = work.chunks, work.fresh
    atoms = work.fresh_atoms()
    candidates = work.candidates()
    chunk_vectors = vectors[: len(fresh)]
    atom_vectors = vectors[len(fresh) : len(fresh) + len(atoms)]
    question_vectors = vectors[len(fresh) + len(atoms) :]
    candidates, reasons = select(atoms, atom_vectors, candidates, question_vectors)
    questions, question_vectors, dropped = split(candidates, reasons, question_vectors)
    chunk_rows = dict(zip(fresh, chunk_vectors, strict=True))
    atom_parts, question_parts = [atom_vectors], [question_vectors]
    facts: list[AtomFacts] = []
    for i, stored in work.reused.items():
        chunk_rows[i] = stored.vector[0]
        new_atoms = work.atoms[i]
        renamed = {old.id: new for old, new in zip(stored.atoms, new_atoms, strict=True)}
        atoms += new_atoms
        questions += [Question(text=q.text, atom_id=renamed[q.atom_id].id,
                               chunk_id=chunks[i].id, origin=q.origin)
                      for q in stored.questions]
        dropped += [q.model_copy(update={"atom_id": renamed[q.atom_id].id,
                                         "chunk_id": chunks[i].id})
                    for q in stored.dropped if q.atom_id in renamed]
        facts += [replace(f, atom_id=renamed[f.atom_id].id, chunk_id=chunks[i].id)
                  for f in stored.facts if f.atom_id in renamed]
        atom_parts.append(stored.atom_vectors)
        question_parts.append(stored.question_vectors)
    batch = SourceBatch(
        source=work.source, chunks=chunks, atoms=atoms, questions=questions,
        chunk_vectors=np.stack([chunk_rows[i] for i in range(len(chunks))])
        if chunks else vectors[:0],
        atom_vectors=_stack(atom_parts, vectors),
        question_vectors=_stack(question_parts, vectors),
        replaces=work.replaces,
        dropped=dropped,
        facts=facts,
    )
    return Assembled(batch, sum(1 for why in reasons if why))


def _stack(parts: list[np.ndarray], like: np.ndarray) -> np.ndarray:
    """Row blocks stacked into one matrix (empty blocks of any shape are left out)."""
    parts = [p for p in parts if len(p)]
    return np.concatenate(parts) if parts else like[:0]
