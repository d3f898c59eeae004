"""The HTTP routes of questions: the generated ones of a source, a chunk or a sample
(``GET /questions``, ``GET /chunks/{id}/questions``), and questions by hand (add, edit,
disable, enable: an administrator's key)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi import Path as PathParam
from pydantic import BaseModel, Field

from isotope.index import Isotope
from isotope.server.http import allowed
from isotope.server.routes_sources import SOURCE_NAME
from isotope.server.work import Turns

ChunkId = Annotated[str, PathParam(description="The chunk's id (as search results give it)")]
QuestionId = Annotated[str, PathParam(
    description="The question's id (as GET /questions gives it)")]


class QuestionText(BaseModel):
    text: str = Field(max_length=1_000, description="The question, one line")


def router(iso: Isotope, turns: Turns) -> APIRouter:
    """The routes over ``iso``, in ``turns``."""
    api = APIRouter()

    @api.get("/questions")
    def questions(request: Request,
                  source: Annotated[str | None, Query(description=SOURCE_NAME)] = None,
                  chunk: Annotated[int | None, Query(
                      description="Only this chunk of the source (its number, from 0)")
                  ] = None,
                  chunk_id: Annotated[str | None, Query(
                      description="One chunk, by its id (as search results give it)")] = None,
                  sample: Annotated[int | None, Query(
                      ge=1, le=10_000, description="This many drawn at random across the "
                      "index")] = None,
                  seed: Annotated[int | None, Query(
                      description="The seed of the draw (the same seed, the same sample)")
                  ] = None) -> list[dict[str, Any]]:
        """The generated questions, kept and dropped (as ``isotope questions``): of a
        ``source`` (only its chunk number ``chunk`` if given), of one chunk by
        ``chunk_id``, or ``sample`` drawn across the index (of what the key may see)."""
        return [q.model_dump() for q in iso.questions(source, chunk=chunk, chunk_id=chunk_id,
                                                      sample=sample, seed=seed,
                                                      principal=allowed(request, "questions"))]

    @api.get("/chunks/{chunk_id}/questions")
    def chunk_questions(chunk_id: ChunkId,
                        request: Request) -> dict[str, Any]:
        """Every generated question of a chunk with the atom it was written for: kept
        (searched) and dropped, each dropped one with why (as ``isotope questions``). A
        chunk the key may not see answers 404, as one that does not exist."""
        principal = allowed(request, "chunk_questions")
        return iso.chunk_questions(chunk_id, principal=principal).model_dump(mode="json")

    @api.post("/chunks/{chunk_id}/questions")
    async def add_question(chunk_id: ChunkId,
                           body: QuestionText, request: Request) -> dict[str, Any]:
        """Add a question by hand to a chunk (origin ``manual``; as ``isotope questions
        add``). Needs an administrator's key."""
        allowed(request, "add_question")
        made = await turns.write(lambda: iso.add_question("", body.text, chunk_id=chunk_id))
        return {"id": made}

    @api.put("/questions/{question_id}")
    async def edit_question(question_id: QuestionId,
                            body: QuestionText, request: Request) -> dict[str, Any]:
        """Change a question's text (it becomes ``manual``); its new id. Needs an
        administrator's key."""
        allowed(request, "edit_question")
        return {"id": await turns.write(lambda: iso.edit_question(question_id, body.text))}

    @api.delete("/questions/{question_id}", status_code=204)
    async def disable_question(question_id: QuestionId,
                               request: Request) -> Response:
        """Take a question out of every search (kept, dropped: ``disabled by hand``).
        Needs an administrator's key."""
        allowed(request, "disable_question")
        await turns.write(lambda: iso.disable_question(question_id))
        return Response(status_code=204)

    @api.post("/questions/{question_id}/enable", status_code=204)
    async def enable_question(question_id: QuestionId,
                              request: Request) -> Response:
        """Search a question disabled by hand again. Needs an administrator's key."""
        allowed(request, "enable_question")
        await turns.write(lambda: iso.enable_question(question_id))
        return Response(status_code=204)

    return api
