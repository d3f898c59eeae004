"""Keyword search of the PostgreSQL store, a part of :class:`isotope.stores.postgres.
PostgresStore`: BM25 from the server's bm25 indexes (pg_textsearch), ranked by an index
scan (on the primary where the server's pg_textsearch does not replicate them), or from
isotope's own postings tables (``postings``: made by FTS5's tokenizer and written with
``COPY``; the SQL is :mod:`isotope.stores.postgres_sql`), ranked as the embedded store
ranks."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from isotope.errors import IsotopeError
from isotope.models import Condition
from isotope.stores import postgres_sql
from isotope.stores.keywords import K1, Tokenizer, query_terms, query_words
from isotope.stores.postgres_schema import keywords_query
from isotope.stores.postgres_sql import (
    ITEM_CHUNK,
    bm25_pruned,
    idf,
    named,
    term_stats,
    where,
)
from isotope.stores.records import KINDS, Hit, Kind

if TYPE_CHECKING:
    import psycopg

    from isotope.stores.postgres_replicas import Replicas

log = logging.getLogger(__name__)

RARE_POSTINGS = 5_000
"""A keyword search first scores the items holding its rarest terms, up to this many
postings of them (at least one term): see :mod:`isotope.stores.postgres_sql`."""
BM25_CUT_OFF = 100_000
"""How many matches a pg_textsearch index scan ranks at most (its TP_MAX_QUERY_LIMIT):
a filtered keyword search that found fewer than asked among that many scores the rows
that meet the filter exactly."""
BM25_FIRST = 256
"""The best rows a filtered keyword search reads first (at least 4 k; then 4 times more
each time too few of them meet the filters)."""
_SAID: set[tuple[str, ...]] = set()
"""What was said once per process: an index keeping its own postings on a server with
pg_textsearch, a missing bm25 index."""


class KeywordSearch:
    """The PostgreSQL store's keyword search (see the module's text)."""

    keyword_engine: str
    """``pg_textsearch`` (bm25 indexes in the server) or ``postings`` (isotope's own
    postings tables, for a server without pg_textsearch or an index made before it)."""
    _bm25_replicated: bool
    schema: str
    where: str
    _url: str
    _tokenizer: Tokenizer
    _local: threading.local
    _primary_lock: threading.Lock
    _primary_seen: tuple[float, int | None]
    _replicas: Replicas | None

    if TYPE_CHECKING:
        def _rows(self, sql: str, params: Any = None, *, prepare: bool | None = None
                  ) -> list[tuple[Any, ...]]: ...
        def snapshot(self) -> AbstractContextManager[None]: ...
        def _hits(self, kind: Kind, scored: list[tuple[int, float]]) -> list[Hit]: ...
        def _on_replica(self) -> bool: ...
        def _primary_position(self) -> int | None: ...
        def _indexes(self, conn: psycopg.Connection[Any] | None) -> set[str]: ...

    def _said_postings(self) -> None:
        """An index that keeps its own postings on a server with pg_textsearch says once
        per process how to move to the server's BM25 (``isotope copy``)."""
        key = (self._url, self.schema)
        if key in _SAID or not self._rows(  # (pg_settings: no error for a role
                # that may not read the setting; its row is left out)
                "SELECT 1 FROM pg_extension WHERE extname = 'pg_textsearch' UNION ALL "
                "SELECT 1 FROM pg_settings WHERE name = 'shared_preload_libraries' AND "
                "setting ~ 'pg_textsearch'"):
            return
        _SAID.add(key)
        log.warning("%s was made before this server had pg_textsearch: its keyword search "
                    "reads isotope's own postings (twice the disk, slower on common words). "
                    "To use the server's BM25 index, copy it into a new schema: isotope copy "
                    "'%s' 'URL?schema=NEW' (docs/guides/postgresql.md, Upgrading)",
                    self.where, self.where)


    def _bm25_from_primary(self, kind: Kind, words: list[str], k: int,
                           filters: Sequence[Condition]) -> list[Hit]:
        """A keyword search of a search that reads a replica, made on the primary (in a
        snapshot of its own) where the server's pg_textsearch does not replicate its
        indexes (before 1.2). Each of its statements is cut off as a replica's are, after
        ``ANSWER_WITHIN`` seconds. While the primary does not answer (its position,
        probed at most once a second, or this read), the search goes on without its
        keyword signals (a warning says so): the replicas hold no usable bm25 index.
        Its rows come from the primary, which may be ahead of the replica: a chunk the
        replica does not hold yet is left out of the results."""
        if self._primary_position() is None:
            self._said_no_keywords()
            return []
        saved = (getattr(self._local, "reading", None), getattr(self._local, "replica", None))
        self._local.reading = self._local.replica = None
        self._local.watch_primary = True
        try:
            return self._bm25_search(kind, words, k, filters)
        except IsotopeError as exc:
            if not exc.unreachable:
                raise
            with self._primary_lock:
                self._primary_seen = (time.monotonic(), None)
            self._said_no_keywords()
            return []
        finally:
            self._local.reading, self._local.replica = saved
            self._local.watch_primary = False
            if self._replicas is not None:
                self._replicas.forget_hung()

    def _said_no_keywords(self) -> None:
        if time.monotonic() - getattr(self, "_said_at", float("-inf")) > 60:
            self._said_at = time.monotonic()
            log.warning("%s: the primary does not answer, and the read replicas hold no "
                        "usable bm25 index (pg_textsearch before 1.2 does not replicate "
                        "them): searches go on without keyword signals until it is back",
                        self.where)

    def missing_bm25(self, conn: psycopg.Connection[Any] | None = None) -> list[Kind]:
        """The kinds whose bm25 index (pg_textsearch) is missing (a bulk load drops them
        and makes them at its end)."""
        if self.keyword_engine != "pg_textsearch":
            return []
        return [kind for kind in KINDS if f"{kind}_bm25" not in self._indexes(conn)]

    def _terms(self, texts: Sequence[str]) -> list[tuple[dict[str, int], int]]:
        """Each text's term frequencies and length, as FTS5 counts them."""
        counts = self._tokenizer.texts(list(texts))
        return [(dict(c), sum(c.values())) for c in counts]

    @staticmethod
    def _postings(conn: psycopg.Connection[Any], kind: str, rows: list[int],
                  terms: list[tuple[dict[str, int], int]]) -> None:
        if not rows:
            return
        with conn.cursor().copy(f"COPY {kind}_terms (term, item, tf, ntok) FROM STDIN"
                                ) as copy:
            for row, (counts, length) in zip(rows, terms, strict=True):
                for term, tf in counts.items():
                    copy.write_row((term, row, tf, length))

    def keyword_search(self, kind: Kind, query: str, k: int,
                       filters: Sequence[Condition] = ()) -> list[Hit]:
        words = query_words(query)
        if not words or k <= 0:
            return []
        if self.keyword_engine == "pg_textsearch":
            if self._bm25_replicated or not self._on_replica():
                return self._bm25_search(kind, words, k, filters)
            return self._bm25_from_primary(kind, words, k, filters)
        counted = query_terms(words, self._tokenizer)
        if not counted:
            return []
        params: dict[str, Any] = {"terms": sorted(counted), "k": k}
        restrict = ""
        if filters:
            clause, values = where(filters)
            restrict = (f"{ITEM_CHUNK[kind]} IN (SELECT c.id FROM chunks c JOIN sources s ON "
                        f"s.uri = c.source WHERE {named(clause, values, params)})")
        with self.snapshot():
            stats = self._rows(term_stats(kind), params)
            n_items, total = next((int(r[1]), int(r[2])) for r in stats if r[0] is None)
            held = {str(r[0]): int(r[1]) for r in stats if r[0] is not None}
            if not held:
                return []
            weight = {t: idf(n_items, n, counted[t]) for t, n in held.items()}
            rarest = sorted(held, key=lambda t: (held[t], t))
            params.update(terms=rarest, idf=[weight[t] for t in rarest],
                          avgdl=max(total / max(n_items, 1), 1e-9))
            rare, postings = 1, held[rarest[0]]
            while rare < len(rarest) and postings + held[rarest[rare]] <= RARE_POSTINGS:
                postings += held[rarest[rare]]
                rare += 1
            while True:  # MaxScore (postgres_sql): exact once the k-th beats the rest
                found = self._rows(bm25_pruned(kind, restrict), {**params,
                                                                  "rare": rarest[:rare]})
                rest = sum(weight[t] for t in rarest[rare:]) * (K1 + 1)
                if rare == len(rarest) or (len(found) >= k and float(found[k - 1][1]) > rest):
                    break
                rare = min(len(rarest), rare * 2)
            return self._hits(kind, [(int(r[0]), float(r[1])) for r in found])

    def _bm25_search(self, kind: Kind, words: list[str], k: int,
                     filters: Sequence[Condition]) -> list[Hit]:
        """BM25 from the kind's bm25 index (pg_textsearch), ranked by an index scan whose
        scores the scan itself hands over (``bm25_get_current_score()``: scoring a row
        again in the select list reads its whole text, 75 us a chunk). With filters, the
        scan's best ``n`` rows are kept where they meet them, ``n`` growing until k are
        found or every match was seen (as an iterative vector scan reads on); where few
        chunks meet the filters, or the scan stopped at :data:`BM25_CUT_OFF` matches,
        the rows that meet them are scored exactly. A filter never shortens the results.
        While a bulk load has dropped the index, keyword search finds nothing (said)."""
        query = keywords_query(words)
        if not query.strip():
            return []
        params: dict[str, Any] = {"q": query, "k": k, "index": f"{self.schema}.{kind}_bm25"}
        order = "t.keywords <@> to_bm25query(%(q)s, %(index)s)"
        scan = (f"SELECT t.row, {ITEM_CHUNK[kind]} AS chunk, bm25_get_current_score() AS s "
                f"FROM {kind} t ORDER BY {order} LIMIT %(n)s")
        restrict = meeting = ""
        if filters:
            restrict, meeting = postgres_sql.restrict(kind, filters, params)
        with self.snapshot():
            few = bool(filters) and postgres_sql.few(self._rows, meeting, params)
            found: list[tuple[Any, ...]] | None = None
            if not few:
                # the scores come from the index scan only: never a sequential scan for
                # it (the setting put back after). Its statements are never prepared:
                # pg_textsearch learns the query's index and LIMIT while a statement is
                # parsed, and a prepared one, parsed once, ranked every match at each
                # run (31 ms for a chunk search of the 300-passage index, not 1.1 ms)
                had, there = self._rows(
                    "SELECT current_setting('enable_seqscan'), to_regclass(%s) IS NOT NULL "
                    "FROM set_config('enable_seqscan', 'off', true)", (params["index"],))[0]
                try:
                    if not there:
                        self._said_no_index(kind)
                        return []
                    found = self._ranked(scan, meeting, params, k)
                finally:
                    self._rows("SELECT set_config('enable_seqscan', %s, true)", (had,))
            if found is None:  # scored exactly: the rows that meet the filters (OFFSET 0:
                # planned apart, never as a bm25 index scan, which stops at 100,000 rows)
                found = self._rows(
                    f"SELECT row, s FROM (SELECT t.row, {order} AS s FROM {kind} t "
                    f"{restrict} OFFSET 0) x WHERE s < 0 ORDER BY s, row LIMIT %(k)s", params,
                    prepare=False)
            scored = sorted((float(r[-1]), int(r[0])) for r in found if float(r[-1]) < 0)
            return self._hits(kind, [(row, -score) for score, row in scored])

    def _ranked(self, scan: str, meeting: str, params: dict[str, Any], k: int
                ) -> list[tuple[Any, ...]] | None:
        """The index scan's best rows (meeting the filters ``meeting`` names, reading on:
        4 k rows, then 4 times more each time too few of them meet them); None where it
        stopped at :data:`BM25_CUT_OFF` rows with fewer than k found."""
        if not meeting:
            return self._rows(scan, {**params, "n": k}, prepare=False)
        n = max(4 * k, BM25_FIRST)
        while True:
            rows = self._rows(
                f"WITH x AS MATERIALIZED ({scan}) (SELECT row, s FROM x WHERE chunk IN "
                f"({meeting}) ORDER BY s, row LIMIT %(k)s) UNION ALL SELECT NULL, count(*) "
                "FROM x", {**params, "n": n}, prepare=False)
            kept, seen = rows[:-1], int(rows[-1][1])
            if len(kept) >= k or (seen < n < BM25_CUT_OFF):  # (every match was seen)
                return kept
            if n >= BM25_CUT_OFF:
                return None
            n = min(n * 4, BM25_CUT_OFF)

    def _said_no_index(self, kind: Kind) -> None:
        key = (self._url, self.schema, kind)
        if key not in _SAID:
            _SAID.add(key)  # (once per process)
            log.warning("%s: the bm25 index of %s is missing (a bulk load is making it, or "
                        "was cut short: check --repair makes it); keyword search of %s finds "
                        "nothing meanwhile", self.where, kind, kind)

