"""Which generated questions are kept, and why the others are not: a pure function of
the atoms, the questions and their vectors. Each question goes to the atom of its chunk
it is closest to, is kept if it is close enough to that atom (relevance), and is dropped
if the chunk already has the same or a near-identical question asking for the same kind
of answer (diversity; :func:`isotope.ingest.questions.answer_kind`)."""

from __future__ import annotations

import numpy as np

from isotope.ingest.questions import (
    answer_kind,
    duplicates,
    normalize_question,
    relevance_reasons,
)
from isotope.models import Atom, Question

REATTRIBUTE_MARGIN = 0.05
"""A question moves to another atom of its chunk when it is this much closer to it."""


def select_questions(
    atoms: list[Atom], atom_vectors: np.ndarray, questions: list[Question],
    question_vectors: np.ndarray, *, min_similarity: float, dedup_threshold: float | None,
) -> tuple[list[Question], list[str]]:
    """Attribute each question to the atom of its chunk that it is closest to (a model
    given the whole chunk sometimes asks about a neighbouring statement), apply the
    relevance filter against that atom, then the diversity filter per chunk (questions
    of different answer kinds, "when" and "what", never duplicates). Returns the
    attributed questions and, for each, why it was dropped ("" when it is kept)."""
    atoms_of_chunk: dict[str, list[int]] = {}
    for i, atom in enumerate(atoms):
        atoms_of_chunk.setdefault(atom.chunk_id, []).append(i)
    position = {a.id: i for i, a in enumerate(atoms)}
    attributed: list[Question] = []
    by_atom: dict[int, list[int]] = {}
    for i, question in enumerate(questions):
        candidates = atoms_of_chunk[question.chunk_id]
        similarity = atom_vectors[candidates] @ question_vectors[i]
        best = candidates[int(np.argmax(similarity))]
        own = position[question.atom_id]
        if best != own and float(np.max(similarity)) > float(
            atom_vectors[own] @ question_vectors[i]
        ) + REATTRIBUTE_MARGIN:
            question = Question(text=question.text, atom_id=atoms[best].id,
                                chunk_id=question.chunk_id)
            own = best
        attributed.append(question)
        by_atom.setdefault(own, []).append(i)
    reasons = [""] * len(questions)
    for atom_index, idx in by_atom.items():
        found = relevance_reasons(
            [questions[i].text for i in idx], question_vectors[idx],
            atom_vectors[atom_index],
            min_similarity=min_similarity,
        )
        for i, why in zip(idx, found, strict=True):
            reasons[i] = why
    seen: set[tuple[str, str]] = set()
    by_chunk: dict[str, list[int]] = {}
    for i, q in enumerate(questions):
        key = (q.chunk_id, normalize_question(q.text))
        if not reasons[i] and key in seen:
            reasons[i] = "repeated: the chunk has the same question for another atom"
        elif not reasons[i]:
            seen.add(key)
            by_chunk.setdefault(q.chunk_id, []).append(i)
    for idx in by_chunk.values():
        kinds = [answer_kind(questions[i].text) for i in idx]
        for i, near in zip(idx, duplicates(question_vectors[idx], dedup_threshold, kinds),
                           strict=True):
            if near is not None:
                other, similarity = near
                reasons[i] = (f"near-duplicate of {questions[idx[other]].text!r}: similarity "
                              f"{similarity:.2f} > dedup_threshold {dedup_threshold:.2f}")
    return attributed, reasons
