"""The PostgreSQL store's default vector place (``pgvector``): the vectors in the rows'
own ``vector`` column (``halfvec``, half the bytes of float32; a cosine moves by less than
0.001; ``vector`` for questions indexed with diskann), written in the rows' transaction.
Each kind has an HNSW index (cosine) made when the first vectors show their dimension
(questions may have pgvectorscale's diskann instead: ``pg_vector_index``). Filtered
searches use pgvector's iterative index scans and fall back to an exact scan of the
matching rows if those still return fewer than asked, so a filter never silently shortens
the results. A bulk load drops the indexes and builds them once at its end, with the
memory the graph wants (``hnsw_build_memory``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from isotope.ann import Ids, Searchable
from isotope.embedders import Vectors
from isotope.errors import InvalidArgument, InvalidIndex, StoreError
from isotope.models import Condition
from isotope.stores.postgres_sql import build_memory, few, restrict
from isotope.stores.records import KINDS, Kind
from isotope.stores.vector_place import Table, VectorPlace

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger(__name__)

EF_SEARCH = 200
"""HNSW candidates per search (pgvector's default is 40: too few for the hybrid pool)."""
MAX_SCAN_TUPLES = 40_000
"""How far an iterative filtered scan goes before the exact fallback takes over."""
EF_FILTERED = 1_000
"""HNSW candidates per filtered search that more than ``EXACT_CHUNKS`` chunks meet."""
VECTOR_INDEXES = ("hnsw", "diskann")
"""What the question vectors may be indexed with (the ``pg_vector_index`` setting);
atoms and chunks always have HNSW."""
DISKANN_RESCORE = 50
"""pgvectorscale's default candidates re-ranked with full vectors (at least k are)."""


class PostgresSide(Protocol):
    """What a place reads of the PostgreSQL store (:mod:`isotope.stores.postgres`)."""

    schema: str
    where: str
    _bulk: bool

    def _rows(self, sql: str, params: Any = None, *, prepare: bool | None = None
              ) -> list[tuple[Any, ...]]: ...
    def _write(self, *sources: str, lock: str | None = None
               ) -> AbstractContextManager[psycopg.Connection[Any]]: ...
    def _indexes(self, conn: psycopg.Connection[Any] | None) -> set[str]: ...
    def _advisory(self, key: str, wait: float, *, shared: bool, busy: str
                  ) -> AbstractContextManager[None]: ...
    def _stored_dim(self) -> int | None: ...
    def snapshot(self) -> AbstractContextManager[None]: ...
    def get_meta(self, key: str) -> Any: ...


class Pgvector(VectorPlace):
    """The vectors in the rows (see the module's text)."""

    name = "pgvector"
    in_rows = True

    def __init__(self, side: PostgresSide, made: Mapping[str, Any] | None,
                 options: Mapping[str, Any]) -> None:
        super().__init__(side, made, options)
        self.side: PostgresSide = side
        self._build: tuple[str, int] = ("auto", 0)
        self._wanted_index = "hnsw"
        """The ``pg_vector_index`` setting (an index keeps the one it was made with)."""
        self._question_index: str | None = None

    def tune(self, setting: str, value: Any) -> None:
        if setting == "pg_vector_index":
            if value not in VECTOR_INDEXES:
                raise InvalidArgument(f"pg_vector_index {value!r}: use one of "
                                      f"{', '.join(VECTOR_INDEXES)}")
            self._wanted_index = value
        elif setting == "build":
            self._build = value

    def fixed(self, stored: bool) -> dict[str, Any]:
        held = self.side.get_meta("vector_dim") is not None
        fixed: dict[str, Any] = {"pg_vector_index": self.question_index} if held else {}
        if held or stored:
            fixed["vector_backend"] = self.setting
        return fixed

    # -- writes --------------------------------------------------------------------------
    def column(self, kind: Kind, vectors: Vectors) -> list[Any] | None:
        from pgvector import HalfVector, Vector

        typed = Vector if kind == "questions" and self.question_index == "diskann" \
            else HalfVector
        return [typed(v) for v in vectors]

    def add(self, conn: Any, kind: Kind, rows: Sequence[int],
            groups: Sequence[int | None], vectors: Vectors) -> None:
        """(in the rows themselves: :meth:`column`)"""

    # -- reads ---------------------------------------------------------------------------
    def search(self, kind: Kind, query: Vectors, k: int, filters: Sequence[Condition]
               ) -> list[tuple[int, float]]:
        from pgvector import HalfVector, Vector

        dim = self.side._stored_dim()
        if k <= 0 or dim is None:
            return []
        flat = np.asarray(query, dtype=np.float32).reshape(-1)
        diskann = kind == "questions" and self.question_index == "diskann"
        if diskann:  # (the column itself: diskann indexes no expression)
            asked: Any = Vector(flat)
            distance = f"t.vector <=> %(q)s::vector({dim})"
        else:
            asked = HalfVector(flat)
            distance = f"t.vector::halfvec({dim}) <=> %(q)s::halfvec({dim})"
        params: dict[str, Any] = {"q": asked, "k": k}
        clause, meeting = "", ""
        if filters:
            clause, meeting = restrict(kind, filters, params)
        sql = (f"SELECT t.row, {distance} AS d FROM {kind} t {clause} "
               "ORDER BY ORDER_BY LIMIT %(k)s")
        rows = self.side._rows
        with self.side.snapshot():
            # few chunks meet the filters: scored exactly at once (an index scan would
            # read up to MAX_SCAN_TUPLES rows of other chunks, then give up)
            exact = bool(filters) and few(rows, meeting, params)
            # a filtered scan keeps the candidates that meet the conditions among the
            # nearest it visits: with many chunks meeting them (a principal who sees 10%
            # of a million questions), 200 candidates found 0.88 of the exact top 10
            wide = EF_FILTERED if filters else EF_SEARCH
            if diskann:  # (a diskann scan streams on past rows a filter rejects)
                rows("SELECT set_config('diskann.query_search_list_size', %s, true), "
                     "set_config('diskann.query_rescore', %s, true)",
                     (str(min(max(wide, k), 1000)), str(min(max(DISKANN_RESCORE, k), 1000))))
            else:
                # rows deleted but not yet vacuumed, or filtered out, use up the
                # candidates of a plain scan: an iterative scan goes on, up to
                # MAX_SCAN_TUPLES (the three settings in one round trip, for this
                # transaction only)
                rows("SELECT set_config('hnsw.ef_search', %s, true), set_config("
                     "'hnsw.iterative_scan', 'relaxed_order', true), set_config("
                     "'hnsw.max_scan_tuples', %s, true)",
                     (str(min(max(wide, k), 1000)), str(MAX_SCAN_TUPLES)))
            found = [] if exact else rows(sql.replace("ORDER_BY", distance), params)
            if len(found) < k:  # the index scan gave up: scan the rows exactly
                found = rows(sql.replace("ORDER_BY", f"0 + ({distance})"), params)
            found.sort(key=lambda r: (r[1], r[0]))
            return [(int(r[0]), 1.0 - float(r[1])) for r in found[:k]]

    def searchable(self, kind: Kind, filters: Sequence[Condition]) -> Searchable:
        raise NotImplementedError("the PostgreSQL store widens search() by chunk itself")

    def get(self, kind: Kind, rows: list[int]) -> dict[int, Vectors]:
        return {int(row): vector.to_numpy() for row, vector in self.side._rows(
            f"SELECT row, vector FROM {kind} WHERE row = ANY(%s)", (rows,))}

    def count(self, kind: Kind) -> int:
        return int(self.side._rows(f"SELECT count(*) FROM {kind} WHERE vector IS NOT NULL"
                                   )[0][0])

    # -- upkeep --------------------------------------------------------------------------
    def check(self, kind: Kind, table: Table) -> list[tuple[str, Ids]]:
        return []  # (rows and vectors are one: what is missing is an index, problems())

    def problems(self, table_rows: Callable[[Kind], Table]) -> list[str]:
        """The vector indexes a bulk load cut short left missing."""
        if self.side._stored_dim() is None:
            return []
        return [f"the {self._index_name(kind).split('_')[-1]} index of {kind} is missing "
                "(a bulk load was cut short): vector searches scan every row; run check "
                "--repair" for kind in self.missing_indexes()]

    def rebuild(self, kind: Kind, table: Table,
                embed_rows: Callable[[Ids], Vectors] | None) -> int:
        return 0  # (a row holds its vector)

    def repair(self, table_rows: Callable[[Kind], Table],
               embed_rows: Callable[[Kind], Callable[[Ids], Vectors] | None]) -> None:
        """(its indexes are made with the engine's: :meth:`build_indexes`)"""

    # -- indexes -------------------------------------------------------------------------
    @property
    def question_index(self) -> str:
        """What this index's question vectors are indexed with: ``hnsw`` or ``diskann``
        (fixed by its first vectors; an index made before the setting has HNSW)."""
        found = self._question_index
        if found is None:
            found = str(self.side.get_meta("pg_vector_index") or "hnsw")
            if self.side.get_meta("vector_dim") is not None:
                self._question_index = found
        return found

    def _index_name(self, kind: Kind) -> str:
        return f"{kind}_{self.question_index if kind == 'questions' else 'hnsw'}"

    def _index_sql(self, kind: Kind, dim: int) -> str:
        if kind == "questions" and self.question_index == "diskann":
            return ("CREATE INDEX IF NOT EXISTS questions_diskann ON questions USING diskann "
                    "(vector vector_cosine_ops)")
        return (f"CREATE INDEX IF NOT EXISTS {kind}_hnsw ON {kind} USING hnsw "
                f"((vector::halfvec({dim})) halfvec_cosine_ops)")

    def missing_indexes(self, conn: Any = None) -> list[Kind]:
        """The kinds whose vector index is missing (a bulk load cut short leaves them so:
        searches then scan every row; a check says so and a repair makes them)."""
        held = self.side._indexes(conn)
        return [kind for kind in KINDS if self._index_name(kind) not in held]

    def first_vectors(self, conn: Any, dim: int) -> None:
        """Fix the question vectors' index to the ``pg_vector_index`` setting (their
        first vectors are being written); diskann needs pgvectorscale."""
        import psycopg

        chosen = self._wanted_index
        if chosen == "diskann":
            try:
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(hashtext('isotope-extension'))")
                    conn.execute("CREATE EXTENSION IF NOT EXISTS vectorscale SCHEMA public")
            except psycopg.Error as exc:
                raise InvalidIndex(
                    f"{self.side.where}: pg_vector_index = diskann needs pgvectorscale on the "
                    f"server ({str(exc).strip().splitlines()[0]}); install it and run "
                    "`CREATE EXTENSION vectorscale` as a superuser, or use hnsw") from None
            conn.execute(f"ALTER TABLE questions ALTER COLUMN vector TYPE vector({dim})")
        conn.execute("INSERT INTO meta(key, value) VALUES ('pg_vector_index', %s) ON CONFLICT "
                     "(key) DO UPDATE SET value = excluded.value", (json.dumps(chosen),))
        self._question_index = chosen

    def make_indexes(self, conn: Any, dim: int) -> None:
        for kind in self.missing_indexes(conn):
            conn.execute(self._index_sql(kind, dim))

    def drop_indexes(self, conn: Any) -> None:
        schema = self.side.schema
        for kind in KINDS:
            # (qualified: a name not in the schema is looked for along the search
            # path, and another index's in public would go)
            conn.execute(f'DROP INDEX IF EXISTS "{schema}".{kind}_hnsw')
            conn.execute(f'DROP INDEX IF EXISTS "{schema}".{kind}_diskann')

    def build_indexes(self, dim: int) -> None:
        """Make the missing vector indexes, each in a transaction of its own with the
        memory its graph wants. A parallel build that the server cannot give its shared
        memory (a small /dev/shm) is made again by one process."""
        with self.side._write(lock=f"isotope-dim:{self.side.schema}") as conn:
            missing = self.missing_indexes(conn)
        for kind in missing:
            try:
                self._build_one(kind, dim, self._build[1])
            except StoreError as exc:
                if "shared memory" not in str(exc):
                    raise
                log.warning("%s: the parallel build of the %s vector index could not get "
                            "its shared memory (%s); building it in one process",
                            self.side.where, kind, exc)
                self._build_one(kind, dim, -1)

    def _build_one(self, kind: Kind, dim: int, workers: int) -> None:
        """Build ``kind``'s vector index (``workers``: parallel workers, 0: the server's
        setting, -1: none)."""
        with self.side._write(lock=f"isotope-dim:{self.side.schema}") as conn:
            if kind not in self.missing_indexes(conn):
                return
            found = conn.execute(f"SELECT count(*) FROM {kind}").fetchone()
            memory = build_memory(self._build[0], int(found[0]) if found else 0, dim)
            conn.execute("SELECT set_config('maintenance_work_mem', %s, true)", (memory,))
            if workers:
                conn.execute("SELECT set_config('max_parallel_maintenance_workers', %s, "
                             "true)", (str(max(workers, 0)),))

            def spilled(notice: Any) -> None:
                if "maintenance_work_mem" in (notice.message_primary or ""):
                    log.warning("%s: the %s HNSW graph outgrew %s of memory and is built "
                                "on disk, several times slower: raise the "
                                "hnsw_build_memory setting", self.side.where, kind, memory)

            conn.add_notice_handler(spilled)
            try:
                conn.execute(self._index_sql(kind, dim))
            finally:
                conn.remove_notice_handler(spilled)

