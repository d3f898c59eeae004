"""Batched decoding with llama.cpp: several sequences sampled in parallel from one shared
prompt. The prompt is evaluated once, its KV cache copied to every sequence, then each
step decodes one token of every live sequence in a single batch: on a CPU, decoding n
tokens together costs little more than decoding one, so n questions come for about the
price of one.

A second context of the loaded model is used (the high-level ``Llama`` object has room for
one sequence only); it keeps the last prompt's tokens so the next prompt with the same
beginning (the same chunk) evaluates only what differs.
"""

from __future__ import annotations

import ctypes
from typing import Any

import llama_cpp

from isotope.errors import ProviderError


class BatchedSampler:
    def __init__(self, llama: Any, *, n_seq: int, n_ctx: int, threads: int) -> None:
        self.llama = llama
        self.n_seq = n_seq
        model = llama._model.model
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = 512
        params.n_ubatch = 512
        params.n_seq_max = n_seq
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
        self.batch = llama_cpp.llama_batch_init(512, 0, n_seq)
        self.cached: list[int] = []  # tokens of sequence 0 in the KV cache

    def close(self) -> None:
        if self.ctx:
            llama_cpp.llama_batch_free(self.batch)
            llama_cpp.llama_free(self.ctx)
            self.ctx = None

    def _add(self, token: int, pos: int, seqs: list[int], logits: bool) -> None:
        b = self.batch
        i = b.n_tokens
        b.token[i] = token
        b.pos[i] = pos
        b.n_seq_id[i] = len(seqs)
        for k, s in enumerate(seqs):
            b.seq_id[i][k] = s
        b.logits[i] = logits
        b.n_tokens = i + 1

    def _decode(self) -> None:
        if llama_cpp.llama_decode(self.ctx, self.batch) != 0:
            raise ProviderError("llama.cpp failed to decode a batch (context full?)")

    def _prefill(self, tokens: list[int]) -> None:
        """Make sequence 0 hold ``tokens``, evaluating only what the cache lacks; the
        logits of the last token are left at batch index ``self.batch.n_tokens - 1``."""
        common = 0
        while (common < len(tokens) - 1 and common < len(self.cached)
               and self.cached[common] == tokens[common]):
            common += 1
        for s in range(self.n_seq):
            llama_cpp.llama_memory_seq_rm(self.memory, s, common if s == 0 else 0, -1)
        todo = tokens[common:]
        for start in range(0, len(todo), 512):
            part = todo[start : start + 512]
            self.batch.n_tokens = 0
            for k, token in enumerate(part):
                last = start + k == len(todo) - 1
                self._add(token, common + start + k, [0], last)
            self._decode()
        self.cached = list(tokens)

    def sample(self, prompt: str, n: int, *, max_tokens: int, temperature: float, seed: int,
               stop: tuple[str, ...] = ("\n",)) -> list[str]:
        """``n`` completions of ``prompt`` (at most ``n_seq``), each ending at a stop
        string, the end of generation, or ``max_tokens``."""
        n = min(n, self.n_seq)
        tokens = self.llama.tokenize(prompt.encode(), add_bos=False, special=True)
        if len(tokens) + max_tokens >= self.n_ctx:
            raise ProviderError(f"the prompt ({len(tokens)} tokens) does not fit the context")
        self._prefill(tokens)
        last_index = self.batch.n_tokens - 1
        for s in range(1, n):
            llama_cpp.llama_memory_seq_cp(self.memory, 0, s, -1, -1)
        samplers = [self._sampler(temperature, seed + s) for s in range(n)]
        texts = [b""] * n
        live = list(range(n))
        index_of = dict.fromkeys(live, last_index)
        pos = len(tokens)
        try:
            for _ in range(max_tokens):
                picked: dict[int, int] = {}
                for s in live:
                    token = llama_cpp.llama_sampler_sample(samplers[s], self.ctx, index_of[s])
                    if llama_cpp.llama_vocab_is_eog(self.vocab, token):
                        continue
                    texts[s] += self._piece(token)
                    if any(t.encode() in texts[s] for t in stop) or texts[s].rstrip().endswith(
                        b"?"
                    ):
                        continue  # this sequence is done
                    picked[s] = token
                live = list(picked)
                if not live:
                    break
                self.batch.n_tokens = 0
                for k, s in enumerate(live):
                    self._add(picked[s], pos, [s], True)
                    index_of[s] = k
                self._decode()
                pos += 1
        finally:
            for sampler in samplers:
                llama_cpp.llama_sampler_free(sampler)
            for s in range(n):  # keep only the prompt, in sequence 0
                llama_cpp.llama_memory_seq_rm(self.memory, s, len(tokens) if s == 0 else 0, -1)
        out = []
        for raw in texts:
            text = raw.decode("utf-8", errors="ignore")
            for t in stop:
                text = text.split(t, 1)[0]
            out.append(text.strip())
        return out

    def _sampler(self, temperature: float, seed: int) -> Any:
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_k(40))
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_p(0.95, 1))
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_temp(temperature))
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_dist(seed))
        return chain

    def _piece(self, token: int) -> bytes:
        buffer = ctypes.create_string_buffer(64)
        size = llama_cpp.llama_token_to_piece(self.vocab, token, buffer, 64, 0, False)
        return buffer.raw[: max(0, size)]
