"""The knowledge graph in the shapes of the MCP Memory server
(``@modelcontextprotocol/server-memory``): its tools ``read_graph``, ``search_nodes`` and
``open_nodes`` reply ``{"entities": [{"name", "entityType", "observations"}],
"relations": [{"from", "to", "relationType"}]}``, and its file holds one JSON object per
line with ``"type": "entity"`` or ``"relation"``. An agent that reads that server reads
isotope's graph the same way. An entity's observations are the statements (atoms) that
name it; everything is read as one principal may see it."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from isotope.knowledge.facts import GraphEntity, GraphRelation, Neighbourhood
from isotope.models import Condition
from isotope.stores import Store

MemoryGraph = dict[str, Any]
"""``entities`` and ``relations`` (lists of the Memory server's objects), and what a
reply adds to them (``not_found``; a walk's ``center``, ``hops``, ``truncated``)."""
ALL = 1_000_000
"""Entities read by ``read_graph`` (and an export): all of them, in practice."""


def shaped(store: Store, entities: Sequence[GraphEntity], relations: Sequence[GraphRelation],
           conditions: Sequence[Condition], *, observations: int = 20) -> MemoryGraph:
    """Entities and relations as the Memory server gives them; a relation whose end is
    not among the entities is named by that end's own visible name."""
    names = {e.key: e.name for e in entities}
    missing = sorted({k for r in relations for k in (r.subject, r.object)} - set(names))
    names.update({e.key: e.name for e in store.entities(conditions, keys=missing,
                                                        top=len(missing))} if missing else {})
    notes = store.observations([e.key for e in entities], conditions, per_entity=observations)
    return {
        "entities": [{"name": e.name, "entityType": e.type,
                      "observations": notes.get(e.key, [])} for e in entities],
        "relations": [{"from": names[r.subject], "to": names[r.object],
                       "relationType": r.predicate} for r in relations
                      if r.subject in names and r.object in names],
    }


def read_graph(store: Store, conditions: Sequence[Condition] = ()) -> MemoryGraph:
    """The whole graph one may see."""
    with store.snapshot():
        return shaped(store, store.entities(conditions, top=ALL), store.relations(conditions),
                      conditions)


def search_nodes(store: Store, query: str, conditions: Sequence[Condition] = (), *,
                 top: int = 50) -> MemoryGraph:
    """Entities whose name, type or a statement naming them holds ``query`` (case
    ignored), with the relations that touch them."""
    with store.snapshot():
        found = store.entities(conditions, top=top, match=query)
        return shaped(store, found, store.relations(conditions, keys=[e.key for e in found]),
                      conditions)


def open_nodes(store: Store, names: Sequence[str],
               conditions: Sequence[Condition] = ()) -> MemoryGraph:
    """The entities named (by any of their names or aliases), with the relations that
    touch them; and ``not_found``: each name that names no entity one may see, with the
    closest names one may see (``did_you_mean``; the Memory server drops such a name
    without a word)."""
    with store.snapshot():
        asked = {n: store.resolve_entity(n, conditions) for n in dict.fromkeys(names)}
        keys = sorted(set(asked.values()))
        found = store.entities(conditions, keys=keys, top=len(keys) or 1)
        graph = shaped(store, found, store.relations(conditions, keys=[e.key for e in found]),
                       conditions)
        seen = {e.key for e in found}
        graph["not_found"] = [{"name": n, "did_you_mean": store.closest_entities(n, conditions)}
                              for n, key in asked.items() if key not in seen]
        return graph


def walk(store: Store, found: Neighbourhood, conditions: Sequence[Condition] = (), *,
         observations: int = 5) -> MemoryGraph:
    """An entity's neighbourhood (:meth:`isotope.Isotope.graph`) in the Memory server's
    shapes: its ``entities`` (with up to ``observations`` statements each) and
    ``relations``, and ``center`` (the entity's name), ``hops`` and ``truncated`` (more
    relations were within reach than shown)."""
    with store.snapshot():
        graph = shaped(store, found.entities, found.relations, conditions,
                       observations=observations)
    return {"center": found.center.name, "hops": found.hops, **graph,
            "truncated": found.truncated}


def jsonl(graph: MemoryGraph) -> Iterator[str]:
    """The Memory server's file, line by line (each without its line break)."""
    for entity in graph["entities"]:
        yield json.dumps({"type": "entity", **entity}, ensure_ascii=False)
    for relation in graph["relations"]:
        yield json.dumps({"type": "relation", **relation}, ensure_ascii=False)
