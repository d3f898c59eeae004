"""What both SQL engines do with questions people keep, written once: questions added by
hand or learned from use (origin ``manual`` or ``user``), disabled and enabled by hand,
confirmed, and carried to the new chunks when their source is replaced (the same
transaction: a kill midway leaves the old chunk with its questions); those no new chunk
covers are kept in ``orphaned_questions``. Questions disabled by hand are kept among the
chunk's dropped questions, with the reason ``disabled by hand (ORIGIN)``.

A chunk's keyword text holds its questions' text (``chunks.questions_text``, one question
a line: document expansion, as doc2query does), so a query in a user's words finds the
chunk whose questions use them; whatever adds or removes a chunk's questions writes it
again in the same transaction (:meth:`SQLQuestions._expand`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from isotope.embedders import Vectors
from isotope.models import Chunk, DroppedQuestion, Origin, Question, content_hash
from isotope.stores import Kind, SourceBatch
from isotope.stores.parts import KeptQuestions

if TYPE_CHECKING:
    from isotope.stores.sql_dialect import Dialect

_T = TypeVar("_T")


def of_chunk(mark: str) -> str:
    """The condition on ``questions`` of one chunk's rows, found through its atoms (indexed
    in both engines; SQLite has no index on ``questions.chunk_id``, and would read every
    question): two parameters, the chunk's id twice."""
    return f"atom_id IN (SELECT id FROM atoms WHERE chunk_id = {mark}) AND chunk_id = {mark}"


@dataclass
class KeptQuestion:
    """A manual or user question read before its source is replaced."""

    text: str
    origin: Origin
    chunk_hash: str
    chunk_text: str
    source: str
    vector: Vectors | None
    disabled: bool = False


DISABLED = "disabled by hand"
"""The reason a question disabled by hand is kept under, among the dropped ones (with its
origin in brackets)."""
def disabled_origin(reason: str) -> Origin:
    """The origin a question disabled by hand had (its reason says it in brackets)."""
    origin = reason[len(DISABLED) + 2 : -1] if reason.startswith(DISABLED + " (") else ""
    return "manual" if origin == "manual" else "user" if origin == "user" else "generated"


def keyword_text(text: str, context: str, questions: str) -> str:
    """What a chunk is keyword-searched by: its text, its context and its questions' text
    (the embedded store's FTS5 columns, as one text for the engines that take one)."""
    return f"{text}\n{context}\n{questions}"


COVERS = 0.5
"""A new chunk covers an old one when it holds at least this share of the old one's
words."""


def covering(text: str, chunks: Sequence[Chunk]) -> Chunk | None:
    """The chunk that holds most of ``text``'s words (at least :data:`COVERS`)."""
    words = set(text.casefold().split())
    if not words:
        return None
    best, share = None, 0.0
    for chunk in chunks:
        held = len(words & set(chunk.text.casefold().split())) / len(words)
        if held > share:
            best, share = chunk, held
    return best if share >= COVERS else None


class SQLQuestions(KeptQuestions):
    """Questions kept by hand or use, of an SQL store (a part of ``SQLStore``)."""

    dialect: Dialect

    # (the SQL store's own, see isotope.stores.sql_core)
    _rows: Callable[..., list[tuple[Any, ...]]]
    _write: Callable[..., AbstractContextManager[Any]]
    _retried: Callable[[Callable[[], Any]], Any]
    _after_write: Callable[[], None]
    _ensure_dim: Callable[[int], None]
    _vectors_of: Callable[[Kind, list[int]], dict[int, Vectors]]
    _add_questions: Callable[..., int]
    _add_dropped: Callable[..., None]

    def _set_questions_text(self, conn: Any,
                            changed: list[tuple[int, str, str | None, bool | None]], *,
                            logged: bool) -> None:
        """Write chunks' ``(row, questions' text, keyword text, enriched)``: where the
        keyword text is given the text changed, into the row and the engine's keyword
        index; where ``enriched`` is not None, the chunk's waiting flag with it (one
        write of the row). ``logged``: the chunks were written in this transaction (the
        engine knows they changed)."""
        raise NotImplementedError

    def _keyword_drift(self) -> list[str]:
        """A problem for ``check`` if some chunks' keyword text holds other questions than
        they have (repair writes them again)."""
        d = self.dialect
        drifted = self._rows("SELECT count(*) FROM chunks c WHERE c.questions_text <> "
                             + d.chunk_questions.format(c="c"))[0][0]
        return [f"the keyword text of {drifted} chunks differs from their questions; run "
                "check --repair"] if drifted else []

    def _expand_all(self, conn: Any) -> None:
        """:meth:`_expand` every chunk (a repair: its questions' text written again where
        it differs from its questions)."""
        ids = [r[0] for r in conn.execute("SELECT id FROM chunks").fetchall()]
        for start in range(0, len(ids), 5000):
            self._expand(conn, ids[start:start + 5000])

    def _expand(self, conn: Any, chunk_ids: Sequence[str], *, logged: bool = False,
                enriched: Mapping[str, bool] | None = None) -> None:
        """Write each chunk's questions, as they are now in ``conn``'s transaction, into
        its keyword text where they changed (and ``enriched``: chunks' waiting flags)."""
        if not chunk_ids:
            return
        d = self.dialect
        changed: list[tuple[int, str, str | None, bool | None]] = []
        for row, chunk_id, text, context, had, now in conn.execute(
                f"SELECT c.{d.row}, c.id, c.text, c.context, c.questions_text, "
                f"{d.chunk_questions.format(c='c')} FROM chunks c WHERE "
                f"{d.any_of('c.id')}", (d.many(list(dict.fromkeys(chunk_ids))),)).fetchall():
            flag = (enriched or {}).get(chunk_id)
            if now != had or flag is not None:
                changed.append((int(row), now, keyword_text(text, context, now)
                                if now != had else None, flag))
        if changed:
            self._set_questions_text(conn, changed, logged=logged)

    def _in_source(self, uri: str, change: Callable[[Any], _T]) -> _T:
        """``change(conn)`` in one write transaction of the source ``uri``."""
        def write() -> _T:
            with self._write(uri) as conn:
                return change(conn)

        done: _T = self._retried(write)
        return done

    def _held(self, conn: Any, chunk_id: str) -> tuple[set[str], set[str]]:
        """The ids of a chunk's manual and user questions, and the texts of its questions
        disabled by hand."""
        d = self.dialect
        held = {r[0] for r in conn.execute(
            f"SELECT id FROM questions WHERE {of_chunk(d.mark)} AND origin <> 'generated'",
            (chunk_id, chunk_id)).fetchall()}
        disabled = {r[0] for r in conn.execute(
            f"SELECT text FROM dropped_questions WHERE chunk_id = {d.mark} AND reason LIKE "
            f"{d.mark}", (chunk_id, DISABLED + " (%")).fetchall()}
        return held, disabled

    def _kept_questions(self, conn: Any, uris: Sequence[str]) -> list[KeptQuestion]:
        """The manual and user questions of the sources ``uris``, with their vectors and
        their chunks' texts (read before a source is replaced)."""
        d = self.dialect
        rows = conn.execute(
            f"SELECT q.{d.row}, q.text, q.origin, c.hash, c.text, c.source FROM questions q "
            f"JOIN chunks c ON c.id = q.chunk_id WHERE {d.any_of('c.source')} AND "
            f"q.origin <> 'generated'", (d.many(list(uris)),)).fetchall()
        vectors = self._vectors_of("questions", [int(r[0]) for r in rows]) if rows else {}
        kept = [KeptQuestion(r[1], r[2], r[3] or content_hash(r[4]), r[4], r[5],
                             vectors.get(int(r[0]))) for r in rows]
        # and those disabled by hand (kept disabled, whatever their origin)
        for text, reason, digest, chunk_text, uri in conn.execute(
                f"SELECT x.text, x.reason, c.hash, c.text, c.source FROM dropped_questions x "
                f"JOIN chunks c ON c.id = x.chunk_id WHERE {d.any_of('c.source')} AND "
                f"x.reason LIKE {d.mark}", (d.many(list(uris)), DISABLED + " (%")).fetchall():
            kept.append(KeptQuestion(text, disabled_origin(reason), digest or
                                     content_hash(chunk_text), chunk_text, uri, None,
                                     disabled=True))
        return kept

    def _carry(self, conn: Any, kept: list[KeptQuestion], batch: SourceBatch,
               hashes: Sequence[str], row_of: dict[str, int]) -> None:
        """Give the new chunks of ``batch`` the ``kept`` questions of the chunks they
        replace: each to the chunk with the same text, else to the one that covers most
        of its old chunk's words, on that chunk's atom nearest to it; one no chunk covers
        is kept in ``orphaned_questions`` (``isotope questions orphaned``). Questions the
        batch already has (a reused chunk's) are not added twice."""
        d = self.dialect
        chunk_of_hash = {h: c for c, h in zip(batch.chunks, hashes, strict=True)}
        has = {(q.chunk_id, q.text) for q in batch.questions}
        atoms_of: dict[str, list[int]] = {}
        for i, atom in enumerate(batch.atoms):
            atoms_of.setdefault(atom.chunk_id, []).append(i)
        atom_vectors = np.asarray(batch.atom_vectors, dtype=np.float32)
        carried: list[Question] = []
        vectors: list[Vectors] = []
        orphans: list[KeptQuestion] = []
        disabled: list[tuple[str, DroppedQuestion]] = []
        dropped = {(x.chunk_id, x.text) for x in batch.dropped}
        for question in kept:
            chunk = chunk_of_hash.get(question.chunk_hash) or covering(
                question.chunk_text, batch.chunks)
            if question.disabled:  # stays disabled on the chunk that covers its text
                if chunk is not None and atoms_of.get(chunk.id):
                    if (chunk.id, question.text) not in dropped:
                        disabled.append((chunk.id, DroppedQuestion(
                            text=question.text, atom_id=batch.atoms[atoms_of[chunk.id][0]].id,
                            chunk_id=chunk.id, reason=f"{DISABLED} ({question.origin})")))
                        dropped.add((chunk.id, question.text))
                elif question.origin != "generated":
                    orphans.append(question)
                continue
            if chunk is None or not atoms_of.get(chunk.id) or question.vector is None:
                orphans.append(question)
                continue
            if (chunk.id, question.text) in has:  # the model made it again: it stays theirs
                conn.execute(f"UPDATE questions SET origin = {d.mark} WHERE "
                             f"{of_chunk(d.mark)} AND text = {d.mark} AND origin = "
                             "'generated'", (question.origin, chunk.id, chunk.id,
                                             question.text))
                continue
            own = atoms_of[chunk.id]
            nearest = own[int(np.argmax(atom_vectors[own] @ np.asarray(question.vector)))]
            carried.append(Question(text=question.text, atom_id=batch.atoms[nearest].id,
                                    chunk_id=chunk.id, origin=question.origin))
            vectors.append(question.vector)
            has.add((chunk.id, question.text))
        if carried:
            added = self._add_questions(conn, carried, np.stack(vectors).astype(np.float32),
                                        [row_of.get(q.chunk_id) for q in carried])
            conn.execute(d.add_questions_count, (added, batch.source.uri))
        for chunk_id, off in disabled:  # (made again by the model: taken out again)
            gone = conn.execute(f"DELETE FROM questions WHERE {of_chunk(d.mark)} AND text = "
                                f"{d.mark}", (chunk_id, chunk_id, off.text)).rowcount
            if gone:
                conn.execute(d.add_questions_count, (-gone, batch.source.uri))
            self._add_dropped(conn, [off])
        if orphans:
            at = datetime.now(UTC).isoformat()
            conn.cursor().executemany(
                "INSERT INTO orphaned_questions(source, chunk_text, text, origin, at) "
                f"VALUES ({', '.join([d.mark] * 5)})",
                [(q.source, d.text(q.chunk_text), d.text(q.text), q.origin, at)
                 for q in orphans])

    def orphaned_questions(self) -> list[dict[str, Any]]:
        return [{"source": r[0], "chunk_text": r[1], "text": r[2], "origin": r[3], "at": r[4]}
                for r in self._rows("SELECT source, chunk_text, text, origin, at FROM "
                                    f"orphaned_questions ORDER BY {self.dialect.row}")]

    def add_kept_questions(self, chunk_id: str, questions: Sequence[Question],
                           vectors: Vectors) -> int:
        """Add manual or user ``questions`` (their ``origin``) to the stored chunk
        ``chunk_id``, beside the ones it has, searchable at once; returns how many were
        added (0: the chunk is gone)."""
        if not questions:
            return 0
        self._ensure_dim(int(np.asarray(vectors).shape[1]))
        d = self.dialect

        owner = self._rows(f"SELECT source FROM chunks WHERE id = {d.mark}", (chunk_id,))
        if not owner:
            return 0

        def change(conn: Any) -> int:
            found = conn.execute(f"SELECT {d.row}, source FROM chunks WHERE id = {d.mark}",
                                 (chunk_id,)).fetchone()
            if found is None:  # deleted meanwhile
                return 0
            for q in questions:  # (one disabled by hand, written again, is not)
                conn.execute(f"DELETE FROM dropped_questions WHERE chunk_id = {d.mark} AND "
                             f"text = {d.mark} AND reason LIKE {d.mark}",
                             (chunk_id, q.text, DISABLED + " (%"))
            added: int = self._add_questions(
                conn, [q.model_copy(update={"chunk_id": chunk_id}) for q in questions],
                vectors, [found[0]] * len(questions))
            conn.execute(d.add_questions_count, (added, found[1]))
            self._expand(conn, [chunk_id])
            return added

        added = self._in_source(owner[0][0], change)
        self._after_write()
        return added

    def question(self, question_id: str) -> tuple[Question, str] | None:
        rows = self._rows("SELECT q.id, q.atom_id, q.chunk_id, q.text, q.origin, c.source FROM "
                          "questions q JOIN chunks c ON c.id = q.chunk_id WHERE q.id = "
                          f"{self.dialect.mark}", (question_id,))
        if not rows:
            return None
        r = rows[0]
        return Question(id=r[0], atom_id=r[1], chunk_id=r[2], text=r[3], origin=r[4]), r[5]

    def disable_question(self, question_id: str) -> bool:
        d = self.dialect
        found = self.question(question_id)
        if found is None:
            return False
        question, uri = found

        def change(conn: Any) -> bool:
            gone = conn.execute(f"DELETE FROM questions WHERE id = {d.mark}",
                                (question_id,)).rowcount
            if gone:
                self._add_dropped(conn, [DroppedQuestion(
                    text=question.text, atom_id=question.atom_id, chunk_id=question.chunk_id,
                    reason=f"{DISABLED} ({question.origin})")])
                conn.execute(d.add_questions_count, (-gone, uri))
                self._expand(conn, [question.chunk_id])
            return bool(gone)

        done = self._in_source(uri, change)
        self._after_write()
        return done

    def disabled_question(self, question_id: str) -> tuple[Question, str] | None:
        d = self.dialect
        for chunk_id, atom_id, text, reason, uri in self._rows(
                "SELECT x.chunk_id, x.atom_id, x.text, x.reason, c.source FROM "
                "dropped_questions x JOIN chunks c ON c.id = x.chunk_id WHERE x.reason LIKE "
                f"{d.mark}", (DISABLED + " (%",)):
            question = Question(text=text, atom_id=atom_id, chunk_id=chunk_id,
                                origin=disabled_origin(reason))
            if question.id == question_id:
                return question, uri
        return None

    def _undisable(self, conn: Any, question: Question) -> int:
        """Remove a question's row among those disabled by hand; how many went."""
        d = self.dialect
        gone: int = conn.execute(
            f"DELETE FROM dropped_questions WHERE chunk_id = {d.mark} AND atom_id = {d.mark} "
            f"AND text = {d.mark} AND reason LIKE {d.mark}",
            (question.chunk_id, question.atom_id, question.text, DISABLED + " (%")).rowcount
        return gone

    def confirm_question(self, question_id: str) -> bool:
        found = self.question(question_id)
        if found is None or found[0].origin != "generated":
            return False
        return self._in_source(found[1], lambda conn: bool(conn.execute(
            f"UPDATE questions SET origin = 'user' WHERE id = {self.dialect.mark} AND "
            "origin = 'generated'", (question_id,)).rowcount))

    def forget_disabled(self, question_id: str) -> bool:
        found = self.disabled_question(question_id)
        if found is None:
            return False
        return self._in_source(found[1], lambda conn: bool(self._undisable(conn, found[0])))

    def enable_question(self, question_id: str, vector: Vectors) -> bool:
        d = self.dialect
        found = self.disabled_question(question_id)
        if found is None:
            return False
        question, uri = found

        def change(conn: Any) -> bool:
            row = conn.execute(f"SELECT {d.row} FROM chunks WHERE id = {d.mark}",
                               (question.chunk_id,)).fetchone()
            if row is None:
                return False
            self._undisable(conn, question)
            if conn.execute(f"SELECT 1 FROM questions WHERE id = {d.mark}",
                            (question.id,)).fetchone():
                return True  # (searched already: added again by hand meanwhile)
            added = self._add_questions(conn, [question], vector, [row[0]])
            conn.execute(d.add_questions_count, (added, uri))
            self._expand(conn, [question.chunk_id])
            return True

        done = self._in_source(uri, change)
        self._after_write()
        return done
