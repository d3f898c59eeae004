"""``isotope.Client``: the same ``search`` and ``ask`` as :class:`isotope.Isotope`, with
the same result types, against a server started with ``isotope serve``; code moves from
an embedded index to a served one by changing one line. Standard library only."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from isotope.errors import IsotopeError, SourceNotFound
from isotope.models import QueryResponse


class ServerError(IsotopeError):
    """The server answered with an error (its message, and the HTTP status)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class Client:
    """A served index at ``url`` (e.g. ``http://127.0.0.1:8000``)."""

    def __init__(self, url: str, *, api_key: str | None = None, timeout: float = 120.0
                 ) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    def search(self, query: str, k: int | None = None, *, mode: str | None = None,
               filters: dict[str, Any] | None = None) -> QueryResponse:
        return QueryResponse.model_validate(self._call("POST", "/search", {
            "query": query, "k": k, "mode": mode, "filters": filters}))

    def ask(self, query: str, k: int | None = None, *, mode: str | None = None,
            filters: dict[str, Any] | None = None) -> QueryResponse:
        return QueryResponse.model_validate(self._call("POST", "/ask", {
            "query": query, "k": k, "mode": mode, "filters": filters}))

    def sources(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self._call("GET", "/sources")
        return found

    def delete(self, source: str) -> None:
        from urllib.parse import quote

        self._call("DELETE", "/sources/" + quote(source.lstrip("/"), safe="/"))

    def status(self) -> dict[str, Any]:
        found: dict[str, Any] = self._call("GET", "/status")
        return found

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps({k: v for k, v in body.items() if v is not None}).encode()
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url + path, data=data, headers=headers,
                                         method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                raw = reply.read()
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("error") or exc.reason
            except (ValueError, AttributeError):
                message = exc.reason
            if exc.code == 404:
                raise SourceNotFound(str(message)) from None
            raise ServerError(f"{self.url}{path}: {message} (HTTP {exc.code})",
                              exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ServerError(f"cannot reach {self.url} ({reason}); is `isotope serve` "
                              "running there?", 0) from None
        return json.loads(raw) if raw else None
