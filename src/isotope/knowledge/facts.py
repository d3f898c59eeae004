"""The facts of a chunk: the entities it names and the relations it states, as the
question model writes them (setting ``graph``, prompt ``graph``), each given to the atoms
that name it; and the key that merges two names of one entity.

The reply's format::

    Entities: Frédéric Chopin (person, also Chopin); Warsaw (place)
    Relations: Frédéric Chopin | born in | Warsaw

A section's items may also follow its header on lines of their own, and entities may be
separated by commas (small models do both).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from isotope.models import Atom

MAX_NAME = 80
"""Longest entity name kept (characters); a longer one is a sentence, not a name."""
MAX_WORDS = 10
MAX_HOPS = 3
"""Farthest a neighbourhood reaches (relations away from its entity)."""
_ARTICLE = re.compile(r"^(?:the|a|an)\s+")
_ENTITIES = re.compile(r"^\W*entit(?:y|ies)\W*:\s*(.*)$", re.I)
_RELATIONS = re.compile(r"^\W*relations?\W*:\s*(.*)$", re.I)
_ITEM = re.compile(r"^(?P<name>[^()]+?)\s*(?:\((?P<inner>[^()]*)\))?\s*$")
_ALSO = re.compile(r"^\s*(?:also|aka|or)\s+", re.I)
_NONE = {"", "none", "n/a", "-", "no entities", "no relations"}


def entity_key(name: str) -> str:
    """The key two names of one entity share: accents, case, punctuation and a leading
    article dropped ("The Eiffel Tower", "eiffel tower." and "Eiffel-Tower" are one)."""
    text = unicodedata.normalize("NFKD", name)
    text = "".join(c for c in text if not unicodedata.combining(c)).casefold()
    text = re.sub(r"[^\w]+", " ", text).strip()
    return _ARTICLE.sub("", text)


@dataclass
class AtomFacts:
    """What the model named in one atom: entities as (name, type), relations as
    (subject, predicate, object) names, and aliases as (alias, name). Read back from a
    store (``keyed``), relations and aliases name their entities by key, which is kept
    as it is: a key made again may differ ("A An Post" is ``an post``, and ``an post``
    would become ``post``)."""

    atom_id: str = ""
    chunk_id: str = ""
    entities: list[tuple[str, str]] = field(default_factory=list)
    relations: list[tuple[str, str, str]] = field(default_factory=list)
    aliases: list[tuple[str, str]] = field(default_factory=list)
    keyed: bool = False

    def __bool__(self) -> bool:
        return bool(self.entities or self.relations)


def _name(text: str) -> str | None:
    name = re.sub(r"\s+", " ", text).strip().strip("\"'`*_.,;:").strip()
    if (not name or len(name) > MAX_NAME or len(name.split()) > MAX_WORDS
            or name.lower() in _NONE or not entity_key(name)):
        return None
    return name


def parse_facts(reply: str) -> AtomFacts:
    """The entities, relations and aliases in a model's reply (the lines ``Entities:``
    and ``Relations:``); anything malformed is skipped, never guessed. The subject and
    object of a relation are entities too (type ``thing`` when not listed)."""
    facts = AtomFacts()
    seen: dict[str, int] = {}

    def entity(name: str, kind: str) -> None:
        key = entity_key(name)
        if key in seen:
            if kind and facts.entities[seen[key]][1] == "thing":
                facts.entities[seen[key]] = (facts.entities[seen[key]][0], kind)
            return
        seen[key] = len(facts.entities)
        facts.entities.append((name, kind or "thing"))

    def entities_of(text: str) -> None:
        # (items end at a semicolon, or at a comma after a type; a list with no types at
        # all at every comma)
        split = r";|(?<=\))\s*," if "(" in text else r"[;,]"
        for item in re.split(split, text):
            match = _ITEM.match(item.strip().lstrip("-*• ").strip())
            if not match or _ALSO.match(match.group("name")):
                continue  # (an alias of nothing)
            if not (name := _name(match.group("name"))):
                continue
            inner = [p.strip() for p in (match.group("inner") or "").split(",")]
            kind = re.sub(r"[^\w ]+", "", inner[0]).strip().lower()[:30] if inner else ""
            if _ALSO.match(inner[0]):  # (an alias where the type should be)
                kind, inner = "", ["", *inner]
            entity(name, kind)
            for extra in inner[1:]:  # (only "also ...": "(person, composer)" is no alias)
                if (_ALSO.match(extra) and (alias := _name(_ALSO.sub("", extra)))
                        and entity_key(alias) != entity_key(name)):
                    facts.aliases.append((alias, name))

    def relations_of(text: str) -> None:
        for item in text.split(";"):
            parts = [p.strip().lstrip("-*• ").strip() for p in item.split("|")]
            if len(parts) != 3:
                continue
            subject, obj = _name(parts[0]), _name(parts[2])
            predicate = re.sub(r"\s+", " ", parts[1]).strip(" .").lower()
            if not (subject and obj and predicate) or len(predicate) > 60:
                continue
            if entity_key(subject) == entity_key(obj):
                continue
            entity(subject, "")
            entity(obj, "")
            facts.relations.append((subject, predicate, obj))

    # a section's items follow its header on the same line, or on the lines below it
    # until a blank line, another header or a question
    section: Callable[[str], None] | None = None
    for line in reply.splitlines():
        if found := _ENTITIES.match(line):
            section = entities_of
        elif found := _RELATIONS.match(line):
            section = relations_of
        elif section is not None and line.strip() and "?" not in line and not re.match(
                r"^\W*questions?\W*:", line, re.I):
            section(line)
            continue
        else:
            section = None
            continue
        section(found.group(1))
    return facts


def _words(text: str) -> list[str]:
    return entity_key(text).split()


def _runs(words: list[str], name: list[str]) -> list[range]:
    """Where ``name`` (words) appears in ``words`` as a run."""
    n = len(name)
    return [range(i, i + n) for i in range(len(words) - n + 1) if n and words[i:i + n] == name]


def attribute(facts: AtomFacts, atoms: Sequence[Atom]) -> list[AtomFacts]:
    """A chunk's facts given to its atoms: an entity to every atom naming it (or one of
    its aliases, or a person's surname) outside a longer name ("Paris" inside
    "University of Paris" names the university), a relation to the first atom naming
    both its ends (else one of them). An entity no atom names is left out (the model made
    it up, or changed its name), and so is a relation with an end left out."""
    facts, surnames = _surnames(facts)
    also: dict[str, list[list[str]]] = {}
    for alias, name in [*facts.aliases, *surnames.items()]:
        also.setdefault(entity_key(name), []).append(_words(alias))
    forms = sorted(((len(form), entity_key(name), form) for name, _ in facts.entities
                    for form in [_words(name), *also.get(entity_key(name), [])] if form),
                   reverse=True)
    where: dict[str, set[int]] = {}
    for i, atom in enumerate(atoms):
        words, taken = _words(atom.text), set[int]()
        for _, key, form in forms:  # (longest first: a shorter name inside it is its part)
            for run in _runs(words, form):
                if not taken & set(run):
                    taken |= set(run)
                    where.setdefault(key, set()).add(i)
    out = [AtomFacts(a.id, a.chunk_id) for a in atoms]
    for name, kind in facts.entities:
        for i in sorted(where.get(entity_key(name), ())):
            out[i].entities.append((name, kind))
    for s, p, o in facts.relations:
        ends = where.get(entity_key(s), set()), where.get(entity_key(o), set())
        if ends[0] and ends[1]:
            out[min(ends[0] & ends[1] or ends[0] | ends[1])].relations.append((s, p, o))
    for alias, name in facts.aliases:
        if where.get(entity_key(name)):
            out[min(where[entity_key(name)])].aliases.append((alias, name))
    return out


def _surnames(facts: AtomFacts) -> tuple[AtomFacts, dict[str, str]]:
    """The facts with a one-word name that is the surname of exactly one person of the
    chunk ("Utzon" beside "Jørn Utzon") read as that person and kept as their alias;
    and each such person by surname (their surname alone names them in an atom). Places
    and organisations are left alone ("Paris" is not the "University of Paris")."""
    people: dict[str, list[str]] = {}
    for name, kind in facts.entities:
        words = _words(name)
        if kind == "person" and len(words) > 1:
            people.setdefault(words[-1], []).append(name)
    kinds = {entity_key(n): k for n, k in facts.entities}
    surnames = {key: found[0] for key, found in people.items()
                if len(found) == 1 and kinds.get(key, "thing") in ("person", "thing")}
    renamed = {n: surnames[entity_key(n)] for n, _ in facts.entities
               if entity_key(n) in surnames}
    if not renamed:
        return facts, surnames

    def named(name: str) -> str:
        return renamed.get(name, name)

    return AtomFacts(
        facts.atom_id, facts.chunk_id,
        [(n, k) for n, k in facts.entities if n not in renamed],
        [(named(s), p, named(o)) for s, p, o in facts.relations
         if entity_key(named(s)) != entity_key(named(o))],
        facts.aliases + list(renamed.items())), surnames


@dataclass
class GraphEntity:
    """An entity as one principal sees it: its name and type (the most frequent among
    the mentions they may see), in how many chunks and how many times it is named."""

    key: str
    name: str
    type: str
    chunks: int = 0
    mentions: int = 0


@dataclass
class GraphRelation:
    """A relation (entity keys) and the chunks that state it (those one may see)."""

    subject: str
    predicate: str
    object: str
    chunks: list[str] = field(default_factory=list)


@dataclass
class Neighbourhood:
    """An entity and what is up to ``hops`` relations away from it."""

    center: GraphEntity
    hops: int
    entities: list[GraphEntity] = field(default_factory=list)
    relations: list[GraphRelation] = field(default_factory=list)
    truncated: bool = False
    """More relations were within reach than the limit let in."""

    def to_json(self) -> dict[str, Any]:
        """``center``, ``hops``, ``entities``, ``relations`` (entity keys, with the
        ``chunks`` that state each) and ``truncated``: what ``isotope graph --json`` and
        ``GET /graph`` give."""
        return {"center": asdict(self.center), "hops": self.hops,
                "entities": [asdict(e) for e in self.entities],
                "relations": [asdict(r) for r in self.relations],
                "truncated": self.truncated}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Neighbourhood:
        return cls(GraphEntity(**data["center"]), data["hops"],
                   [GraphEntity(**e) for e in data["entities"]],
                   [GraphRelation(**r) for r in data["relations"]], data["truncated"])
