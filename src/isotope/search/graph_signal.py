"""The ``graph`` signal: chunks reached from the query through the knowledge graph
(setting ``graph``), for questions whose answer is in a passage that shares no word with
them ("In which city was the architect of the opera house born?").

The walk starts from **seeds**: the entities the query names (any run of its words that
is an entity's name or alias), and the entities of the statements (atoms) nearest the
query, weighted by how near. From each seed it follows relations, up to ``hops`` away,
each step keeping :data:`DECAY` of the weight. A chunk scores the best weight of an
entity it names, times that entity's specificity (an entity named in many chunks leads
less far), and its hits say by which path it was reached
(``Sydney Opera House -[was designed by]-> Jørn Utzon``), which ``--explain`` shows.
Everything is read through the search's conditions: a hidden chunk is never a seed, a
step or a result."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from isotope.embedders import Vectors
from isotope.ingest.questions import STOPWORDS
from isotope.knowledge.facts import entity_key
from isotope.models import Condition, best_first
from isotope.stores import Hit, Store

LONGEST_NAME = 6
"""Most words of a run of the query looked up as a name."""
SEED_ATOMS = 5
"""The statements nearest the query whose entities start the walk."""
DECAY = 0.6
"""The share of a path's weight that survives each relation followed."""
POOL = 50
"""Fewest chunks the walk reads, whatever the search's ``k`` (a mode of its own reads only
``k``: the walk's limits would cut the answering chunk)."""
MENTIONS = 50
"""Mentions the walk reads at most per chunk of its pool (those of the entities it
weighs most)."""
SHOWN_PATHS = 3
"""Most paths to a chunk spelt out (its best ways; a rewritten search keeps as many)."""
COMMON = 200
"""An entity named in more chunks than this is too common to lead anywhere (its
mentions are not followed)."""


@dataclass
class Reached:
    """How the walk reached an entity: its weight, where it started (``origin``) and the
    relations followed from the seed (predicate, whether followed forwards, entity)."""

    weight: float
    origin: str
    seed: str
    steps: tuple[tuple[str, bool, str], ...] = ()

    def shown(self, names: dict[str, str]) -> str:
        text = f"{self.origin}: {names.get(self.seed, self.seed)}"
        for predicate, forwards, key in self.steps:
            arrow = f" -[{predicate}]-> " if forwards else f" <-[{predicate}]- "
            text += arrow + names.get(key, key)
        return text


def _names(query: str) -> list[str]:
    """Every run of up to :data:`LONGEST_NAME` words of the query that is not only
    stopwords, as entity keys."""
    words = entity_key(query).split()
    runs = {" ".join(words[i:j]) for i in range(len(words))
            for j in range(i + 1, min(len(words), i + LONGEST_NAME) + 1)}
    return sorted(r for r in runs if any(w not in STOPWORDS for w in r.split()))


def _better(found: dict[str, Reached], key: str, reached: Reached) -> bool:
    if key in found and found[key].weight >= reached.weight:
        return False
    found[key] = reached
    return True


def graph_hits(store: Store, query: str, vector: Vectors, pool: int,
               filters: Sequence[Condition] = (), *, hops: int = 2
               ) -> list[tuple[str, float, list[Hit]]]:
    """The chunks the graph reaches from ``query``, best first (at most ``pool``): (chunk
    id, score in 0..1, hits whose text is the path)."""
    reached: dict[str, Reached] = {}
    pool = max(pool, POOL)
    with store.snapshot():
        for key in store.named_in(_names(query), filters).values():
            _better(reached, key, Reached(1.0, "named in the query", key))
        nearest = [h for h in store.search("atoms", vector, SEED_ATOMS, filters)
                   if h.score > 0]
        for hit in nearest:  # (each entity weighed by the statement that names it)
            for key, _, _ in store.mentions(filters, atoms=[(hit.chunk_id, hit.text)]):
                _better(reached, key, Reached(DECAY * hit.score,
                                              "in a statement near the query", key))
        if not reached:
            return []
        # (a name is read only where a path may show it: an entity past COMMON is never
        # followed, and reading a hub's name reads all its mentions)
        known = {e.key: e for e in store.entities(filters, keys=sorted(reached),
                                                  top=len(reached), named_up_to=COMMON)}

        def leading(keys: Iterable[str]) -> list[str]:
            """Those of ``keys`` one may see named in at most :data:`COMMON` chunks."""
            return [k for k in keys if k in known and known[k].chunks <= COMMON]

        frontier = leading(reached)
        for _ in range(hops):
            step: set[str] = set()
            start = {k: reached[k] for k in frontier}  # (one relation per hop)
            for relation in store.relations(filters, keys=frontier, limit=20 * pool):
                for here, there, forwards in ((relation.subject, relation.object, True),
                                              (relation.object, relation.subject, False)):
                    if here in start:
                        way = start[here]
                        if _better(reached, there, Reached(
                                way.weight * DECAY, way.origin, way.seed,
                                (*way.steps, (relation.predicate, forwards, there)))):
                            step.add(there)
            fresh = sorted(step - set(known))
            if fresh:
                known.update({e.key: e for e in store.entities(
                    filters, keys=fresh, top=len(fresh), named_up_to=COMMON)})
            frontier = leading(step)
            if not frontier:
                break
        def weight(key: str) -> float:
            return reached[key].weight / (1 + math.log(known[key].chunks))

        # (the mentions of the best-weighted entities, as many as the reading allows: a
        # cut by rows stored first would drop a far entity's chunks for a hub's)
        read = 0
        taken: list[str] = []
        for key in sorted(leading(reached), key=lambda k: (-weight(k), k)):
            read += known[key].mentions
            if taken and read > MENTIONS * pool:
                break
            taken.append(key)
        named = store.mentions(filters, keys=taken, limit=MENTIONS * pool)
    names = {k: e.name for k, e in known.items()}
    best: dict[str, list[tuple[float, str]]] = {}
    for key, chunk, _ in named:
        best.setdefault(chunk, []).append((weight(key), key))
    ranked = sorted(((chunk, sorted(set(ways), reverse=True)) for chunk, ways in best.items()),
                    key=lambda x: best_first(x[1][0][0], x[0]))[:pool]
    # (a path spelt out only for the best ways to each chunk kept)
    return [(chunk, ways[0][0], [Hit("chunks", chunk, w, reached[key].shown(names))
                                 for w, key in ways[:SHOWN_PATHS]]) for chunk, ways in ranked]
