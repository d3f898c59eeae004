"""Question generation: which calls to make and how to read their replies.

Modes (setting ``generation``):
- ``atom``: one call per atom; the chunk comes first in every prompt, so a local model's
  cache reuses it between the atoms of one chunk.
- ``chunk``: one structured call per chunk: the statements are numbered and the model
  returns a JSON object of questions per statement number (constrained to that schema
  where the provider supports it), so the chunk is sent once; the questions keep their
  atom. Statements the reply leaves out are asked again one by one.
- ``batched``: the local model decodes one reply per atom for many atoms of many chunks
  at once (continuous batching in llama.cpp). The chunk is given with its statements
  numbered, so the prompts of one chunk differ only in the number asked about: the
  chunk is evaluated once and each atom adds a few tokens. Other providers use ``atom``.

A reply with no usable question (empty, not in the format, cut off) is retried with a
repair message at most ``max_repairs`` times; after that the atom is reported and skipped.

With ``graph``, each chunk also gets one prompt for its entities and relations
(:mod:`isotope.knowledge.facts`), sent with its question prompts: in batched decoding it
is one more sequence of the same call, sharing the chunk's evaluated prefix (its system
text is the numbered question prompts'). Each entity and relation goes to the atoms that
name it. Asking every atom's call for its facts as well was tried first: the local model
listed the whole passage's entities in every reply (``benchmarks/history/``).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from isotope.ingest.language import in_language, language_of
from isotope.ingest.questions import SYSTEM, parse_questions, question_prompt
from isotope.knowledge.facts import AtomFacts, attribute, parse_facts
from isotope.models import Atom, Chunk
from isotope.prompts import PROMPTS, PromptSpec
from isotope.providers import LLM, BatchGenerationError, Limits, Prompt

log = logging.getLogger(__name__)
Mode = Literal["atom", "chunk", "batched"]
CHUNK_PROMPT_VERSION = PROMPTS["questions-chunk"].version
NUMBERED_PROMPT_VERSION = PROMPTS["questions-numbered"].version
QUESTION_TOKENS = 40
FACTS_TOKENS = 400
"""The most tokens of a chunk's facts reply (``graph``): its own budget, not the
questions' (cut at 200, a fifth of the replies of a benchmark run lost relations)."""
FACTS_LIMITS = Limits(FACTS_TOKENS, 0)
"""How a facts reply ends in batched decoding: by its tokens only (not at question marks
or line breaks, as a question reply does)."""


@dataclass
class Generated:
    """Questions per atom for one chunk, and the atoms that failed."""

    questions: list[list[str]]
    failed: dict[int, str] = field(default_factory=dict)
    calls: int = 0
    facts: list[AtomFacts] = field(default_factory=list)
    """Per atom, the entities and relations it names (setting ``graph``; else empty)."""


def chunk_prompt(chunk: str, atoms: Sequence[str], n: int,
                 spec: PromptSpec = PROMPTS["questions-chunk"]) -> Prompt:
    listing = "\n".join(f"{i}. {a}" for i, a in enumerate(atoms, start=1))
    return in_language(spec.render(chunk=chunk, statements=listing, n=n, count=len(atoms)),
                       language_of(chunk))


def numbered_passage(chunk: Chunk, atoms: Sequence[Atom]) -> str:
    """The chunk with ``[n]`` before its n-th atom (atoms the LLM atomizer rewrote, which
    have no offsets, are listed after the chunk instead)."""
    if any(a.start is None for a in atoms):
        listing = "\n".join(f"[{i}] {a.text}" for i, a in enumerate(atoms, start=1))
        return f"{chunk.text}\n\nStatements:\n{listing}"
    text, last = [], 0
    for number, atom in sorted(enumerate(atoms, start=1), key=lambda x: x[1].start or 0):
        start = atom.start or 0
        text.append(f"{chunk.text[last:start]}[{number}] ")
        last = start
    return "".join(text) + chunk.text[last:]


def numbered_prompts(chunk: Chunk, atoms: Sequence[Atom], n: int,
                     spec: PromptSpec = PROMPTS["questions-numbered"]) -> list[Prompt]:
    """One prompt per atom; they differ only in the statement number at the end."""
    passage, language = numbered_passage(chunk, atoms), language_of(chunk.text)
    return [in_language(spec.render(passage=passage, n=n, number=number), language)
            for number in range(1, len(atoms) + 1)]


def facts_prompt(chunk: Chunk, atoms: Sequence[Atom],
                 spec: PromptSpec = PROMPTS["graph"]) -> Prompt:
    """The prompt for a chunk's entities and relations: the numbered passage as the
    numbered question prompts give it (sent with the same system text, batched decoding
    evaluates the chunk once for both)."""
    return spec.render(passage=numbered_passage(chunk, atoms))


def chunk_schema(count: int, n: int) -> dict[str, Any]:
    """JSON schema of a per-chunk reply: ``{"1": [n questions], ..., "count": [...]}``."""
    items = {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": n}
    keys = [str(i) for i in range(1, count + 1)]
    return {"type": "object", "properties": dict.fromkeys(keys, items), "required": keys}


def parse_chunk_reply(reply: str, count: int, n: int) -> list[list[str]]:
    """Questions per statement from a per-chunk reply: the JSON object asked for, or
    lines of the form ``3: question?`` when the model ignored the format."""
    out: list[list[str]] = [[] for _ in range(count)]
    data: Any = None
    match = re.search(r"\{.*\}", reply, re.S)
    if match:
        try:
            data = json.loads(match.group(0))
        except json.JSONDecodeError:
            data = None
    if isinstance(data, dict):
        for key, value in data.items():
            number = re.sub(r"\D", "", str(key))
            if number and 1 <= int(number) <= count:
                texts = value if isinstance(value, list) else [value]
                out[int(number) - 1] = parse_questions("\n".join(map(str, texts)), n)
        return out
    for line in reply.splitlines():
        found = re.match(r"^\s*(?:statement\s*)?(\d{1,3})\s*[:.)-]\s*(.+)$", line, re.I)
        if found and 1 <= int(found.group(1)) <= count:
            out[int(found.group(1)) - 1].extend(parse_questions(found.group(2), 1))
    return [qs[:n] for qs in out]


class QuestionGenerator:
    """Writes ``n`` questions per atom with ``llm`` in the given mode."""

    def __init__(self, llm: LLM, *, n: int, mode: Mode = "atom", temperature: float = 0.5,
                 max_repairs: int = 2, prompts: dict[str, PromptSpec] | None = None,
                 graph: bool = False) -> None:
        self.llm = llm
        self.prompts = prompts or PROMPTS
        self.n = n
        self.mode = mode
        self.temperature = temperature
        self.max_repairs = max_repairs
        self.graph = graph
        self.max_tokens = QUESTION_TOKENS * n + 40

    @property
    def batching(self) -> bool:
        """Mode ``batched`` with a model that decodes in batches (others use ``atom``)."""
        return self.mode == "batched" and _can_sample(self.llm)

    def window(self, concurrency: int) -> int:
        """How many atoms to hand :meth:`generate_many` at once to keep the model busy:
        two rounds of concurrent calls, or four fillings of batched decoding's slots."""
        if self.batching:
            return 4 * self.llm.batch_sequences
        return 2 * concurrency

    def plan(self, chunk: Chunk, atoms: Sequence[Atom]) -> tuple[list[Prompt], int]:
        """The first-round prompts this chunk needs, and how many of them the cache
        already answers (for dry runs)."""
        if not atoms:
            return [], 0
        kwargs: dict[str, Any] = {"max_tokens": self.max_tokens}
        if self.mode == "chunk":
            prompts = [chunk_prompt(chunk.text, [a.text for a in atoms], self.n,
                                    self.prompts["questions-chunk"])]
            kwargs = {"max_tokens": self.max_tokens * len(atoms),
                      "json_schema": chunk_schema(len(atoms), self.n)}
        elif self.batching:
            prompts = numbered_prompts(chunk, atoms, self.n, self.prompts["questions-numbered"])
            kwargs["batched"] = self.n
        else:
            prompts = [question_prompt(chunk.text, a.text, self.n, self.prompts["questions"])
                       for a in atoms]
        hits = self.llm.cached(prompts, temperature=self.temperature, **kwargs)
        if self.graph:
            facts = self._facts_prompt(chunk, atoms)
            hits += self.llm.cached([facts], temperature=self.temperature,
                                    max_tokens=FACTS_TOKENS,
                                    batched=0 if self.batching else None)
            prompts.append(facts)
        return prompts, sum(hits)

    def generate(self, chunk: Chunk, atoms: Sequence[Atom]) -> Generated:
        return self.generate_many([(chunk, atoms)])[0]

    def generate_many(self, groups: Sequence[tuple[Chunk, Sequence[Atom]]]) -> list[Generated]:
        """Questions for the atoms of several chunks. Their calls go to the model as one
        batch, so a remote provider runs them concurrently."""
        results = [Generated([[] for _ in atoms]) for _, atoms in groups]
        todo: list[tuple[int, int]] = []
        if self.mode == "chunk":
            todo = self._per_chunk(groups, results)
        elif self.batching:
            todo = self._batched(groups, results)
        else:
            todo = [(g, i) for g, (_, atoms) in enumerate(groups) for i in range(len(atoms))]
        if self.graph and not self.batching:
            self._facts(groups, results)
        self._per_atom(groups, todo, results)
        return results

    def _facts_prompt(self, chunk: Chunk, atoms: Sequence[Atom]) -> Prompt:
        return facts_prompt(chunk, atoms, self.prompts["graph"])

    def _read_facts(self, result: Generated, atoms: Sequence[Atom], reply: str | None) -> None:
        """A chunk's facts from its reply, given to the atoms that name them (a failed
        call leaves it without: the graph is not worth a retry)."""
        if reply is not None:
            result.facts = attribute(parse_facts(reply), atoms)

    def _facts(self, groups: Sequence[tuple[Chunk, Sequence[Atom]]],
               results: list[Generated]) -> None:
        """One call per chunk for its entities and relations (remote providers run them
        concurrently)."""
        asked = [g for g, (_, atoms) in enumerate(groups) if atoms]
        replies, _ = self._complete([self._facts_prompt(*groups[g]) for g in asked],
                                    FACTS_TOKENS)
        for g, reply in zip(asked, replies, strict=True):
            results[g].calls += 1
            self._read_facts(results[g], groups[g][1], reply)

    def _complete(self, prompts: list[Prompt], max_tokens: int,
                  **kwargs: Any) -> tuple[list[str | None], dict[int, str]]:
        """Replies (None where a call failed) and why each failed call failed."""
        try:
            return list(self.llm.complete_batch(prompts, max_tokens=max_tokens,
                                                temperature=self.temperature, **kwargs)), {}
        except BatchGenerationError as exc:
            return exc.results, exc.failures

    def _per_atom(self, groups: Sequence[tuple[Chunk, Sequence[Atom]]],
                  todo: list[tuple[int, int]], results: list[Generated]) -> None:
        """One call per atom for the (group, atom) pairs in ``todo``, with repairs."""
        prompts = {
            (g, i): question_prompt(groups[g][0].text, groups[g][1][i].text, self.n,
                                    self.prompts["questions"])
            for g, i in todo
        }
        for attempt in range(self.max_repairs + 1):
            if not todo:
                break
            for g, _ in todo:
                results[g].calls += 1
            replies, why = self._complete([prompts[t] for t in todo], self.max_tokens)
            retry: list[tuple[int, int]] = []
            for k, ((g, i), reply) in enumerate(zip(todo, replies, strict=True)):
                result = results[g]
                if reply is None:
                    result.failed[i] = f"the model call failed: {why.get(k, 'no reply')}"
                    continue
                questions = parse_questions(reply, self.n)
                if questions:
                    result.questions[i] = questions
                    result.failed.pop(i, None)
                elif attempt < self.max_repairs:
                    prompts[(g, i)] = [*prompts[(g, i)], {"role": "assistant", "content": reply},
                                       {"role": "user",
                                        "content": self.prompts["questions-repair"].text()}]
                    retry.append((g, i))
                else:
                    result.failed[i] = f"no question in the reply after {attempt + 1} tries"
            todo = retry

    def _per_chunk(self, groups: Sequence[tuple[Chunk, Sequence[Atom]]],
                   results: list[Generated]) -> list[tuple[int, int]]:
        """One structured call per chunk; returns the atoms the replies left out."""
        asked = [g for g, (_, atoms) in enumerate(groups) if atoms]
        missing: list[tuple[int, int]] = []
        # Chunks differ in atom count, so each call has its own schema and token budget.
        for g in asked:
            chunk, atoms = groups[g]
            results[g].calls += 1
            (reply,), _ = self._complete(
                [chunk_prompt(chunk.text, [a.text for a in atoms], self.n,
                              self.prompts["questions-chunk"])],
                self.max_tokens * len(atoms), json_schema=chunk_schema(len(atoms), self.n),
            )
            if reply is not None:
                results[g].questions = parse_chunk_reply(reply, len(atoms), self.n)
            left = [(g, i) for i, qs in enumerate(results[g].questions) if not qs]
            if left:
                log.info("chunk %s: %d statements left out of the reply; asking one by one",
                         chunk.id, len(left))
            missing.extend(left)
        return missing

    def _batched(self, groups: Sequence[tuple[Chunk, Sequence[Atom]]],
                 results: list[Generated]) -> list[tuple[int, int]]:
        """One reply per atom, all decoded together (local model); returns the atoms with
        no question, which are then asked one by one with repairs."""
        asked = [numbered_prompts(chunk, atoms, self.n, self.prompts["questions-numbered"])
                 + ([self._facts_prompt(chunk, atoms)] if self.graph and atoms else [])
                 for chunk, atoms in groups]
        # (each facts prompt, last of its chunk's, with its own limits)
        mine = Limits(self.max_tokens, self.n)
        limits = [[mine] * len(atoms) + [FACTS_LIMITS] * (len(p) - len(atoms))
                  for p, (_, atoms) in zip(asked, groups, strict=True)] if self.graph else None
        replies: list[list[str]] = self.llm.sample_batched(
            asked, max_tokens=self.max_tokens, temperature=self.temperature,
            questions=self.n, limits=limits)
        missing: list[tuple[int, int]] = []
        for g, per_atom in enumerate(replies):
            results[g].calls += len(per_atom)
            if self.graph and groups[g][1]:
                self._read_facts(results[g], groups[g][1], per_atom[-1])
                per_atom = per_atom[:-1]
            for i, reply in enumerate(per_atom):
                results[g].questions[i] = parse_questions(reply, self.n)
                if not results[g].questions[i]:
                    missing.append((g, i))
        return missing


def _can_sample(llm: LLM) -> bool:
    return llm.batch_sequences > 0


__all__ = ["SYSTEM", "Generated", "Mode", "QuestionGenerator"]
