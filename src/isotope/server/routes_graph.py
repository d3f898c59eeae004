"""The HTTP routes of the knowledge graph: its entities (``GET /entities``), an entity's
neighbourhood (``GET /graph``) and the graph in the MCP Memory server's shapes (``GET
/graph/memory``), each of what the key may see."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from isotope.index import Isotope
from isotope.knowledge.facts import MAX_HOPS
from isotope.server.http import allowed


def router(iso: Isotope) -> APIRouter:
    """The routes over ``iso``."""
    api = APIRouter()

    @api.get("/entities")
    def entities(request: Request,
                 top: Annotated[int, Query(ge=1, le=10_000, description="How many")] = 20,
                 match: Annotated[str | None, Query(
                     max_length=200, description="Only entities whose name, type or a "
                     "statement naming them holds this text (case ignored)")] = None,
                 chunk: Annotated[str | None, Query(
                     max_length=200, description="Only the entities this chunk names "
                     "(a result's chunk id)")] = None
                 ) -> list[dict[str, Any]]:
        """The entities named in the atoms (setting graph), most chunks first, with
        their type and counts (as ``isotope entities``)."""
        principal = allowed(request, "entities")
        return [dataclasses.asdict(e)
                for e in iso.entities(top, match=match, chunk=chunk, principal=principal)]

    @api.get("/graph")
    def graph(request: Request,
              entity: Annotated[str, Query(min_length=1, max_length=200,
                                           description="An entity's name or alias")],
              hops: Annotated[int, Query(ge=1, le=MAX_HOPS, description="How many "
                                         "relations away to follow")] = 1) -> dict[str, Any]:
        """An entity and the relations up to ``hops`` away, each with the chunks that
        state it (as ``isotope graph ENTITY --json``); 404 when no chunk the key may see
        names it."""
        return iso.graph(entity, hops=hops, principal=allowed(request, "graph")).to_json()

    @api.get("/graph/memory")
    def memory(request: Request,
               query: Annotated[str | None, Query(
                   max_length=200, description="As the Memory server's search_nodes")] = None,
               names: Annotated[list[str] | None, Query(
                   max_length=100, description="As its open_nodes (repeatable)")] = None,
               entity: Annotated[str | None, Query(
                   min_length=1, max_length=200, description="An entity's neighbourhood "
                   "(as the MCP tool graph)")] = None,
               hops: Annotated[int, Query(ge=1, le=MAX_HOPS, description="With entity: how "
                                          "many relations away to follow")] = 1,
               ) -> dict[str, Any]:
        """The graph in the MCP Memory server's shapes: ``entities`` (name, entityType,
        observations) and ``relations`` (from, to, relationType); all of it, or as
        ``search_nodes`` (``query``) or ``open_nodes`` (``names``; with ``not_found``:
        the names that name no entity, each with the closest names) give it, or an
        entity's neighbourhood up to ``hops`` away (``entity``; with ``center``, ``hops``
        and ``truncated``; 404 when no chunk the key may see names it)."""
        principal = allowed(request, "read_graph")
        return iso.memory_graph(query=query, names=names, entity=entity, hops=hops,
                                principal=principal)

    return api
