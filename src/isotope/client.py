"""``isotope.Client``: :class:`isotope.Isotope`'s reading and writing methods, with the
same argument names, result types and named errors, against a server started with
``isotope serve``; code moves from an embedded index to a served one by changing one
line. Standard library only."""

from __future__ import annotations

import contextlib
import json
import mimetypes
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlencode

from isotope.errors import InvalidArgument, IsotopeError, SourceNotFound
from isotope.knowledge.facts import GraphEntity, Neighbourhood
from isotope.models import GeneratedQuestion, QueryResponse, SearchResult
from isotope.reports import IngestReport, listed_source
from isotope.stores import SourceInfo


class ServerError(IsotopeError):
    """The server answered with an error (its message, and the HTTP status)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class Client:
    """A served index at ``url`` (e.g. ``http://127.0.0.1:8000``). Everything it reads is
    what its API key may see: a key that names a user (``api_keys_file``) is that user,
    and the server answers for it alone (:mod:`isotope.access`)."""

    def __init__(self, url: str, *, api_key: str | None = None, timeout: float = 120.0
                 ) -> None:
        if api_key is not None and not all(33 <= ord(c) <= 126 for c in api_key):
            raise InvalidArgument("an API key is printable ASCII, without spaces or line "
                                  "breaks")
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    def __repr__(self) -> str:
        """Where it calls, and whether with a key (never the key itself, nor a password
        in the URL)."""
        from isotope.redaction import redact

        return (f"Client(url={redact(self.url, self.url)!r}, "
                f"api_key={'set' if self.api_key else None!r})")

    # -- reading -----------------------------------------------------------------------
    def search(self, query: str, k: int | None = None, *, mode: str | None = None,
               filters: dict[str, Any] | None = None) -> QueryResponse:
        """As :meth:`Isotope.search`."""
        return QueryResponse.model_validate(self._call("POST", "/search", {
            "query": query, "k": _k(k), "mode": mode, "filters": filters}))

    def ask(self, query: str, k: int | None = None, *, mode: str | None = None,
            filters: dict[str, Any] | None = None) -> QueryResponse:
        """As :meth:`Isotope.ask`."""
        return QueryResponse.model_validate(self._call("POST", "/ask", {
            "query": query, "k": _k(k), "mode": mode, "filters": filters}))

    def answer(self, response: QueryResponse) -> QueryResponse:
        """As :meth:`Isotope.answer`: an answer to a search already made, from its
        results."""
        return QueryResponse.model_validate(self._call(
            "POST", "/answer", json.loads(response.model_dump_json())))

    def as_retriever(self, k: int | None = None, *, mode: str | None = None,
                     filters: dict[str, Any] | None = None,
                     ) -> Callable[[str], list[SearchResult]]:
        """As :meth:`Isotope.as_retriever`."""
        return lambda query: self.search(query, k, mode=mode, filters=filters).results

    def questions(self, source: str | Path | None = None, *, chunk: int | None = None,
                  chunk_id: str | None = None, sample: int | None = None,
                  seed: int | None = None) -> list[GeneratedQuestion]:
        """As :meth:`Isotope.questions`."""
        query = {k: v for k, v in {"source": None if source is None else str(source),
                                   "chunk": chunk, "chunk_id": chunk_id, "sample": sample,
                                   "seed": seed}.items() if v is not None}
        found = self._call("GET", "/questions?" + urlencode(query))
        return [GeneratedQuestion.model_validate(q) for q in found]

    def feedback(self, query_id: str, chunk_id: str, useful: bool = True) -> Any:
        """As :meth:`Isotope.feedback`, for a search this key made (an
        :class:`isotope.search.learning.FeedbackResult`)."""
        from isotope.search.learning import FeedbackResult

        return FeedbackResult.model_validate(self._call("POST", "/feedback", {
            "query_id": query_id, "chunk_id": chunk_id, "useful": bool(useful)}))

    def sources(self) -> list[SourceInfo]:
        """As :meth:`Isotope.sources`."""
        return [listed_source(item) for item in self._call("GET", "/sources")]

    def status(self) -> Any:
        """As :meth:`Isotope.status` (an :class:`isotope.IndexStatus`)."""
        from isotope.reports import IndexStatus

        return IndexStatus.model_validate(self._call("GET", "/status"))

    def entities(self, top: int = 20, *, match: str | None = None,
                 chunk: str | None = None) -> list[GraphEntity]:
        """As :meth:`Isotope.entities`."""
        query = {k: v for k, v in {"top": top, "match": match, "chunk": chunk}.items()
                 if v is not None}
        return [GraphEntity(**e) for e in self._call("GET", "/entities?" + urlencode(query))]

    def graph(self, entity: str, *, hops: int = 1) -> Neighbourhood:
        """As :meth:`Isotope.graph`."""
        return Neighbourhood.from_json(self._call(
            "GET", "/graph?" + urlencode({"entity": entity, "hops": hops})))

    def memory_graph(self, *, query: str | None = None, names: Sequence[str] | None = None,
                     entity: str | None = None, hops: int = 1) -> dict[str, Any]:
        """As :meth:`Isotope.memory_graph`."""
        asked: list[tuple[str, str | int]] = [("query", query)] if query is not None else []
        asked += [("names", n) for n in names or ()]
        asked += [("entity", entity), ("hops", hops)] if entity is not None else []
        found: dict[str, Any] = self._call("GET", "/graph/memory?" + urlencode(asked))
        return found

    # -- writing -----------------------------------------------------------------------
    def ingest(self, paths: str | Path | Iterable[str | Path], *,
               allow: Sequence[str] | None = None) -> IngestReport:
        """Upload files and ingest them (they are kept in the server's upload folder,
        under their names); a folder is refused: upload its files, or have the server
        read it with :meth:`sync`. ``allow``: who may see them (as :meth:`Isotope.ingest`)."""
        files = [Path(p) for p in ([paths] if isinstance(paths, str | Path) else paths)]
        if not files:
            raise InvalidArgument("give at least one file to upload")
        for path in files:
            if not path.is_file():
                raise InvalidArgument(f"{path}: not a file; upload files (Client.sync reads "
                                      "folders of the server's own machine)")
        boundary = uuid.uuid4().hex
        body = b"".join(
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename="
            f"\"{_header_safe(p.name)}\"\r\nContent-Type: "
            f"{mimetypes.guess_type(p.name)[0] or 'application/octet-stream'}\r\n\r\n"
            .encode() + p.read_bytes() + b"\r\n" for p in files) + b"".join(
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"allow\"\r\n\r\n"
            f"{_header_safe(entry)}\r\n".encode() for entry in allow or []
        ) + f"--{boundary}--\r\n".encode()
        return _report(self._upload("/ingest", body,
                                    f"multipart/form-data; boundary={boundary}"))

    def sync(self, paths: str | Path | Iterable[str | Path], *,
             allow: Sequence[str] | None = None) -> IngestReport:
        """Have the server make the index match folders of its own machine (below its
        ``serve_roots``), as :meth:`Isotope.sync`."""
        wanted = [str(p) for p in ([paths] if isinstance(paths, str | Path) else paths)]
        return _report(self._call("POST", "/sync", {
            "paths": wanted, **({"allow": list(allow)} if allow is not None else {})}))

    def delete(self, source: str | Path, *, members: bool = False) -> None:
        """Remove a source; a container (a mailbox) only with ``members=True``."""
        self._call("DELETE", "/sources?" + urlencode(
            {"source": str(source), **({"members": "true"} if members else {})}))

    # -- the wire ----------------------------------------------------------------------
    def _upload(self, path: str, body: bytes, content_type: str) -> Any:
        """POST a large body, reading the server's answer if it comes before the body is
        sent (a missing or read-only key, a body over its limit: the server answers at
        once and closes, which urllib reported as "cannot reach the server")."""
        import http.client
        import select
        from urllib.parse import urlsplit

        parts = urlsplit(self.url)
        kind = (http.client.HTTPSConnection if parts.scheme == "https"
                else http.client.HTTPConnection)
        conn = kind(parts.hostname or "localhost", parts.port, timeout=self.timeout)
        try:
            try:
                conn.putrequest("POST", parts.path.rstrip("/") + path)
                conn.putheader("Content-Type", content_type)
                conn.putheader("Content-Length", str(len(body)))
                conn.putheader("Accept", "application/json")
                if self.api_key:
                    conn.putheader("Authorization", f"Bearer {self.api_key}")
                conn.endheaders()
                early, _, _ = select.select([conn.sock], [], [], 0.5)
                if not early:
                    with contextlib.suppress(OSError):  # it may answer while we send
                        for start in range(0, len(body), 1 << 20):
                            conn.send(body[start:start + (1 << 20)])
                reply = conn.getresponse()
                status, data = reply.status, reply.read()
            except (OSError, http.client.HTTPException) as exc:
                raise ServerError(f"cannot reach {self.url} ({exc}); is `isotope serve` "
                                  "running there?", 0) from None
        finally:
            conn.close()
        found = _json(data)
        if status == 200 or (status == 422 and isinstance(found, dict) and "ok" in found):
            return found  # (422: an ingest whose files failed; the report says which)
        self._raise(path, status, found, http.client.responses.get(status, ""))

    def _raise(self, path: str, status: int, found: Any, reason: str) -> NoReturn:
        message = (found.get("error") if isinstance(found, dict) else None) or reason
        if status == 404:
            raise SourceNotFound(str(message))
        if status in (400, 422):
            raise InvalidArgument(f"{message} (HTTP {status})")
        raise ServerError(f"{self.url}{path.split('?')[0]}: {message} (HTTP {status})",
                          status)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None, *,
              raw: bytes | None = None, content_type: str | None = None,
              report: bool = False) -> Any:
        headers = {"Accept": "application/json"}
        data = raw
        if body is not None:
            data = json.dumps({k: v for k, v in body.items() if v is not None}).encode()
            content_type = "application/json"
        if content_type:
            headers["Content-Type"] = content_type
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url + path, data=data, headers=headers,
                                         method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                raw_reply = reply.read()
        except urllib.error.HTTPError as exc:
            found = _json(exc.read())
            if report and exc.code == 422 and isinstance(found, dict) and "ok" in found:
                return found  # an ingest whose files failed: the report says which
            self._raise(path, exc.code, found, str(exc.reason))
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ServerError(f"cannot reach {self.url} ({reason}); is `isotope serve` "
                              "running there?", 0) from None
        return json.loads(raw_reply) if raw_reply else None


def _json(data: bytes) -> Any:
    try:
        return json.loads(data) if data else None
    except ValueError:
        return {}


def _header_safe(name: str) -> str:
    """A file name for a multipart header: quotes and line breaks escaped."""
    return name.replace("\\", "\\\\").replace('"', "%22").replace("\r", " ").replace(
        "\n", " ")


def _k(k: int | None) -> int | None:
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not
                          1 <= k <= 10_000):
        raise InvalidArgument(f"k = {k!r}: the number of results must be a whole number "
                              "from 1 to 10000")
    return k


def _report(found: dict[str, Any]) -> IngestReport:
    from isotope.reports import FileError

    report = IngestReport()
    for name, value in found.items():
        if not hasattr(report, name) or name == "ok":
            continue
        if name in ("skipped", "errors", "warnings", "failed_atoms", "failed_contexts"):
            value = [FileError(e["path"], e["message"]) for e in value]
        setattr(report, name, value)
    return report


__all__ = ["Client", "ServerError"]
