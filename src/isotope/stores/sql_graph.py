"""The knowledge graph of an SQL store, written once for both engines: the entities and
relations named in atoms (:mod:`isotope.knowledge.facts`), stored with their chunk, merged
by key and alias, and read back only through chunks the reader may see (the filter
conditions of every search: a hidden source's entities, mentions and relations count
nowhere)."""

from __future__ import annotations

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


class SQLGraph(Graph):
    """Entities, mentions and relations of an SQL store (a part of ``SQLStore``)."""

    dialect: Dialect
    # (the SQL store's own, see isotope.stores.sql_core)
    _rows: Callable[..., list[tuple[Any, ...]]]
    snapshot: Callable[[], AbstractContextManager[None]]
    conditions_sql: Callable[[Sequence[Condition]], tuple[str, list[Any]]]

    # -- writes (inside the store's write transactions) --------------------------------
    def _add_facts(self, conn: Any, facts: Sequence[AtomFacts]) -> None:
        """Store atoms' facts: aliases first (merging what was stored under the alias),
        then each mention and relation under its entity's key."""
        if not facts:
            return
        d = self.dialect
        aliases = [(a, f.chunk_id) for f in facts for a in f.aliases]
        resolved: dict[str, str] = {}

        def resolve(name: str) -> str:
            key = entity_key(name)
            if key not in resolved:
                row = conn.execute(f"SELECT entity FROM entity_aliases WHERE alias = {d.mark}"
                                   " LIMIT 1", (key,)).fetchone()
                resolved[key] = row[0] if row else key
            return resolved[key]

        for (alias, name), chunk in aliases:
            source, target = entity_key(alias), resolve(name)
            if not source or source == target:
                continue
            if resolve(alias) != source and resolve(alias) != target:
                continue  # (the alias already names another entity: the first stays)
            conn.execute(f"INSERT INTO entity_aliases(alias, entity, chunk_id) VALUES "
                         f"({d.mark}, {d.mark}, {d.mark}) ON CONFLICT DO NOTHING",
                         (source, target, chunk))
            for sql in ("UPDATE entity_aliases SET entity = {m} WHERE entity = {m}",
                        "UPDATE mentions SET entity = {m} WHERE entity = {m}",
                        "UPDATE relations SET subject = {m} WHERE subject = {m}",
                        "UPDATE relations SET object = {m} WHERE object = {m}"):
                conn.execute(sql.format(m=d.mark), (target, source))
            resolved[source] = target
        cursor = conn.cursor()
        cursor.executemany(
            "INSERT INTO mentions(entity, name, type, atom_id, chunk_id) VALUES "
            f"({', '.join([d.mark] * 5)})",
            [(resolve(name), d.text(name), d.text(kind), f.atom_id, f.chunk_id)
             for f in facts for name, kind in f.entities])
        cursor.executemany(
            "INSERT INTO relations(subject, predicate, object, atom_id, chunk_id) VALUES "
            f"({', '.join([d.mark] * 5)})",
            [(resolve(s), d.text(p), resolve(o), f.atom_id, f.chunk_id)
             for f in facts for s, p, o in f.relations if resolve(s) != resolve(o)])

    def _drop_facts(self, conn: Any, chunk_id: str) -> None:
        for table in ("mentions", "relations", "entity_aliases"):
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
            return facts.setdefault((chunk, atom), AtomFacts(atom, chunk))

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
        d = self.dialect
        key = entity_key(name)
        clause, params = self.conditions_sql(conditions)
        row = self._rows(f"SELECT x.entity FROM entity_aliases x {_SEEN.format(t='x')} "
                         f"WHERE x.alias = {d.mark} AND {clause} LIMIT 1", (key, *params))
        return row[0][0] if row else key

    def entities(self, conditions: Sequence[Condition] = (), *, top: int = 20,
                 keys: Sequence[str] | None = None, match: str | None = None
                 ) -> list[GraphEntity]:
        d = self.dialect
        clause, params = self.conditions_sql(conditions)
        where, extra = [clause], list(params)
        if keys is not None:
            if not keys:
                return []
            where.append(d.any_of("m.entity"))
            extra.append(d.many(list(keys)))
        if match:
            # (the Memory server's search_nodes: a name, a type or an observation; the
            # counts stay those of every mention one may see)
            like = f"%{match.lower()}%"
            where.append(
                f"m.entity IN (SELECT n.entity FROM mentions n {_SEEN.format(t='n')} WHERE "
                f"{clause} AND (lower(n.name) LIKE {d.mark} OR lower(n.type) LIKE {d.mark} "
                f"OR n.entity LIKE {d.mark} OR EXISTS (SELECT 1 FROM atoms a WHERE a.id = "
                f"n.atom_id AND lower(a.text) LIKE {d.mark})))")
            extra += [*params, *[like] * 4]
        seen = f"FROM mentions m {_SEEN.format(t='m')} WHERE {' AND '.join(where)}"
        with self.snapshot():
            counted = self._rows(
                f"SELECT m.entity, count(DISTINCT m.chunk_id), count(*) {seen} GROUP BY "
                f"m.entity ORDER BY 2 DESC, 3 DESC, 1 LIMIT {int(top)}", extra)
            chosen = [r[0] for r in counted]
            if not chosen:
                return []
            clause, params = self.conditions_sql(conditions)
            names = self._rows(
                f"SELECT m.entity, m.name, m.type, count(*) FROM mentions m "
                f"{_SEEN.format(t='m')} WHERE {clause} AND {d.any_of('m.entity')} "
                f"GROUP BY m.entity, m.name, m.type", (*params, d.many(chosen)))
        named: dict[str, Counter[str]] = {}
        typed: dict[str, Counter[str]] = {}
        for key, name, kind, n in names:
            named.setdefault(key, Counter())[name] += n
            if kind != "thing":
                typed.setdefault(key, Counter())[kind] += n
        return [GraphEntity(key, _most(named.get(key)) or key,
                            _most(typed.get(key)) or "thing", int(chunks), int(mentions))
                for key, chunks, mentions in counted]

    def relations(self, conditions: Sequence[Condition] = (), *,
                  keys: Sequence[str] | None = None, limit: int | None = None
                  ) -> list[GraphRelation]:
        d = self.dialect
        clause, params = self.conditions_sql(conditions)
        where, extra = clause, list(params)
        if keys is not None:
            if not keys:
                return []
            where += f" AND ({d.any_of('r.subject')} OR {d.any_of('r.object')})"
            extra += [d.many(sorted(keys)), d.many(sorted(keys))]
        cut = f" LIMIT {int(limit)}" if limit is not None else ""
        found: dict[tuple[str, str, str], GraphRelation] = {}
        for s, p, o, chunk in self._rows(
                f"SELECT r.subject, r.predicate, r.object, r.chunk_id FROM relations r "
                f"{_SEEN.format(t='r')} WHERE {where} ORDER BY r.{d.row}{cut}", extra):
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
                f"m.atom_id {_SEEN.format(t='m')} WHERE {clause} AND "
                f"{d.any_of('m.entity')} ORDER BY m.entity, a.text",
                (*params, d.many(list(keys)))):
            if len(out.setdefault(key, [])) < per_entity:
                out[key].append(text)
        return out


def _most(counts: Counter[str] | None) -> str:
    """The most frequent value, ties to the shortest, then the first in order."""
    if not counts:
        return ""
    return min(counts, key=lambda v: (-counts[v], len(v), v))
