"""Language model providers: the contract, and the registry that builds one from a model
string such as ``local/qwen2.5-coder-1.5b``.

A provider implements one method, :meth:`LLM.complete_batch`: a batch of chat prompts in,
one reply text per prompt out. Everything else (prompts, parsing, retries of bad replies)
lives above it.
"""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from isotope.errors import ProviderError
from isotope.models import CacheStats

if TYPE_CHECKING:
    from isotope.settings import ModelSettings

T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    """When one reply of batched decoding ends, besides the end of generation: after
    ``max_tokens`` tokens, or once it holds ``questions`` question marks and ends with
    one (1: at its first newline too; more: at its ``questions + 2``-th newline). 0: a
    reply that is not questions (a chunk's facts), ended by its tokens only."""

    max_tokens: int
    questions: int


@dataclass
class Usage:
    """Tokens a provider has used so far."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0

    def add(self, prompt_tokens: int, completion_tokens: int) -> None:
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        self.calls += 1


DECODING: ContextVar[Callable[[Sequence[int], int], None] | None] = ContextVar(
    "isotope_decoding", default=None)
"""While set: called by a local model's batched decoding as it goes (when a group of
prompts is finished, and every few steps), with the groups of the call finished so far
(their indexes in the call) and the tokens it has decoded so far: how an ingest reports
each chunk as its questions are written, not when the whole window is."""


class BatchGenerationError(ProviderError):
    """Some prompts of a batch failed. ``results`` holds the replies that succeeded (None
    where a prompt failed); ``failures`` maps the index of each failed prompt to why."""

    def __init__(self, results: Sequence[str | None], failures: dict[int, str]) -> None:
        self.results = list(results)
        self.failures = dict(failures)
        listed = "; ".join(f"#{i}: {why}" for i, why in sorted(failures.items())[:5])
        more = f" (and {len(failures) - 5} more)" if len(failures) > 5 else ""
        super().__init__(
            f"{len(failures)} of {len(self.results)} generations failed: {listed}{more}"
        )


def collect(outcomes: Sequence[str | BaseException]) -> list[str]:
    """The replies of a batch run with ``asyncio.gather(..., return_exceptions=True)``;
    raises :class:`BatchGenerationError` (keeping the successes) if any call failed."""
    failures = {i: str(o) for i, o in enumerate(outcomes) if isinstance(o, BaseException)}
    if failures:
        raise BatchGenerationError(
            [None if isinstance(o, BaseException) else o for o in outcomes], failures
        )
    return [str(o) for o in outcomes]


class Message(TypedDict):
    role: str
    content: str


Prompt = list[Message]


class LLM(ABC):
    """A chat-completion model."""

    model_id: str = ""
    """Identifies the model (and its weights); recorded with what it generated."""
    batch_sequences: int = 0
    """Sequences :meth:`sample_batched` decodes in parallel; 0: the model has no batched
    decoding (question generation then makes one call per atom)."""
    local: bool = False
    """The model runs in this process (on this machine's CPU or GPU): an answer may take
    many seconds, and calls are made one at a time."""
    concurrent_calls: bool = False
    """Batches from several threads at once share the model's ``llm_concurrency`` slots
    (a remote endpoint): question generation then asks for the next windows while it
    embeds and stores the last one's questions."""
    stats: CacheStats | None = None
    """Replies from the cache and from the model, when a reply cache wraps the model."""
    _usage: Usage | None = None

    @property
    def usage(self) -> Usage:
        """Tokens used so far (providers that know them keep it up to date)."""
        if self._usage is None:
            self._usage = Usage()
        return self._usage

    @abstractmethod
    def complete_batch(
        self, prompts: Sequence[Prompt], *, max_tokens: int = 256, temperature: float = 0.0,
        json_schema: dict[str, Any] | None = None,
    ) -> list[str]:
        """One reply text per prompt, in order. With ``json_schema``, the reply should be a
        JSON object of that schema (constrained where the provider can, else asked for)."""

    def sample_batched(self, groups: Sequence[Sequence[Prompt]], *, max_tokens: int,
                       temperature: float, questions: int,
                       limits: Sequence[Sequence[Limits]] | None = None) -> list[list[str]]:
        """Batched decoding: a reply for every prompt of every group, the prompts of a group
        sharing their beginning, each ended as :class:`Limits` (``max_tokens`` and
        ``questions``) say, or as its own in ``limits`` (``limits[group][prompt]``) when
        given. Only for models with ``batch_sequences`` > 0."""
        raise NotImplementedError(f"{self.model_id or type(self).__name__} has no batched "
                                  "decoding (batch_sequences = 0)")

    def cached(self, prompts: Sequence[Prompt], *, max_tokens: int = 256,
               temperature: float = 0.0, json_schema: dict[str, Any] | None = None,
               batched: int | None = None) -> list[bool]:
        """Which prompts a reply cache already answers (for dry runs): none, for a model
        without one."""
        return [False] * len(prompts)

    def yes_probability(self, prompt: Prompt) -> float | None:
        """How likely the model's reply to ``prompt`` (a yes-or-no question) begins with
        "yes" rather than "no": P(yes) / (P(yes) + P(no)) of its first token, read from
        its log-probabilities (each word's spellings counted together: "yes", "Yes", " yes").
        None when the model does not give them (the default): an answer's check then
        rests on the passages' words alone."""
        return None

    def close(self) -> None:  # noqa: B027 - optional
        """Release the model (weights, connections)."""

    def complete(self, prompt: Prompt, *, max_tokens: int = 256, temperature: float = 0.0) -> str:
        return self.complete_batch([prompt], max_tokens=max_tokens, temperature=temperature)[0]

    def stream(self, prompt: Prompt, *, max_tokens: int = 256, temperature: float = 0.0
               ) -> Iterator[str]:
        """The reply to ``prompt`` in pieces, as the model writes them; stop iterating
        (close the iterator) to stop the model. Default: the whole reply as one piece."""
        yield self.complete(prompt, max_tokens=max_tokens, temperature=temperature)

    async def acomplete_batch(
        self, prompts: Sequence[Prompt], *, max_tokens: int = 256, temperature: float = 0.0,
        json_schema: dict[str, Any] | None = None,
    ) -> list[str]:
        """Async version; by default runs :meth:`complete_batch` in a worker thread."""
        return await asyncio.to_thread(
            self.complete_batch, prompts, max_tokens=max_tokens, temperature=temperature,
            json_schema=json_schema,
        )


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, even inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    result: list[T] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(coro))
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]


class AsyncFirst:
    """For providers that are asynchronous at heart: :meth:`complete_batch` runs their
    ``acomplete_batch`` to completion."""

    def complete_batch(
        self, prompts: Sequence[Prompt], *, max_tokens: int = 256, temperature: float = 0.0,
        json_schema: dict[str, Any] | None = None,
    ) -> list[str]:
        batch: Coroutine[Any, Any, list[str]] = self.acomplete_batch(  # type: ignore[attr-defined]
            prompts, max_tokens=max_tokens, temperature=temperature, json_schema=json_schema)
        return run_sync(batch)


YES_WORDS = ("yes", "Yes", "YES")
NO_WORDS = ("no", "No", "NO")


def yes_share(logprobs: dict[str, float]) -> float | None:
    """P(yes) / (P(yes) + P(no)) from a first token's log-probabilities by token text
    (leading spaces ignored); None when neither word is among them."""
    import math

    yes = sum(math.exp(v) for k, v in logprobs.items() if k.strip() in YES_WORDS)
    no = sum(math.exp(v) for k, v in logprobs.items() if k.strip() in NO_WORDS)
    return yes / (yes + no) if yes + no > 0 else None


def messages(system: str, user: str) -> Prompt:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


LLMFactory = Callable[[str, "ModelSettings"], LLM]
_REGISTRY: dict[str, LLMFactory] = {}


def register(name: str, factory: LLMFactory) -> None:
    """Register ``factory(model, settings)`` for model strings equal to ``name`` or
    starting with ``name/``."""
    _REGISTRY[name] = factory


def available() -> list[str]:
    return sorted(_REGISTRY)


def create(model: str, settings: ModelSettings) -> LLM:
    """Build the provider a model string names: ``local/qwen2.5-coder-1.5b``,
    ``local/PATH.gguf``, ``openai/NAME``, ``openai/NAME@BASE_URL``, ``litellm/...``."""
    from isotope.errors import IsotopeError

    factory = _REGISTRY.get(model) or _REGISTRY.get(model.split("/", 1)[0])
    if factory is None or (model.startswith("local/") and model not in _REGISTRY
                           and not model.endswith(".gguf")):
        raise IsotopeError(
            f"unknown language model {model!r}; choose from: {', '.join(available())} "
            "(prefixes take a model name: openai/NAME[@BASE_URL], litellm/PROVIDER/NAME, "
            "local/PATH/TO/MODEL.gguf)"
        )
    return factory(model, settings)


def _local(model: str, settings: ModelSettings) -> LLM:
    from isotope.providers.llama import LocalLlama

    return LocalLlama.for_model(model, settings)


def _openai(model: str, settings: ModelSettings) -> LLM:
    from isotope.providers.openai import OpenAIChat, parse_model
    from isotope.providers.ratelimit import RateLimiter

    name, base_url = parse_model(model)
    return OpenAIChat(
        name, base_url=base_url or settings.openai_base_url,
        api_key=settings.openai_api_key.get_secret_value() if settings.openai_api_key else None,
        concurrency=settings.llm_concurrency,
        limiter=RateLimiter(settings.requests_per_minute, settings.tokens_per_minute),
        timeout=settings.llm_timeout, max_retries=settings.llm_max_retries,
    )


def _litellm(model: str, settings: ModelSettings) -> LLM:
    from isotope.providers.litellm import LiteLLMChat

    return LiteLLMChat(model.split("/", 1)[1], settings)


for _name in ("local", "local/qwen2.5-coder-1.5b", "local/smollm2-135m"):
    register(_name, _local)
register("openai", _openai)
register("litellm", _litellm)

__all__ = [
    "LLM", "BatchGenerationError", "Message", "Prompt", "Usage", "available",
    "create", "register",
]
