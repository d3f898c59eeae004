"""Language model providers: the contract, and the registry that builds one from a model
string such as ``local/qwen2.5-coder-1.5b``.

A provider implements one method, :meth:`LLM.complete_batch`: a batch of chat prompts in,
one reply text per prompt out. Everything else (prompts, parsing, retries of bad replies)
lives above it.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypedDict


class Message(TypedDict):
    role: str
    content: str


Prompt = list[Message]


class LLM(ABC):
    """A chat-completion model."""

    model_id: str = ""
    """Identifies the model (and its weights); recorded with what it generated."""

    @abstractmethod
    def complete_batch(
        self, prompts: Sequence[Prompt], *, max_tokens: int = 256, temperature: float = 0.0
    ) -> list[str]:
        """One reply text per prompt, in order."""

    def complete(self, prompt: Prompt, *, max_tokens: int = 256, temperature: float = 0.0) -> str:
        return self.complete_batch([prompt], max_tokens=max_tokens, temperature=temperature)[0]

    async def acomplete_batch(
        self, prompts: Sequence[Prompt], *, max_tokens: int = 256, temperature: float = 0.0
    ) -> list[str]:
        """Async version; by default runs :meth:`complete_batch` in a worker thread."""
        return await asyncio.to_thread(
            self.complete_batch, prompts, max_tokens=max_tokens, temperature=temperature
        )


def messages(system: str, user: str) -> Prompt:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


LLMFactory = Callable[[str, "ProviderOptions"], LLM]


class ProviderOptions(TypedDict):
    threads: int
    context: int
    seed: int
    cache_dir: Path


_REGISTRY: dict[str, LLMFactory] = {}


def register(name: str, factory: LLMFactory) -> None:
    """Register ``factory(model, options)`` for model strings equal to ``name`` or
    starting with ``name/``."""
    _REGISTRY[name] = factory


def available() -> list[str]:
    return sorted(_REGISTRY)


def create(model: str, options: ProviderOptions) -> LLM:
    """Build the provider a model string names."""
    from isotope.errors import IsotopeError

    factory = _REGISTRY.get(model)
    if factory is None and model.startswith("local/") and model.endswith(".gguf"):
        factory = _REGISTRY.get("local")
    if factory is None:
        raise IsotopeError(
            f"unknown language model {model!r}; choose from: {', '.join(available())} "
            "(or local/PATH/TO/MODEL.gguf)"
        )
    return factory(model, options)


def _local(model: str, options: ProviderOptions) -> LLM:
    from isotope.providers.llama import LocalLlama

    return LocalLlama.for_model(model, options)


for _name in ("local", "local/qwen2.5-coder-1.5b", "local/smollm2-135m"):
    register(_name, _local)

__all__ = ["LLM", "Message", "Prompt", "ProviderOptions", "available", "create", "register"]
