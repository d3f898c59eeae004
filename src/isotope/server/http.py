"""What every HTTP route of the server does the same way: who asks (the request's key's
principal), whether it may (:func:`allowed`, through the table of operations), a model
as JSON serialised once, text with undecodable characters made plain, a full disk said
as such."""

from __future__ import annotations

from typing import Any

from fastapi import Request, Response
from pydantic import BaseModel

from isotope.access import Principal
from isotope.search.filters import shown_text
from isotope.server.gate import principal_in, scope_in
from isotope.server.operations import permit


def allowed(request: Request, name: str) -> Principal | None:
    """The request's principal, if its key may do the operation ``name`` (see
    :mod:`isotope.server.operations`); else 403."""
    principal = request_principal(request)
    permit(name, principal, scope_in(request.scope))
    return principal


def request_principal(request: Request) -> Principal | None:
    """Who sent ``request``: its API key's principal (None: a server without keys, whose
    caller is the index's owner)."""
    return principal_in(request.scope)


def json_response(model: BaseModel) -> Response:
    """``model`` as JSON, serialised once: the endpoint's ``response_model`` documents it,
    and FastAPI does not validate it again (a result list costs a few milliseconds)."""
    return Response(model.model_dump_json(), media_type="application/json")


def plain_text(value: Any) -> Any:
    """``value`` with every lone surrogate in its text (an escaped ``\\ud800`` in a JSON
    body) shown as U+FFFD: such text cannot be encoded for the model or the reply."""
    if isinstance(value, str):
        return shown_text(value)
    if isinstance(value, dict):
        return {plain_text(k): plain_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_text(v) for v in value]
    return value


DISK_FULL = "the server's disk is full; nothing of the request was stored"


def disk_full(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what caused it) is a full disk or quota."""
    import errno

    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        exc = exc.__cause__ or exc.__context__
    return False
