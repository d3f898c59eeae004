"""The HTTP routes that search and answer: ``POST /search``, ``/ask`` (streamed or
not), ``/answer`` and ``/feedback``; each checks its key through the table of operations
(:mod:`isotope.server.operations`) and takes its turn (:class:`~isotope.server.work.Turns`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field, field_validator

from isotope import errors
from isotope.index import Isotope
from isotope.models import QueryResponse
from isotope.server.gate import scope_in
from isotope.server.http import allowed, json_response, plain_text, request_principal
from isotope.server.work import Turns


class SearchRequest(BaseModel):
    query: str = Field(max_length=10_000, description="A question or keywords")
    k: int | None = Field(None, ge=1, le=10_000, strict=True, description="Results wanted "
                          "(default: the top_k setting)")
    mode: str | None = Field(None, description="Retrieval mode (default: the mode setting)")
    filters: dict[str, Any] | None = Field(None, description="Conditions on the source "
                                           "and metadata (see the docs: guides/filters.md)")
    explain: bool = Field(False, description="Each result says how its score was made "
                          "(per signal: rank, raw and standardised score, weight, "
                          "contribution; the questions and atoms that matched)")

    @field_validator("query")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the query is empty: ask a question, or give some keywords")
        return value


class FeedbackRequest(BaseModel):
    query_id: str = Field(max_length=64, description="The search's query_id (a /search "
                          "or /ask response's)")
    chunk_id: str = Field(max_length=256, description="One of the chunks it returned")
    useful: bool = Field(True, strict=True, description="false: the result did not help")


class AskRequest(SearchRequest):
    stream: bool = Field(False, description="Server-sent events: results, then the "
                         "answer's tokens as they come, then the answer, then done")


def router(iso: Isotope, turns: Turns) -> APIRouter:
    """The routes over ``iso``, in ``turns``."""
    api = APIRouter()

    @api.post("/search", response_model=QueryResponse)
    async def search(body: SearchRequest, request: Request) -> Response:
        """The chunks that answer the query (as ``isotope query --raw --json``), of the
        sources the key may see."""
        found = await turns.search(body.query, body.k, mode=body.mode, filters=body.filters,
                                   principal=allowed(request, "search"), explain=body.explain)
        return json_response(found)

    @api.post("/ask", response_model=QueryResponse,
              responses={200: {"content": {"text/event-stream": {}}}})
    async def ask(body: AskRequest, request: Request) -> Any:
        """An answer citing the chunks found; ``stream``: as server-sent events
        (``results``, then ``token`` for each piece of the model's reply, then
        ``answer``, then ``done``). The model is stopped when the client goes away."""
        found = await turns.search(body.query, body.k, mode=body.mode, filters=body.filters,
                                   for_answer=True, principal=allowed(request, "ask"),
                                   explain=body.explain)
        if not body.stream:
            await _answer(turns, found, request)
            return json_response(found)
        return StreamingResponse(_events(turns, found, request),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store"})

    @api.post("/answer", response_model=QueryResponse)
    async def answer(body: QueryResponse, request: Request) -> Response:
        """An answer to a search already made (a ``/search`` response sent back), from
        its results: as ``Isotope.answer``."""
        allowed(request, "answer")
        body = QueryResponse.model_validate(plain_text(body.model_dump()))
        if not body.query.strip():
            raise errors.InvalidArgument("the response has no query to answer")
        await _answer(turns, body, request)
        return json_response(body)

    @api.post("/feedback")
    async def feedback(body: FeedbackRequest, request: Request) -> dict[str, Any]:
        """Mark a result of a search this key made useful or not (as ``isotope
        feedback``): a useful mark teaches the chunk the query as a question (the
        ``learn`` setting), a not-useful one keeps the chunk from ranking first again for
        that query or a very close one. A query id of another key's user, or of another
        project, answers 404; a chunk the search did not return, 400."""
        principal, reads = allowed(request, "feedback"), scope_in(request.scope) == "read"
        done = await turns.write(lambda: iso.feedback(body.query_id, body.chunk_id,
                                                      body.useful, principal=principal,
                                                      read_only=reads))
        return dict(done.model_dump())

    return api


async def _answer(turns: Turns, found: QueryResponse, request: Request,
                  on_token: Callable[[str], None] | None = None) -> bool:
    """Have the model answer ``found``, in turn; stops the model when the client goes
    away (then returns False), or when a streamed reply whose client left is cancelled
    by Starlette."""
    return await turns.answer(found, request_principal(request), gone=request.is_disconnected,
                              on_token=on_token)


async def _events(turns: Turns, found: QueryResponse,
                  request: Request) -> AsyncIterator[str]:
    """The /ask stream: results at once, the reply's tokens as the model writes them,
    then the answer as checked, then done."""
    yield "event: results\ndata: " + found.model_dump_json() + "\n\n"
    loop = asyncio.get_running_loop()
    tokens: asyncio.Queue[str | None] = asyncio.Queue()

    def token(piece: str) -> None:
        loop.call_soon_threadsafe(tokens.put_nowait, piece)

    async def run() -> None:
        try:
            await _answer(turns, found, request, token)
        finally:
            loop.call_soon_threadsafe(tokens.put_nowait, None)

    work = asyncio.ensure_future(run())
    try:
        while (piece := await tokens.get()) is not None:
            yield "event: token\ndata: " + json.dumps({"text": piece}) + "\n\n"
        await work
        yield "event: answer\ndata: " + json.dumps(
            {"answer": found.answer, "citations": found.citations,
             "answer_kind": found.answer_kind,
             "answer_confidence": found.answer_confidence}) + "\n\n"
    except errors.IsotopeError as exc:
        yield "event: error\ndata: " + json.dumps({"error": str(exc)}) + "\n\n"
    finally:
        if not work.done():
            work.cancel()
    yield "event: done\ndata: {}\n\n"
