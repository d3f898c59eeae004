"""What both SQL engines do the same way, written once: adding a source with its chunks,
atoms and questions, adding a chunk's generated questions, deleting a source; reading
them and their vectors back, counting, the enrichment queue, exporting a source and the
questions generated for it.

An engine gives a :class:`~isotope.stores.sql_dialect.Dialect` (how its SQL spells a
parameter, a row number, a list parameter, a waiting chunk, binary order, a JSON value
and text it can hold) and its hooks: ``_rows`` (run a read and map its errors),
``_write`` (one write transaction and its locks), ``_add_rows`` (insert rows of a kind
with their vectors and keywords), ``_vectors_of`` (where a kind's vectors live) and
``snapshot`` (one read transaction). What truly differs stays in the engine:
connections and locking, schema steps, vector storage and indexes, and where BM25 comes
from. A third SQL engine needs a dialect and
those parts.

Why one module of this size (about 620 lines): it is the relational store itself, the
writes and the reads that must agree on the same rows (row numbers, the waiting flag,
stored counts, the chunk a question belongs to), against one dialect; split, each half
would import the other's helpers. What is not the rows themselves has its own module:
the query log and feedback (:mod:`isotope.stores.sql_usage`) and the questions people
keep, by hand or by use (:mod:`isotope.stores.sql_questions`)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TypeVar

import numpy as np

from isotope.ann import Ids
from isotope.embedders import Embedder, Vectors
from isotope.errors import IndexDamaged
from isotope.models import (
    ACCESS_BY_HAND,
    Atom,
    Chunk,
    Condition,
    DroppedQuestion,
    GeneratedQuestion,
    Question,
    Source,
    content_hash,
)
from isotope.stores import (
    ChunkQuestions,
    Hit,
    Kind,
    PendingChunk,
    QuestionPairs,
    SourceBatch,
    SourceInfo,
    Store,
    StoredChunk,
    as_generated,
    draw_questions,
    dropped_by_chunk,
)
from isotope.stores.sql_dialect import Dialect
from isotope.stores.sql_graph import SQLGraph
from isotope.stores.sql_questions import DISABLED, SQLQuestions, keyword_text, of_chunk
from isotope.stores.sql_usage import SQLUsage
from isotope.stores.vector_place import VectorPlace

_T = TypeVar("_T")


_SOURCE = ("uri, content_hash, size, mtime, loader, ingested_at, metadata, status, root, "
           "access")
_CHUNK = 'id, source, idx, start, "end", text, metadata, context'
_ATOM = 'id, chunk_id, idx, start, "end", text'


class SQLStore(SQLQuestions, SQLUsage, SQLGraph, Store):
    """A relational store's writes and reads, against :attr:`dialect` and its hooks."""

    dialect: Dialect
    conditions_sql: Callable[[Sequence[Condition]], tuple[str, list[Any]]]
    """The engine's SQL for filter conditions over chunks ``c`` joined to sources ``s``
    (:mod:`isotope.stores.sql_filters`)."""
    where: str
    """Where the index is, as messages name it (a folder, a URL without its password)."""
    _place: VectorPlace
    """Where the index's vectors live (:mod:`isotope.stores.vector_place`)."""
    _tuned: dict[str, Any]
    """The settings given to the place (given again to a place chosen later)."""

    def _use(self, place: VectorPlace) -> None:
        """Hold ``place`` from now on (the settings given so far given to it)."""
        self._place.close()
        self._place = place
        for setting, value in self._tuned.items():
            place.tune(setting, value)

    def fixed_settings(self) -> dict[str, Any]:
        return self._place.fixed(bool(self._rows("SELECT 1 FROM sources LIMIT 1")))

    @abstractmethod
    def _conn(self) -> Any:
        """The engine's connection of this thread."""

    def connection(self) -> Any:
        """The engine's own connection of this thread (``sqlite3.Connection``,
        ``psycopg.Connection``), for diagnostics and tests: what is written through it
        bypasses the store's locks, checks and vector files."""
        return self._conn()

    @abstractmethod
    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of a read, the engine's errors mapped to isotope's."""

    @abstractmethod
    def _vectors_of(self, kind: Kind, rows: list[int]) -> dict[int, Vectors]:
        """The stored vectors of ``kind``'s ``rows`` (row -> vector; a lost one absent)."""

    @abstractmethod
    def _write(self, *sources: str) -> AbstractContextManager[Any]:
        """One write transaction on a connection, holding what keeps other writers of
        ``sources`` out; its errors mapped to isotope's."""

    @abstractmethod
    def _add_rows(self, conn: Any, kind: Kind, columns: str, values: list[tuple[Any, ...]],
                  vectors: Vectors, chunk_rows: Sequence[int | None],
                  texts: Sequence[str]) -> list[int]:
        """Insert rows of ``kind`` (``columns``, the first one the id) with their
        ``vectors`` and the ``texts`` their keywords come from; their row numbers, in
        order. ``chunk_rows``: the row of each one's chunk (None for chunks)."""

    def _retried(self, write: Callable[[], _T]) -> _T:
        """``write`` (one transaction), made again where the engine may abort one to
        let another writer through."""
        return write()

    def _ensure_dim(self, dim: int) -> None:
        """Before vectors of ``dim`` dimensions are written (where the engine's columns
        or indexes need it)."""

    def _after_write(self) -> None:
        """After a write committed (the engine's background upkeep)."""

    # -- building blocks ---------------------------------------------------------------
    def _source(self, row: Sequence[Any]) -> Source:
        return Source(uri=row[0], content_hash=row[1], size=row[2], mtime=row[3],
                      loader=row[4], ingested_at=datetime.fromisoformat(row[5]),
                      metadata=self.dialect.json_value(row[6]), status=row[7], root=row[8],
                      access=None if row[9] is None else self.dialect.json_value(row[9]))

    def _chunk(self, row: Sequence[Any]) -> Chunk:
        return Chunk(id=row[0], source=row[1], index=row[2], start=row[3], end=row[4],
                     text=row[5], metadata=self.dialect.json_value(row[6]), context=row[7])

    def _of(self, table: str, columns: str, column: str, values: Sequence[Any],
            order: str) -> list[tuple[Any, ...]]:
        """``columns`` (after the row number) of ``table``'s rows whose ``column`` is one
        of ``values``."""
        if not values:
            return []
        d = self.dialect
        return self._rows(f"SELECT {d.row}, {columns} FROM {table} WHERE "
                          f"{d.any_of(column)} ORDER BY {order}", (d.many(values),))

    # -- writes ------------------------------------------------------------------------
    def add(self, batch: SourceBatch) -> None:
        self._retried(lambda: self._add(batch))
        self._after_write()

    def _add(self, batch: SourceBatch) -> None:
        if len(batch.chunk_vectors):
            self._ensure_dim(int(np.asarray(batch.chunk_vectors).shape[1]))
        d, source = self.dialect, batch.source
        touched = [source.uri, *([batch.replaces] if batch.replaces else [])]
        hashes = batch.chunk_hashes or [content_hash(c.text) for c in batch.chunks]
        with self._write(*touched) as conn:
            kept = self._kept_questions(conn, touched)
            conn.execute(f"DELETE FROM sources WHERE {d.any_of('uri')}", (d.many(touched),))
            conn.execute(
                f"INSERT INTO sources({_SOURCE}, counts) VALUES ({', '.join([d.mark] * 11)})",
                (source.uri, source.content_hash, source.size, source.mtime, source.loader,
                 (source.ingested_at or datetime.now(UTC)).isoformat(),
                 d.json_param(source.metadata), source.status, source.root,
                 None if source.access is None else d.json_param(source.access),
                 d.json_param([len(batch.chunks), len(batch.atoms), len(batch.questions)])))
            asked: dict[str, list[str]] = {}
            for q in batch.questions:
                asked.setdefault(q.chunk_id, []).append(q.text)
            expansion = [d.text("\n".join(asked.get(c.id, ()))) for c in batch.chunks]
            chunk_rows = self._add_rows(
                conn, "chunks", f"{_CHUNK}, hash, enriched, questions_text", [
                    (c.id, source.uri, c.index, c.start, c.end, d.text(c.text),
                     d.json_param(c.metadata), d.text(c.context), h,
                     c.id not in batch.pending, e)
                    for c, h, e in zip(batch.chunks, hashes, expansion, strict=True)],
                batch.chunk_vectors, [None] * len(batch.chunks),
                # a chunk is found by its text, its context and its questions
                [keyword_text(c.text, c.context, e)
                 for c, e in zip(batch.chunks, expansion, strict=True)])
            row_of = dict(zip((c.id for c in batch.chunks), chunk_rows, strict=True))
            self._add_rows(conn, "atoms", _ATOM, [
                (a.id, a.chunk_id, a.index, a.start, a.end, d.text(a.text))
                for a in batch.atoms], batch.atom_vectors,
                [row_of.get(a.chunk_id) for a in batch.atoms], [a.text for a in batch.atoms])
            self._add_questions(conn, batch.questions, batch.question_vectors,
                                [row_of.get(q.chunk_id) for q in batch.questions])
            self._add_dropped(conn, batch.dropped)
            self._add_facts(conn, batch.facts)
            if kept:
                self._carry(conn, kept, batch, hashes, row_of)
                self._expand(conn, [c.id for c in batch.chunks], logged=True)

    def _add_questions(self, conn: Any, questions: Sequence[Question], vectors: Vectors,
                       chunk_rows: Sequence[int | None]) -> int:
        return len(self._add_rows(conn, "questions", "id, atom_id, chunk_id, text, origin", [
            (q.id, q.atom_id, q.chunk_id, self.dialect.text(q.text), q.origin)
            for q in questions],
            vectors, chunk_rows, [q.text for q in questions]))

    def _add_dropped(self, conn: Any, dropped: Sequence[DroppedQuestion]) -> None:
        if dropped:
            d = self.dialect
            conn.cursor().executemany(
                "INSERT INTO dropped_questions(chunk_id, atom_id, text, reason) VALUES "
                f"({', '.join([d.mark] * 4)})",
                [(x.chunk_id, x.atom_id, d.text(x.text), d.text(x.reason)) for x in dropped])

    def add_questions(self, done: Sequence[ChunkQuestions]) -> None:
        if not done:
            return
        self._retried(lambda: self._add_generated(done))
        self._after_write()

    def _add_generated(self, done: Sequence[ChunkQuestions]) -> None:
        for dim in {int(np.asarray(x.vectors).shape[1]) for x in done if len(x.vectors)}:
            self._ensure_dim(dim)
        d = self.dialect
        owners = self._rows(f"SELECT source FROM chunks WHERE {d.any_of('id')}",
                            (d.many([x.chunk_id for x in done]),))
        with self._write(*{uri for (uri,) in owners}) as conn:
            complete: dict[str, bool] = {}
            for item in done:
                found = conn.execute(f"SELECT {d.row}, source FROM chunks WHERE id = {d.mark}",
                                     (item.chunk_id,)).fetchone()
                if found is None:  # replaced or deleted meanwhile
                    continue
                chunk_row, uri = found
                # (the generated ones: manual and user questions stay)
                had = conn.execute(
                    f"DELETE FROM questions WHERE {of_chunk(d.mark)} AND origin = "
                    "'generated'", (item.chunk_id, item.chunk_id)).rowcount
                # (not one a manual or user question of the chunk already is, nor one
                # disabled by hand: those stay as they are)
                held, disabled = self._held(conn, item.chunk_id)
                wanted = [i for i, q in enumerate(item.questions)
                          if q.id not in held and q.text not in disabled]
                fresh = [item.questions[i].model_copy(update={"chunk_id": item.chunk_id})
                         for i in wanted]
                added = self._add_questions(
                    conn, fresh, np.asarray(item.vectors)[wanted] if len(wanted) else
                    np.asarray(item.vectors)[:0], [chunk_row] * len(fresh))
                conn.execute(f"DELETE FROM dropped_questions WHERE chunk_id = {d.mark} AND "
                             f"reason NOT LIKE {d.mark}", (item.chunk_id, DISABLED + " (%"))
                self._add_dropped(conn, [x.model_copy(update={"chunk_id": item.chunk_id})
                                         for x in item.dropped])
                self._drop_facts(conn, item.chunk_id)
                self._add_facts(conn, [replace(f, chunk_id=item.chunk_id)
                                       for f in item.facts])
                conn.execute(d.add_questions_count, (added - had, uri))  # for `check`
                complete[item.chunk_id] = item.complete
            # (its keyword text and its waiting flag, in one write of the row)
            self._expand(conn, list(complete), enriched=complete)

    def delete_source(self, uri: str) -> bool:
        def delete() -> bool:
            with self._write(uri) as conn:
                return bool(conn.execute(f"DELETE FROM sources WHERE uri = {self.dialect.mark}",
                                         (uri,)).rowcount > 0)

        deleted = self._retried(delete)
        self._after_write()
        return deleted

    # -- checks ------------------------------------------------------------------------
    def _lost_rows(self) -> list[tuple[str, str]]:
        """Sources holding fewer rows than they stored: (uri, what they lost)."""
        lost = []
        for uri, counts, *now in self._rows(
                "SELECT s.uri, s.counts, (SELECT count(*) FROM chunks c WHERE c.source = s.uri),"
                " (SELECT count(*) FROM atoms a JOIN chunks c ON a.chunk_id = c.id WHERE "
                "c.source = s.uri), (SELECT count(*) FROM questions q JOIN chunks c ON "
                "q.chunk_id = c.id WHERE c.source = s.uri) FROM sources s"):
            stored = [] if counts is None else list(self.dialect.json_value(counts))
            if stored and stored != now:  # (no counts: stored before schema 4)
                lost.append((uri, ", ".join(
                    f"{n - m} {kind}" for kind, n, m in
                    zip(("chunks", "atoms", "questions"), stored, now, strict=True) if n != m)))
        return lost

    # -- meta --------------------------------------------------------------------------
    def get_meta(self, key: str) -> Any:
        rows = self._rows(f"SELECT value FROM meta WHERE key = {self.dialect.mark}", (key,))
        return self.dialect.json_value(rows[0][0]) if rows else None

    def meta_items(self) -> dict[str, Any]:
        return {k: self.dialect.json_value(v) for k, v in
                self._rows("SELECT key, value FROM meta")}

    # -- sources and chunks ------------------------------------------------------------
    def get_source(self, uri: str) -> Source | None:
        rows = self._rows(f"SELECT {_SOURCE} FROM sources WHERE uri = {self.dialect.mark}",
                          (uri,))
        return self._source(rows[0]) if rows else None

    def members(self, containers: Sequence[str]) -> dict[str, list[Source]]:
        mark, order = self.dialect.mark, self.dialect.binary_order
        found: dict[str, list[Source]] = {}
        for owner in dict.fromkeys(containers):  # (a member's name is OWNER#NAME)
            # (between OWNER# and OWNER$ in code point order: SQLite reads the key's
            # index; PostgreSQL, whose key is in its default collation, scans the rows)
            rows = self._rows(f"SELECT {_SOURCE} FROM sources WHERE uri{order} >= {mark} AND "
                              f"uri{order} < {mark}", (owner + "#", owner + "$"))
            inside = [s for s in map(self._source, rows) if s.metadata.get("container") == owner]
            if inside:
                found[owner] = inside
        return found

    def table_rows(self, kind: Kind) -> tuple[Ids, Ids]:
        """Every row number of ``kind`` (sorted) with the row number of its chunk (what
        its vectors are checked against)."""
        row = self.dialect.row
        chunk = (f"t.{row}" if kind == "chunks" else
                 f"(SELECT c.{row} FROM chunks c WHERE c.id = t.chunk_id)")
        rows = [r for r in self._rows(f"SELECT t.{row}, {chunk} FROM {kind} t ORDER BY "
                                      f"t.{row}") if r[1] is not None]
        return (np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)),
                np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows)))

    def _embed_rows(self, kind: Kind, embedder: Embedder, rows: Ids) -> Vectors:
        """Vectors of items of ``kind`` made again from their stored text (a chunk's with
        its context, as ingest embeds it; chunks and atoms as documents)."""
        embed = embedder.embed if kind == "questions" else embedder.embed_documents
        d, wanted = self.dialect, [int(r) for r in rows]
        found = dict(self._rows(f"SELECT {d.row}, {'id' if kind == 'chunks' else 'text'} "
                                f"FROM {kind} WHERE {d.any_of(d.row)}", (d.many(wanted),)))
        if kind == "chunks":
            chunks = self.get_chunks(list(found.values()))
            return embed([chunks[found[r]].search_text for r in wanted])
        return embed([found[r] for r in wanted])

    def get_chunks(self, ids: Sequence[str]) -> dict[str, Chunk]:
        rows = self._of("chunks", _CHUNK, "id", list(ids), self.dialect.row)
        return {r[1]: self._chunk(r[1:]) for r in rows}

    def sources(self, conditions: Sequence[Condition] = ()) -> list[SourceInfo]:
        d = self.dialect
        clause, params = self.conditions_sql(conditions)  # (on the source s only)
        rows = self._rows(
            f"SELECT {', '.join('s.' + c for c in _SOURCE.split(', '))},"
            " (SELECT count(*) FROM chunks c WHERE c.source = s.uri),"
            " (SELECT count(*) FROM atoms a JOIN chunks c ON a.chunk_id = c.id"
            "   WHERE c.source = s.uri),"
            " (SELECT count(*) FROM questions q JOIN chunks c ON q.chunk_id = c.id"
            "   WHERE c.source = s.uri),"
            f" (SELECT count(*) FROM chunks c WHERE c.source = s.uri AND {d.waiting('c')})"
            f" FROM sources s WHERE {clause} ORDER BY s.uri{d.binary_order}", params)
        return [SourceInfo(self._source(r[:10]), r[10], r[11], r[12], pending=r[13])
                for r in rows]

    def counts(self, conditions: Sequence[Condition] = ()) -> dict[str, int]:
        if conditions:  # what the conditions let be seen
            clause, params = self.conditions_sql(conditions)
            d = self.dialect
            seen = f"FROM chunks c JOIN sources s ON s.uri = c.source WHERE {clause}"
            with self.snapshot():
                row = self._rows(
                    f"SELECT count(DISTINCT c.source), count(*), "
                    f"count(DISTINCT CASE WHEN {d.waiting('c')} THEN c.source END), "
                    f"sum(CASE WHEN {d.waiting('c')} THEN 1 ELSE 0 END) {seen}", params)[0]
                atoms, questions = (int(self._rows(
                    f"SELECT count(*) FROM {table} t WHERE t.chunk_id IN (SELECT c.id {seen})",
                    params)[0][0]) for table in ("atoms", "questions"))
            return {"sources": int(row[0]), "chunks": int(row[1]), "atoms": atoms,
                    "questions": questions, "chunks_waiting": int(row[3] or 0),
                    "sources_waiting": int(row[2])}
        with self.snapshot():
            found = {table: int(self._rows(f"SELECT count(*) FROM {table}")[0][0])
                     for table in ("sources", "chunks", "atoms", "questions")}
            found["chunks_waiting"] = self.count_waiting()
            found["sources_waiting"] = int(self._rows(
                f"SELECT count(DISTINCT source) FROM chunks WHERE {self.dialect.waiting()}"
            )[0][0])
            found["sources_without_access"] = int(self._rows(
                "SELECT count(*) FROM sources WHERE access IS NULL")[0][0])
        return found

    def visible_chunks(self, ids: Sequence[str], conditions: Sequence[Condition]) -> set[str]:
        if not ids:
            return set()
        d = self.dialect
        clause, params = self.conditions_sql(conditions)
        return {r[0] for r in self._rows(
            f"SELECT c.id FROM chunks c JOIN sources s ON s.uri = c.source WHERE "
            f"{d.any_of('c.id')} AND {clause}", (d.many(list(ids)), *params))}

    def set_access(self, uris: Sequence[str], access: list[str] | None, *,
                   by_hand: Mapping[str, str] | None = None) -> int:
        d = self.dialect
        uris = list(uris)
        if not uris:
            return 0
        value = None if access is None else d.json_param(access)

        def change() -> int:
            with self._write(*uris) as conn:
                rows = conn.execute(f"SELECT uri, metadata FROM sources WHERE "
                                    f"{d.any_of('uri')}", (d.many(uris),)).fetchall()
                for uri, stored in rows:  # (the mark of a list set by hand, in metadata)
                    metadata = dict(d.json_value(stored) or {})
                    metadata.pop(ACCESS_BY_HAND, None)
                    if by_hand and access is not None:
                        metadata[ACCESS_BY_HAND] = by_hand[uri]
                    conn.execute(f"UPDATE sources SET access = {d.mark}, metadata = "
                                 f"{d.mark} WHERE uri = {d.mark}",
                                 (value, d.json_param(metadata), uri))
                self._access_changed(conn, [r[0] for r in rows])
            return len(rows)

        changed = self._retried(change)
        self._after_write()
        return changed

    def _access_changed(self, conn: Any, uris: Sequence[str]) -> None:
        """(in the transaction that changed the access lists of ``uris``) What an engine
        keeps beside the rows about who may see them. Default: nothing."""

    def _hits(self, kind: Kind, scored: list[tuple[int, float]]) -> list[Hit]:
        """Search hits for ``(row, score)`` pairs, in their order (rows gone since are
        left out)."""
        if not scored:
            return []
        d = self.dialect
        if kind == "questions":
            sql = (f"SELECT q.{d.row}, q.chunk_id, q.text, a.text, q.origin FROM questions q "
                   f"JOIN atoms a ON a.id = q.atom_id WHERE {d.any_of('q.' + d.row)}")
        elif kind == "atoms":
            sql = (f"SELECT {d.row}, chunk_id, text, text, '' FROM atoms WHERE "
                   f"{d.any_of(d.row)}")
        else:
            sql = f"SELECT {d.row}, id, text, '', '' FROM chunks WHERE {d.any_of(d.row)}"
        found = {int(r[0]): r for r in self._rows(sql, (d.many([r for r, _ in scored]),))}
        return [Hit(kind, found[row][1], score, found[row][2], found[row][3], found[row][4])
                for row, score in scored if row in found]

    # -- the enrichment queue ----------------------------------------------------------
    def count_waiting(self, sources: Sequence[str] | None = None) -> int:
        d = self.dialect
        if sources is None:
            return int(self._rows(f"SELECT count(*) FROM chunks WHERE {d.waiting()}")[0][0])
        return int(self._rows(f"SELECT count(*) FROM chunks WHERE {d.waiting()} AND "
                              f"{d.any_of('source')}", (d.many(sources),))[0][0])

    def without_questions(self, chunk_ids: Sequence[str]) -> set[str]:
        d = self.dialect
        if not chunk_ids or not self._rows(f"SELECT 1 FROM chunks WHERE {d.waiting()} LIMIT 1"):
            return set()  # (the usual case, answered from one row)
        return {r[0] for r in self._rows(f"SELECT id FROM chunks WHERE {d.waiting()} AND "
                                         f"{d.any_of('id')}", (d.many(chunk_ids),))}

    def pending_chunks(self, limit: int, *, after: str | None = None,
                       sources: Sequence[str] | None = None) -> list[PendingChunk]:
        d = self.dialect
        sql, params = f"SELECT id FROM chunks WHERE {d.waiting()}", list[Any]()
        if sources is not None:
            sql += f" AND {d.any_of('source')}"
            params.append(d.many(sources))
        if after is not None:
            sql += f" AND id > {d.mark}"
            params.append(after)
        with self.snapshot():
            ids = [r[0] for r in self._rows(f"{sql} ORDER BY id LIMIT {d.mark}",
                                            (*params, limit))]
            chunks = self.get_chunks(ids)
            atoms = self._of("atoms", _ATOM, "chunk_id", ids, "chunk_id, idx")
            vectors = self._vectors_of("atoms", [a[0] for a in atoms])
        by_chunk: dict[str, list[tuple[Any, ...]]] = {}
        for atom in atoms:
            if atom[0] in vectors:  # (an atom whose vector is lost: check names it)
                by_chunk.setdefault(atom[2], []).append(atom)
        return [PendingChunk(chunk=chunks[chunk_id],
                             atoms=[_atom(a[1:]) for a in by_chunk.get(chunk_id, [])],
                             atom_vectors=_stack([vectors[a[0]]
                                                 for a in by_chunk.get(chunk_id, [])]))
                for chunk_id in ids if chunk_id in chunks]

    # -- generated questions -----------------------------------------------------------
    def _dropped(self, chunk_ids: list[str]) -> list[DroppedQuestion]:
        return [DroppedQuestion(chunk_id=r[1], atom_id=r[2], text=r[3], reason=r[4])
                for r in self._of("dropped_questions", "chunk_id, atom_id, text, reason",
                                  "chunk_id", chunk_ids, self.dialect.row)]

    def _questions_sql(self, where: str) -> str:
        """Generated questions kept (searched) and dropped, with their chunk and atom:
        columns source, chunk id, chunk index, atom id, atom index, atom, text, kept,
        reason, row, origin (``where`` on ``c`` the chunk and ``x`` the question)."""
        d = self.dialect
        return (f"SELECT c.source, c.id, c.idx, a.id, a.idx, a.text, x.text, {d.true}, '', "
                f"x.{d.row}, x.origin FROM questions x JOIN atoms a ON a.id = x.atom_id "
                f"JOIN chunks c ON c.id = x.chunk_id WHERE {where.format(table='questions')} "
                f"UNION ALL SELECT c.source, c.id, c.idx, a.id, a.idx, a.text, x.text, "
                f"{d.false}, x.reason, x.{d.row}, 'generated' FROM dropped_questions x JOIN "
                f"chunks c ON c.id = x.chunk_id LEFT JOIN atoms a ON a.id = x.atom_id "
                f"WHERE {where.format(table='dropped_questions')}")

    def generated_questions(self, *, source: str | None = None,
                            chunk_id: str | None = None, sample: int | None = None,
                            seed: int | None = None,
                            conditions: Sequence[Condition] = ()) -> list[GeneratedQuestion]:
        d = self.dialect
        with self.snapshot():
            if sample is not None:  # drawn among the row numbers, then only those read
                clause, params = self.conditions_sql(conditions)
                seen = (f"x JOIN chunks c ON c.id = x.chunk_id JOIN sources s ON s.uri = "
                        f"c.source WHERE {clause}")
                kept, dropped = draw_questions(
                    [int(r) for (r,) in self._rows(
                        f"SELECT x.{d.row} FROM questions {seen}", params)],
                    [int(r) for (r,) in self._rows(
                        f"SELECT x.{d.row} FROM dropped_questions {seen}", params)],
                    sample, seed)
                among = d.any_of(f"x.{d.row}")
                return as_generated(self._rows(self._questions_sql(among),
                                               (d.many(kept), d.many(dropped))),
                                    shuffle=True, seed=seed)
            where, value = ((f"c.source = {d.mark}", source) if source is not None
                            else (f"c.id = {d.mark}", chunk_id))
            return as_generated(self._rows(
                f"{self._questions_sql(where)} ORDER BY 3, 1, 2, 5, 8 DESC, 10",
                (value, value)))

    def question_pairs(self, most: int, seed: int = 0, *, texts: bool = False
                       ) -> QuestionPairs:
        d = self.dialect
        with self.snapshot():
            rows = self._rows(f"SELECT x.{d.row}, x.origin, c.{d.row}, c.id FROM questions x "
                              "JOIN chunks c ON c.id = x.chunk_id")
            total = len(rows)
            if total > most:  # (a sample drawn among the questions, repeatable)
                import random

                rows = random.Random(seed).sample(rows, most)
            rows.sort(key=lambda r: int(r[0]))
            numbers = [int(r[0]) for r in rows]
            said = {int(r): str(t) for r, t in (self._rows(
                f"SELECT {d.row}, text FROM questions WHERE {d.any_of(d.row)}",
                (d.many(numbers),)) if texts and rows else self._rows(  # (learned: few)
                f"SELECT {d.row}, text FROM questions WHERE origin = 'user'"))}
            questions = self._vectors_of("questions", numbers)
            chunks = self._vectors_of("chunks", list(dict.fromkeys(int(r[2]) for r in rows)))
        kept = [r for r in rows if int(r[0]) in questions and int(r[2]) in chunks]
        chunk_ids = list(dict.fromkeys(r[3] for r in kept))
        position = {chunk_id: i for i, chunk_id in enumerate(chunk_ids)}
        row_of = {r[3]: int(r[2]) for r in kept}
        return QuestionPairs(
            vectors=_stack([questions[int(r[0])] for r in kept]),
            texts=[said.get(int(r[0])) for r in kept],
            origins=[str(r[1] or "generated") for r in kept],
            chunk_of=[position[r[3]] for r in kept], chunk_ids=chunk_ids,
            chunk_vectors=_stack([chunks[row_of[c]] for c in chunk_ids]), total=total)

    # -- whole chunks and sources, with their vectors ----------------------------------
    def _questions_of(self, atom_ids: list[str]) -> list[tuple[Any, ...]]:
        """The questions of some atoms (row, atom id, chunk id, text, origin), in stored
        order: looked up through their atoms, which both engines index."""
        return self._of("questions", "atom_id, chunk_id, text, origin", "atom_id", atom_ids,
                        self.dialect.row)

    def _vectors_of_all(self, chunks: list[tuple[Any, ...]], atoms: list[tuple[Any, ...]],
                        questions: list[tuple[Any, ...]]) -> dict[Kind, dict[int, Vectors]]:
        """The vectors of rows of each kind (each row's first column: its number)."""
        return {"chunks": self._vectors_of("chunks", [r[0] for r in chunks]),
                "atoms": self._vectors_of("atoms", [r[0] for r in atoms]),
                "questions": self._vectors_of("questions", [r[0] for r in questions])}

    def stored_chunks(self, uri: str) -> dict[str, StoredChunk]:
        d = self.dialect
        with self.snapshot():
            chunks = self._rows(f"SELECT {d.row}, id, hash, context FROM chunks WHERE source = "
                                f"{d.mark} AND hash IS NOT NULL AND NOT ({d.waiting()})", (uri,))
            ids = [c[1] for c in chunks]
            atoms = self._of("atoms", _ATOM, "chunk_id", ids, "chunk_id, idx")
            questions = self._questions_of([a[1] for a in atoms])
            dropped = dropped_by_chunk(self._dropped(ids))
            facts = self._facts_of(ids)
            vectors = self._vectors_of_all(chunks, atoms, questions)
        atoms_of: dict[str, list[tuple[Any, ...]]] = {}
        for a in atoms:
            atoms_of.setdefault(a[2], []).append(a)
        questions_of: dict[str, list[tuple[Any, ...]]] = {}
        for q in questions:
            questions_of.setdefault(q[2], []).append(q)
        found: dict[str, StoredChunk] = {}
        for chunk_row, chunk_id, digest, context in chunks:
            own_atoms, own_questions = atoms_of.get(chunk_id, []), questions_of.get(chunk_id, [])
            if (chunk_row not in vectors["chunks"]
                    or any(a[0] not in vectors["atoms"] for a in own_atoms)
                    or any(q[0] not in vectors["questions"] for q in own_questions)):
                continue  # a vector is missing: this chunk is made again
            found[digest] = StoredChunk(
                vector=_stack([vectors["chunks"][chunk_row]]),
                atoms=[_atom(a[1:]) for a in own_atoms],
                atom_vectors=_stack([vectors["atoms"][a[0]] for a in own_atoms]),
                questions=[Question(atom_id=q[1], chunk_id=chunk_id, text=q[3],
                                    origin=q[4]) for q in own_questions],
                question_vectors=_stack([vectors["questions"][q[0]] for q in own_questions]),
                context=context,
                dropped=dropped.get(chunk_id, []),
                facts=facts.get(chunk_id, []))
        return found

    def export_source(self, uri: str) -> SourceBatch | None:
        for _ in range(3):
            try:
                return self._export(uri)
            except _VectorsLost as lost:
                # (vectors kept outside the snapshot, by a place of their own, may have moved on
                # to the source's next version: read again if it changed, else damaged)
                now, before = self.get_source(uri), lost.source
                if now is None:
                    return None
                if (now.content_hash, now.ingested_at) == (before.content_hash,
                                                           before.ingested_at):
                    raise
        return self._export(uri)

    def _export(self, uri: str) -> SourceBatch | None:
        d = self.dialect
        with self.snapshot():
            source = self.get_source(uri)
            if source is None:
                return None
            chunks = self._rows(f"SELECT {d.row}, {_CHUNK}, hash, NOT ({d.waiting()}) FROM "
                                f"chunks WHERE source = {d.mark} ORDER BY idx, {d.row}", (uri,))
            ids = [c[1] for c in chunks]
            atoms = self._of("atoms", _ATOM, "chunk_id", ids, d.row)
            questions = self._questions_of([a[1] for a in atoms])
            dropped = self._dropped(ids)
            facts = self._facts_of(ids)
            vectors = self._vectors_of_all(chunks, atoms, questions)
        lost = [kind for kind, rows in zip(vectors, (chunks, atoms, questions), strict=True)
                if any(r[0] not in vectors[kind] for r in rows)]
        if lost:
            raise _VectorsLost(source, f"{uri}: vectors of its {', '.join(lost)} are missing "
                               f"in {self.where}; run `isotope check --repair` first")
        return SourceBatch(
            source=source,
            chunks=[self._chunk(c[1:9]) for c in chunks],
            atoms=[_atom(a[1:]) for a in atoms],
            questions=[Question(atom_id=q[1], chunk_id=q[2], text=q[3], origin=q[4])
                       for q in questions],
            chunk_vectors=_stack([vectors["chunks"][c[0]] for c in chunks]),
            atom_vectors=_stack([vectors["atoms"][a[0]] for a in atoms]),
            question_vectors=_stack([vectors["questions"][q[0]] for q in questions]),
            chunk_hashes=[c[9] or content_hash(c[6]) for c in chunks],
            pending={c[1] for c in chunks if not c[10]},
            dropped=dropped,
            facts=[f for c in chunks for f in facts.get(c[1], [])])


class _VectorsLost(IndexDamaged):
    """A source exported without some of its vectors (as its snapshot read it)."""

    def __init__(self, source: Source, message: str) -> None:
        super().__init__(message)
        self.source = source


def _atom(row: Sequence[Any]) -> Atom:
    return Atom(id=row[0], chunk_id=row[1], index=row[2], start=row[3], end=row[4],
                text=row[5])


def _stack(vectors: Sequence[Vectors]) -> Vectors:
    """Vectors as one float32 matrix; an empty list gives a 0 x 0 one."""
    if not vectors:
        return np.zeros((0, 0), dtype=np.float32)
    return np.stack(vectors).astype(np.float32)
