"""The knowledge graph of an SQL store, written once for both engines: the entities and
relations named in atoms (:mod:`isotope.knowledge.facts`), stored with their chunk and
merged by key, and read back only through chunks the reader may see (the filter
conditions of every search: a hidden source's entities, mentions, relations and aliases
count nowhere)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from isotope.knowledge.facts import (
    AtomFacts,
    GraphEntity,
    GraphRelation,
    Neighbourhood,
    entity_key,
)
from isotope.models import Condition
from isotope.stores.parts import Graph

if TYPE_CHECKING:
    from isotope.stores.sql_dialect import Dialect

_SEEN = "JOIN chunks c ON c.id = {t}.chunk_id JOIN sources s ON s.uri = c.source"
MAX_RELATIONS = 500
"""Most relations one neighbourhood reads per hop (it says it was cut)."""
CANDIDATES = 200
"""Most entities :meth:`SQLGraph.closest_entities` weighs (those sharing most pieces of
the name)."""
GRAPH_TABLES = ("mentions", "relations", "entity_aliases")
"""The graph's tables, each row keyed by the chunk its fact was read from."""


class SQLGraph(Graph):
    """Entities, mentions and relations of an SQL store (a part of ``SQLStore``)."""

    @staticmethod
    def _seen(t: str, conditions: Sequence[Condition]) -> str:
        """The join that reads rows of table alias ``t`` through their chunk's source, for
        ``conditions`` to check; none when there are none (every row has its chunk: they
        go with it, ON DELETE CASCADE), which spares a hub entity's thousands of rows two
        lookups each."""
        return _SEEN.format(t=t) if conditions else ""

    dialect: Dialect
    # (the SQL store's own, see isotope.stores.sql_core)
    _rows: Callable[..., list[tuple[Any, ...]]]
    snapshot: Callable[[], AbstractContextManager[None]]
    conditions_sql: Callable[[Sequence[Condition]], tuple[str, list[Any]]]

    # -- writes (inside the store's write transactions) --------------------------------
    def _add_facts(self, conn: Any, facts: Sequence[AtomFacts]) -> None:
        """Store atoms' facts, each mention and relation under its entity's key and the
        aliases the chunk named. Nothing stored for another chunk changes: an alias is
        read (by :meth:`resolve_entity`) only by who may see the chunk that named it,
        and merging other sources' rows under it would show them that chunk's names."""
        if not facts:
            return
        d = self.dialect
        cursor = conn.cursor()

        def keys(f: AtomFacts, *names: str) -> tuple[str, ...]:
            return names if f.keyed else tuple(entity_key(n) for n in names)

        cursor.executemany(
            f"INSERT INTO entity_aliases(alias, entity, chunk_id) VALUES ({d.mark}, {d.mark}, "
            f"{d.mark}) ON CONFLICT DO NOTHING",
            [(*pair, f.chunk_id) for f in facts for alias, name in f.aliases
             if (pair := keys(f, alias, name))[0] and pair[0] != pair[1]])
        cursor.executemany(
            "INSERT INTO mentions(entity, name, type, atom_id, chunk_id) VALUES "
            f"({', '.join([d.mark] * 5)})",
            [(entity_key(name), d.text(name), d.text(kind), f.atom_id, f.chunk_id)
             for f in facts for name, kind in f.entities if entity_key(name)])
        cursor.executemany(
            "INSERT INTO relations(subject, predicate, object, atom_id, chunk_id) VALUES "
            f"({', '.join([d.mark] * 5)})",
            [(ends[0], d.text(p), ends[1], f.atom_id, f.chunk_id)
             for f in facts for s, p, o in f.relations
             if (ends := keys(f, s, o))[0] and ends[1] and ends[0] != ends[1]])

    def _drop_facts(self, conn: Any, chunk_id: str) -> None:
        for table in GRAPH_TABLES:
            conn.execute(f"DELETE FROM {table} WHERE chunk_id = {self.dialect.mark}",
                         (chunk_id,))

    def _facts_of(self, chunk_ids: Sequence[str]) -> dict[str, list[AtomFacts]]:
        """What was stored for the atoms of these chunks (to carry over a reused chunk,
        or to copy a source), by chunk; relations name their entities by key."""
        if not chunk_ids:
            return {}
        d = self.dialect
        facts: dict[tuple[str, str], AtomFacts] = {}

        def of(chunk: str, atom: str) -> AtomFacts:
            return facts.setdefault((chunk, atom), AtomFacts(atom, chunk, keyed=True))

        for chunk, atom, name, kind in self._rows(
                f"SELECT chunk_id, atom_id, name, type FROM mentions WHERE "
                f"{d.any_of('chunk_id')} ORDER BY {d.row}", (d.many(list(chunk_ids)),)):
            of(chunk, atom).entities.append((name, kind))
        for chunk, atom, s, p, o in self._rows(
                f"SELECT chunk_id, atom_id, subject, predicate, object FROM relations WHERE "
                f"{d.any_of('chunk_id')} ORDER BY {d.row}", (d.many(list(chunk_ids)),)):
            of(chunk, atom).relations.append((s, p, o))
        out: dict[str, list[AtomFacts]] = {}
        for (chunk, _), f in facts.items():
            out.setdefault(chunk, []).append(f)
        for chunk, alias, entity in self._rows(
                f"SELECT chunk_id, alias, entity FROM entity_aliases WHERE "
                f"{d.any_of('chunk_id')}", (d.many(list(chunk_ids)),)):
            if chunk in out:  # (kept with the chunk's first atom)
                out[chunk][0].aliases.append((alias, entity))
        return out

    # -- reads -------------------------------------------------------------------------
    def resolve_entity(self, name: str, conditions: Sequence[Condition] = ()) -> str:
        key = entity_key(name)
        return self.named_in([key], conditions).get(key, key)

    def entities(self, conditions: Sequence[Condition] = (), *, top: int = 20,
                 keys: Sequence[str] | None = None, match: str | None = None,
                 chunk: str | None = None, named_up_to: int | None = None
                 ) -> list[GraphEntity]:
        if keys is not None and not keys:
            return []
        with self.snapshot():
            counted: list[tuple[str, int, int]] = []
            if named_up_to is not None and keys is not None and chunk is None and not match:
                keys, counted = self._hubs(conditions, keys, named_up_to)
            if keys is None or keys:
                counted += self._counted(conditions, top, keys, match, chunk)
            counted = counted[:top]
            chosen = [r[0] for r in counted if named_up_to is None or r[1] <= named_up_to]
            names = self._names(conditions, chosen)
        named: dict[str, Counter[str]] = {}
        typed: dict[str, Counter[str]] = {}
        for key, name, kind, n in names:
            named.setdefault(key, Counter())[name] += n
            if kind != "thing":
                typed.setdefault(key, Counter())[kind] += n
        return [GraphEntity(key, _most(named.get(key)) or key,
                            _most(typed.get(key)) or "thing", chunks, mentions)
                for key, chunks, mentions in counted]

    def _hubs(self, conditions: Sequence[Condition], keys: Sequence[str], most: int
              ) -> tuple[list[str], list[tuple[str, int, int]]]:
        """Those of ``keys`` one may see named in 1 to ``most`` chunks, and the others
        one may see (named in more) as (key, chunks, mentions) counted only that far
        (``most + 1``): counting a hub reads every one of its mentions, thousands for
        "the"."""
        d, over = self.dialect, int(most) + 1
        clause, params = self.conditions_sql(conditions)
        found = self._rows(
            f"SELECT k.value, (SELECT count(*) FROM (SELECT DISTINCT m.chunk_id FROM mentions "
            f"m {self._seen('m', conditions)} WHERE m.entity = k.value AND {clause} LIMIT "
            f"{over}) AS x) FROM {d.each('k')}", (*params, d.many(sorted(set(keys)))))
        return ([key for key, n in found if 0 < n < over],
                [(key, over, over) for key, n in sorted(found) if n >= over])

    def _counted(self, conditions: Sequence[Condition], top: int,
                 keys: Sequence[str] | None, match: str | None, chunk: str | None
                 ) -> list[tuple[str, int, int]]:
        """(key, chunks, mentions) of the entities :meth:`entities` reads, most chunks
        first."""
        d = self.dialect
        clause, params = self.conditions_sql(conditions)
        where, extra = [clause], list(params)
        if chunk is not None:  # (the chunk itself must be one the reader may see)
            where.append(f"m.entity IN (SELECT n.entity FROM mentions n "
                         f"{self._seen('n', conditions)} WHERE n.chunk_id = {d.mark} AND {clause})")
            extra += [chunk, *params]
        if keys is not None:
            where.append(d.any_of("m.entity"))
            extra.append(d.many(list(keys)))
        if match:
            # (the Memory server's search_nodes: a name, a type or an observation; the
            # counts stay those of every mention one may see)
            def like(text: str) -> str:
                return "%" + re.sub(r"([\\%_])", r"\\\1", text) + "%"

            has = f"LIKE {d.mark} ESCAPE '\\'"
            # the text as it is, or its key ("Eiffel-Tower": "eiffel tower"); a text of
            # punctuation alone ("%", "\\") has an empty key, which would match every
            # entity: then only the text itself
            folded = entity_key(match)
            by_key = f"n.entity {has} OR " if folded else ""
            where.append(
                f"m.entity IN (SELECT n.entity FROM mentions n {self._seen('n', conditions)} WHERE "
                f"{clause} AND ({d.lower}(n.name) {has} OR {d.lower}(n.type) {has} OR "
                f"{by_key}EXISTS (SELECT 1 FROM atoms a WHERE a.id = n.atom_id AND "
                f"a.chunk_id = n.chunk_id AND {d.lower}(a.text) {has})))")
            lowered = like(match.lower())
            extra += [*params, lowered, lowered, *([like(folded)] if folded else []), lowered]
        return [(key, int(chunks), int(mentions)) for key, chunks, mentions in self._rows(
            f"SELECT m.entity, count(DISTINCT m.chunk_id), count(*) FROM mentions m "
            f"{self._seen('m', conditions)} WHERE {' AND '.join(where)} GROUP BY m.entity "
            f"ORDER BY 2 DESC, 3 DESC, m.entity{d.binary_order} LIMIT {int(top)}", extra)]

    def _names(self, conditions: Sequence[Condition], keys: Sequence[str]
               ) -> list[tuple[str, str, str, int]]:
        """(key, name, type, mentions) of each name and type ``keys`` are given in chunks
        one may see."""
        if not keys:
            return []
        d = self.dialect
        clause, params = self.conditions_sql(conditions)
        return self._rows(
            f"SELECT m.entity, m.name, m.type, count(*) FROM mentions m "
            f"{self._seen('m', conditions)} WHERE {clause} AND {d.any_of('m.entity')} "
            f"GROUP BY m.entity, m.name, m.type", (*params, d.many(list(keys))))

    def relations(self, conditions: Sequence[Condition] = (), *,
                  keys: Sequence[str] | None = None, limit: int | None = None
                  ) -> list[GraphRelation]:
        d = self.dialect
        if keys is not None and not keys:
            return []
        clause, params = self.conditions_sql(conditions)

        def seen(t: str) -> tuple[str, list[Any]]:
            """Relations (alias ``t``) stated in a chunk one may see, with an end in
            ``keys`` when given."""
            if keys is None:
                return (f"FROM relations {t} {self._seen(t, conditions)} WHERE {clause}",
                        list(params))
            return (f"FROM relations {t} {self._seen(t, conditions)} WHERE {clause} AND "
                    f"({d.any_of(f'{t}.subject')} OR {d.any_of(f'{t}.object')})",
                    [*params, d.many(sorted(keys)), d.many(sorted(keys))])

        where, extra = seen("r")
        if limit is not None:  # (the first ``limit`` relations, each with all its chunks)
            first, more = seen("q")
            where += (f" AND (r.subject, r.predicate, r.object) IN (SELECT q.subject, "
                      f"q.predicate, q.object {first} GROUP BY q.subject, q.predicate, "
                      f"q.object ORDER BY min(q.{d.row}) LIMIT {int(limit)})")
            extra += more
        found: dict[tuple[str, str, str], GraphRelation] = {}
        for s, p, o, chunk in self._rows(
                f"SELECT r.subject, r.predicate, r.object, r.chunk_id {where} "
                f"ORDER BY r.{d.row}", extra):
            relation = found.setdefault((s, p, o), GraphRelation(s, p, o))
            if chunk not in relation.chunks:
                relation.chunks.append(chunk)
        return list(found.values())

    def neighbourhood(self, name: str, conditions: Sequence[Condition] = (), *,
                      hops: int = 1, limit: int = MAX_RELATIONS) -> Neighbourhood | None:
        with self.snapshot():
            key = self.resolve_entity(name, conditions)
            found = self.entities(conditions, keys=[key], top=1)
            if not found:
                return None
            reached, frontier = {key}, {key}
            relations: dict[tuple[str, str, str], GraphRelation] = {}
            truncated = False
            for _ in range(hops):
                if not frontier:
                    break
                step = self.relations(conditions, keys=sorted(frontier), limit=limit + 1)
                truncated |= len(step) > limit
                for relation in step[:limit]:
                    relations.setdefault((relation.subject, relation.predicate,
                                          relation.object), relation)
                ends = {e for r in step[:limit] for e in (r.subject, r.object)}
                frontier = ends - reached
                reached |= ends
            entities = self.entities(conditions, keys=sorted(reached), top=len(reached))
        return Neighbourhood(found[0], hops, entities, list(relations.values()), truncated)

    def closest_entities(self, name: str, conditions: Sequence[Condition] = (), *,
                         top: int = 5) -> list[str]:
        # candidates: the entities one may see (the conditions are in the query) whose key
        # holds a word of the name, or a word's first or last four letters (a typo), most
        # such pieces first; then the closest of them by their letters and words
        wanted = entity_key(name)
        if not wanted or top < 1:
            return []
        pieces = sorted({wanted} | {p for w in wanted.split() if len(w) >= 3
                                    for p in (w, w[:4], w[-4:])})
        d = self.dialect
        clause, params = self.conditions_sql(conditions)
        has = f"m.entity LIKE {d.mark} ESCAPE '\\'"
        likes = ["%" + re.sub(r"([\\%_])", r"\\\1", p) + "%" for p in pieces]
        hits = " + ".join(f"CASE WHEN {has} THEN 1 ELSE 0 END" for _ in likes)
        with self.snapshot():
            keys = [key for key, _ in self._rows(
                f"SELECT m.entity, {hits} FROM mentions m {self._seen('m', conditions)} "
                f"WHERE {clause} AND ({' OR '.join([has] * len(likes))}) GROUP BY m.entity "
                f"ORDER BY 2 DESC, m.entity{d.binary_order} LIMIT {CANDIDATES}",
                (*likes, *params, *likes))]
            ranked = sorted(((s, k) for k in keys if (s := _closeness(wanted, k)) >= 0.6),
                            key=lambda pair: (-pair[0], pair[1]))[:top]
            names: dict[str, Counter[str]] = {}
            for key, shown, _, n in self._names(conditions, [k for _, k in ranked]):
                names.setdefault(key, Counter())[shown] += n
        return [_most(names.get(key)) or key for _, key in ranked]

    def named_in(self, keys: Sequence[str], conditions: Sequence[Condition] = ()
                 ) -> dict[str, str]:
        d = self.dialect
        if not keys:
            return {}
        clause, params = self.conditions_sql(conditions)
        seen = (f"FROM mentions m {self._seen('m', conditions)} WHERE {d.any_of('m.entity')} "
                f"AND {clause}")
        with self.snapshot():
            found = {k: k for (k,) in self._rows(f"SELECT DISTINCT m.entity {seen}",
                                                 (d.many(list(keys)), *params))}
            rest = [k for k in keys if k not in found]
            aliased = sorted(self._rows(
                f"SELECT x.alias, x.entity FROM entity_aliases x "
                f"{self._seen('x', conditions)} WHERE {d.any_of('x.alias')} AND {clause}",
                (d.many(rest), *params))) if rest else []
            named = {e for (e,) in self._rows(f"SELECT DISTINCT m.entity {seen}", (
                d.many(sorted({e for _, e in aliased})), *params))} if aliased else set()
        for alias, entity in aliased:  # (the first in order, of those one may see)
            if entity in named:
                found.setdefault(alias, entity)
        return found

    def mentions(self, conditions: Sequence[Condition] = (), *,
                 keys: Sequence[str] = (), atoms: Sequence[tuple[str, str]] = (),
                 limit: int = 1000) -> list[tuple[str, str, str]]:
        d = self.dialect
        clause, params = self.conditions_sql(conditions)
        found: list[tuple[str, str, str]] = []
        if keys:
            found += [(r[0], r[1], r[2]) for r in self._rows(
                f"SELECT m.entity, m.chunk_id, m.atom_id FROM mentions m "
                f"{self._seen('m', conditions)} WHERE {d.any_of('m.entity')} AND {clause} "
                f"ORDER BY m.{d.row} LIMIT {int(limit)}", (d.many(list(keys)), *params))]
        if atoms:
            wanted = set(atoms)
            rows = self._rows(
                f"SELECT m.entity, m.chunk_id, m.atom_id, a.text FROM mentions m JOIN atoms a "
                f"ON a.id = m.atom_id AND a.chunk_id = m.chunk_id {self._seen('m', conditions)} "
                f"WHERE {d.any_of('m.chunk_id')} AND {clause} ORDER BY m.{d.row}",
                (d.many(sorted({c for c, _ in atoms})), *params))
            found += [(e, c, a) for e, c, a, text in rows if (c, text) in wanted]
        return found

    def observations(self, keys: Sequence[str], conditions: Sequence[Condition] = (), *,
                     per_entity: int = 20) -> dict[str, list[str]]:
        """The statements (atom texts) naming each entity, as a reader may see them."""
        if not keys:
            return {}
        d = self.dialect
        clause, params = self.conditions_sql(conditions)
        out: dict[str, list[str]] = {}
        for key, text in self._rows(
                f"SELECT DISTINCT m.entity, a.text FROM mentions m JOIN atoms a ON a.id = "
                f"m.atom_id AND a.chunk_id = m.chunk_id {self._seen('m', conditions)} WHERE "
                f"{clause} AND {d.any_of('m.entity')} ORDER BY m.entity, a.text",
                (*params, d.many(list(keys)))):
            if len(out.setdefault(key, [])) < per_entity:
                out[key].append(text)
        return out


def _closeness(wanted: str, key: str) -> float:
    """How close an entity's key is to a name's (0 to 1): the share of the shorter one's
    words the other holds, or the likeness of their letters, whichever is more."""
    from difflib import SequenceMatcher

    words, other = set(wanted.split()), set(key.split())
    shared = len(words & other) / min(len(words), len(other))
    return max(shared, SequenceMatcher(None, wanted, key).ratio())


def _most(counts: Counter[str] | None) -> str:
    """The most frequent value, ties to the shortest, then the first in order."""
    if not counts:
        return ""
    return min(counts, key=lambda v: (-counts[v], len(v), v))
