"""Batched decoding with llama.cpp: many sequences sampled in parallel, with continuous
batching.

Work comes as groups of prompts that share their beginning: the question prompts of the
atoms of one chunk share the instructions and the chunk, and differ only in the
statement at the end. Every prompt gets one sequence. A pool of ``n_seq`` sequence slots
is kept full: a group is admitted when enough slots are free; its shared part is
evaluated once with all its sequences tagged on it (in llama.cpp's unified KV cache a cell
can belong to many sequences, so nothing is copied), each prompt's own tail once; and
every step decodes one token of every live sequence, plus the prompts of newly admitted
groups, in a single batch. On a CPU a
step of 32-64 tokens costs about a third per token of a step of one, so keeping the batch
full is the whole game: a finished sequence frees its slot for the next group at once.

The beginning that all prompts share (the instructions) is kept in the KV cache under a
carrier sequence across calls and lent to new sequences without being evaluated again.

A second context of the loaded model is used (the high-level ``Llama`` object has room for
one sequence only).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import llama_cpp

from isotope.errors import ProviderError
from isotope.providers import DECODING, Limits


@dataclass
class SampleStats:
    """Tokens evaluated from prompts and sampled, over a call."""

    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class _Seq:
    unit: tuple[int, int]  # (group, first prompt) of its admission unit
    prompt: int
    pos: int  # position of its next token
    index: int  # where its logits are in the batch just decoded
    sampler: Any
    sampled: int = 0
    text: bytes = b""


def _ends(text: bytes, questions: int) -> bool:
    """Whether a reply asked for ``questions`` questions is done (0: never, only its
    tokens end it)."""
    if not questions:
        return False
    return (text.count(b"?") >= questions and text.rstrip().endswith(b"?")) or (
        text.strip().count(b"\n") >= (1 if questions == 1 else questions + 2))


@dataclass
class _Group:
    prompts: list[list[int]]
    shared: int  # tokens all its prompts share


class _Teller:
    """Tells :data:`isotope.providers.DECODING`'s listener (if any) how a call goes: the
    groups finished (at once when one is) and the tokens decoded (every
    :data:`TELL_EVERY` steps)."""

    def __init__(self, listener: Callable[[Sequence[int], int], None] | None,
                 sizes: list[int], stats: SampleStats) -> None:
        self.listener, self.left, self.stats = listener, sizes, stats
        self.done = [g for g, n in enumerate(sizes) if not n]
        self.base, self.steps = stats.completion_tokens, 0

    def finished(self, group: int) -> None:
        self.left[group] -= 1
        if not self.left[group]:
            self.done.append(group)
            self.tell()

    def step(self) -> None:
        self.steps += 1
        if self.steps % TELL_EVERY == 0:
            self.tell()

    def tell(self) -> None:
        if self.listener is not None:
            self.listener(list(self.done), self.stats.completion_tokens - self.base)


TELL_EVERY = 16
"""Decoding steps between two reports of the tokens decoded (a step is one token of
every live sequence)."""


def common_prefix(token_lists: Sequence[Sequence[int]], limit: int) -> int:
    """Length of the longest common beginning of the lists, at most ``limit``."""
    first = token_lists[0]
    count = 0
    while count < limit and all(t[count] == first[count] for t in token_lists):
        count += 1
    return count


class BatchedSampler:
    def __init__(self, llama: Any, *, n_seq: int, n_ctx: int, threads: int) -> None:
        self.llama = llama
        self.n_seq = n_seq  # slots for sampled sequences
        self.carrier = n_seq  # holds the beginning every prompt shares
        model = llama._model.model
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_ctx  # a step may hold the prompts of several admitted groups
        params.n_ubatch = 512
        params.n_seq_max = n_seq + 1
        params.kv_unified = True
        params.n_threads = threads
        params.n_threads_batch = threads
        params.no_perf = True
        self.ctx = llama_cpp.llama_init_from_model(model, params)
        if not self.ctx:
            raise ProviderError("llama.cpp could not create a context for batched decoding")
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.vocab = llama_cpp.llama_model_get_vocab(model)
        self.n_ctx = n_ctx
        self.batch = llama_cpp.llama_batch_init(n_ctx, 0, n_seq + 1)
        self.prefix: list[int] = []  # what the carrier holds

    def close(self) -> None:
        if self.ctx:
            llama_cpp.llama_batch_free(self.batch)
            llama_cpp.llama_free(self.ctx)
            self.ctx = None

    def _add(self, token: int, pos: int, seqs: Sequence[int], logits: bool) -> int:
        """Append a token to the batch; returns its index there."""
        b = self.batch
        i: int = b.n_tokens
        b.token[i] = token
        b.pos[i] = pos
        b.n_seq_id[i] = len(seqs)
        for k, s in enumerate(seqs):
            b.seq_id[i][k] = s
        b.logits[i] = logits
        b.n_tokens = i + 1
        return i

    def _decode(self) -> None:
        if llama_cpp.llama_decode(self.ctx, self.batch) != 0:
            raise ProviderError("llama.cpp failed to decode a batch (context full?)")

    def _set_prefix(self, tokens: list[int]) -> int:
        """Make the carrier hold exactly ``tokens``, evaluating only what it lacks.
        Returns how many tokens were evaluated."""
        keep = common_prefix([tokens, self.prefix], min(len(tokens), len(self.prefix)))
        llama_cpp.llama_memory_seq_rm(self.memory, self.carrier, keep, -1)
        todo = tokens[keep:]
        if todo:
            self.batch.n_tokens = 0
            for k, token in enumerate(todo):
                self._add(token, keep + k, [self.carrier], False)
            self._decode()
        self.prefix = list(tokens)
        return len(todo)

    def sample_many(self, groups: Sequence[Sequence[str]], *, max_tokens: int,
                    temperature: float, seed: int, questions: int = 1,
                    stats: SampleStats | None = None,
                    limits: Sequence[Sequence[Limits]] | None = None) -> list[list[str]]:
        """A completion of every prompt (``out[group][prompt]``), ending after
        ``questions`` question marks (with one: at a newline too), at the end of
        generation, or after ``max_tokens``; or as its own ``limits[group][prompt]`` say
        (:class:`isotope.providers.Limits`). The prompts of a group should share their
        beginning (the same chunk)."""
        stats = stats if stats is not None else SampleStats()
        ends = limits or [[Limits(max_tokens, questions)] * len(g) for g in groups]
        work: list[_Group] = []
        for prompts in groups:
            encoded = [self.llama.tokenize(p.encode(), add_bos=False, special=True)
                       for p in prompts]
            shared = common_prefix(encoded, min(map(len, encoded)) - 1) if encoded else 0
            work.append(_Group(encoded, shared))
        out = [[""] * len(g.prompts) for g in work]
        asked = [g for g in work if g.prompts]
        if not asked:
            return out
        tell = _Teller(DECODING.get(), [len(g.prompts) for g in work], stats)
        everyone = [t for g in asked for t in g.prompts]
        base = common_prefix(everyone, min(g.shared for g in asked))
        stats.prompt_tokens += self._set_prefix(everyone[0][:base])
        # Admission units: a group's prompts, cut so that each unit fits the slots.
        units = [(gi, list(range(s, min(s + self.n_seq, len(g.prompts)))))
                 for gi, g in enumerate(work) for s in range(0, len(g.prompts), self.n_seq)]
        units.reverse()  # popped from the end, in order
        free = list(range(self.n_seq - 1, -1, -1))
        live: dict[int, _Seq] = {}
        held: dict[tuple[int, int], int] = {}  # KV cells each admitted unit may use
        budget = self.n_ctx - base
        admitted = 0
        try:
            self.batch.n_tokens = 0
            while True:
                while units and len(free) >= len(units[-1][1]):
                    gi, members = units[-1]
                    group = work[gi]
                    need = group.shared - base + sum(
                        len(group.prompts[p]) - group.shared + ends[gi][p].max_tokens
                        for p in members)
                    if need > budget - sum(held.values()):
                        if not held:
                            raise ProviderError(
                                f"a prompt of {len(group.prompts[members[0]])} tokens does "
                                f"not fit the context of batched decoding ({self.n_ctx} "
                                "tokens); lower chunk_size or questions_per_atom")
                        break
                    units.pop()
                    held[(gi, members[0])] = need
                    stats.prompt_tokens += self._admit(
                        (gi, members[0]), group, members, base, free, live,
                        temperature, seed + admitted)
                    admitted += len(members)
                if not live:
                    break
                self._decode()
                self.batch.n_tokens = 0
                for s, seq in list(live.items()):
                    token = llama_cpp.llama_sampler_sample(seq.sampler, self.ctx, seq.index)
                    seq.sampled += 1
                    stats.completion_tokens += 1
                    done = bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))
                    end = ends[seq.unit[0]][seq.prompt]
                    if not done:
                        seq.text += self._piece(token)
                        done = seq.sampled >= end.max_tokens or _ends(seq.text, end.questions)
                    if done:
                        text = seq.text.decode("utf-8", errors="ignore").strip()
                        if end.questions == 1:
                            text = text.split("\n", 1)[0]
                        out[seq.unit[0]][seq.prompt] = text
                        tell.finished(seq.unit[0])
                        self._release(s, live, free)
                        if not any(q.unit == seq.unit for q in live.values()):
                            del held[seq.unit]
                        continue
                    seq.index = self._add(token, seq.pos, [s], True)
                    seq.pos += 1
                tell.step()
        finally:
            for s in list(live):
                self._release(s, live, free)
        return out

    def _admit(self, unit: tuple[int, int], group: _Group, members: list[int], base: int,
               free: list[int], live: dict[int, _Seq], temperature: float, seed: int) -> int:
        """Start a sequence for each prompt ``members`` of ``group``: their tokens go into
        the batch being built. Returns how many prompt tokens that adds."""
        seqs = {p: free.pop() for p in members}
        for s in seqs.values():  # lend them the carrier's cells
            llama_cpp.llama_memory_seq_cp(self.memory, self.carrier, s, 0, base)
        first = group.prompts[members[0]]
        for k in range(base, group.shared):
            self._add(first[k], k, list(seqs.values()), False)
        added = group.shared - base
        for number, p in enumerate(members):
            tokens = group.prompts[p]
            for k in range(group.shared, len(tokens)):
                index = self._add(tokens[k], k, [seqs[p]], k == len(tokens) - 1)
            added += len(tokens) - group.shared
            live[seqs[p]] = _Seq(unit, p, len(tokens), index,
                                 self._sampler(temperature, seed + number))
        return added

    def _release(self, s: int, live: dict[int, _Seq], free: list[int]) -> None:
        llama_cpp.llama_sampler_free(live.pop(s).sampler)
        llama_cpp.llama_memory_seq_rm(self.memory, s, -1, -1)
        free.append(s)

    def _sampler(self, temperature: float, seed: int) -> Any:
        """The sampling of ``Llama.create_chat_completion`` as isotope calls it: top-k 40,
        top-p 0.9, a repeat penalty of 1.1 over the last 64 tokens, then temperature."""
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_penalties(
            llama_cpp.llama_vocab_n_tokens(self.vocab), 64, 1.1, 0.0, 0.0))
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_k(40))
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_p(0.9, 1))
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_temp(temperature))
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_dist(seed))
        return chain

    def _piece(self, token: int) -> bytes:
        buffer = ctypes.create_string_buffer(64)
        size = llama_cpp.llama_token_to_piece(self.vocab, token, buffer, 64, 0, False)
        return buffer.raw[: max(0, size)]
