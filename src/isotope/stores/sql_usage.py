"""What both SQL engines keep about an index's use, written once: the query log (each
search with its id, who asked, the results and their scores, the suggested action and
the latency; also the audit log) and feedback on the results. Both are written as
``LOG_ONLY``: nothing a search reads changes, so the index keeps its state id and what is
kept by it (a principal's rows, cached counts)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from isotope.stores import LOG_ONLY, Feedback, LoggedQuery
from isotope.stores.parts import Usage

if TYPE_CHECKING:
    from isotope.stores.sql_dialect import Dialect

_T = TypeVar("_T")

_LOGGED = "query_id, at, principal, query, mode, chunk_ids, scores, filters, action, latency_ms"
_MARK = "query_id, chunk_id, useful, principal, at, query, source, learn, vector"


class SQLUsage(Usage):
    """The query log and feedback of an SQL store (a part of ``SQLStore``)."""

    dialect: Dialect

    # (the SQL store's own, see isotope.stores.sql_core)
    _rows: Callable[..., list[tuple[Any, ...]]]
    _write: Callable[..., AbstractContextManager[Any]]
    _retried: Callable[[Callable[[], Any]], Any]

    def log_query(self, entry: LoggedQuery, keep_days: float) -> None:
        d = self.dialect
        cutoff = (datetime.now(UTC) - timedelta(days=keep_days)).isoformat()

        def write() -> None:
            with self._write(LOG_ONLY) as conn:
                conn.execute(
                    f"INSERT INTO query_log({_LOGGED}) VALUES ({', '.join([d.mark] * 10)})",
                    (entry.query_id, entry.at, d.text(entry.principal), d.text(entry.query),
                     entry.mode, d.json_param(entry.chunk_ids), d.json_param(entry.scores),
                     None if entry.filters is None else d.json_param(entry.filters),
                     entry.action, entry.latency_ms))
                conn.execute(f"DELETE FROM query_log WHERE at < {d.mark}", (cutoff,))
                conn.execute(f"DELETE FROM feedback WHERE at < {d.mark}", (cutoff,))

        self._retried(write)

    def _logged(self, row: Sequence[Any]) -> LoggedQuery:
        d = self.dialect
        return LoggedQuery(
            query_id=row[0] or "", at=row[1], principal=row[2], query=row[3], mode=row[4],
            chunk_ids=list(d.json_value(row[5])),
            scores=[] if row[6] is None else list(d.json_value(row[6])),
            filters=None if row[7] is None else d.json_value(row[7]),
            action=row[8] or "", latency_ms=float(row[9] or 0.0))

    def logged_queries(self, limit: int = 100, *, since: str | None = None
                       ) -> list[LoggedQuery]:
        d = self.dialect
        where, params = ("WHERE at >= " + d.mark, [since]) if since else ("", [])
        return [self._logged(r) for r in self._rows(
            f"SELECT {_LOGGED} FROM query_log {where} ORDER BY {d.row} DESC "
            f"LIMIT {d.mark}", (*params, limit))]

    def logged_query(self, query_id: str) -> LoggedQuery | None:
        d = self.dialect
        rows = self._rows(f"SELECT {_LOGGED} FROM query_log WHERE query_id = {d.mark}",
                          (query_id,))
        return self._logged(rows[0]) if rows else None

    def add_feedback(self, mark: Feedback) -> None:
        d = self.dialect

        def write() -> None:
            with self._write(LOG_ONLY) as conn:
                conn.execute(f"DELETE FROM feedback WHERE query_id = {d.mark} AND "
                             f"chunk_id = {d.mark}", (mark.query_id, mark.chunk_id))
                conn.execute(
                    f"INSERT INTO feedback({_MARK}) VALUES ({', '.join([d.mark] * 9)})",
                    (mark.query_id, mark.chunk_id, mark.useful, d.text(mark.principal),
                     mark.at, d.text(mark.query), mark.source, mark.learn, mark.vector))

        self._retried(write)

    def feedback(self, *, learn: str | None = None, useful: bool | None = None,
                 principal: str | None = None, query_id: str | None = None,
                 since: str | None = None, user: str | None = None,
                 limit: int | None = None) -> list[Feedback]:
        d = self.dialect
        wanted = {"learn": learn, "useful": useful, "query_id": query_id}
        where = [f"{column} = {d.mark}" for column, value in wanted.items()
                 if value is not None]
        params: list[Any] = [v for v in wanted.values() if v is not None]
        if principal is not None and user:  # that principal, or the user with any groups
            where.append(f"(principal = {d.mark} OR substr(principal, 1, {d.mark}) = "
                         f"{d.mark})")
            params += [principal, len(f"user:{user},"), f"user:{user},"]
        elif principal is not None:
            where.append(f"principal = {d.mark}")
            params.append(principal)
        if since:
            where.append(f"at >= {d.mark}")
            params.append(since)
        sql = f"SELECT {_MARK} FROM feedback"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [Feedback(query_id=r[0], chunk_id=r[1], useful=bool(r[2]), principal=r[3],
                         at=r[4], query=r[5], source=r[6], learn=r[7],
                         vector=None if r[8] is None else bytes(r[8]))
                for r in self._rows(sql + " ORDER BY at DESC" + (
                    "" if limit is None else f" LIMIT {int(limit)}"), params)]
