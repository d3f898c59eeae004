"""Embedders: the contract, and the registry that builds one from a model string.

An embedder implements :meth:`Embedder.embed_batch`; :meth:`Embedder.embed` batches on top
of it by the size the embedder declares. Vectors are float32 and L2-normalised, so a dot
product is a cosine similarity.

Queries and the questions they are matched with go through :meth:`Embedder.embed`; the
texts searched for (chunks and statements) through :meth:`Embedder.embed_documents`, which
is the same unless a model embeds the two sides differently (e5's ``query:`` and
``passage:`` prefixes).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from isotope.models import CacheStats

if TYPE_CHECKING:
    from isotope.settings import ModelSettings

Vectors = npt.NDArray[np.float32]


class Embedder(ABC):
    """Turns texts into unit vectors."""

    model_id: str = ""
    """Identifies the model and its weights; saved in the index and checked on open."""
    dim: int = 0
    batch_size: int = 32
    stats: CacheStats | None = None
    """Vectors from the cache and computed, when an embedding cache wraps the model."""
    two_sided: bool = False
    """Whether :meth:`embed_documents` differs from :meth:`embed` (e5's prefixes)."""
    question_filter: tuple[tuple[str, float], ...] = ()
    """The question filter's cosine thresholds on this model's scale (settings
    ``min_question_similarity`` and ``dedup_threshold``), for a model whose cosines sit
    elsewhere than MiniLM's, whose scale the settings' defaults are on. Used where the
    setting is left at its default."""

    def close(self) -> None:  # noqa: B027 - optional
        """Release what the model holds (a remote one: its client and connections)."""

    @abstractmethod
    def embed_batch(self, texts: Sequence[str]) -> Vectors:
        """Embed at most ``batch_size`` texts: an array of shape (len(texts), dim)."""

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed any number of texts, batch by batch."""
        return self.in_batches(texts, self.embed_batch)

    def in_batches(self, texts: Sequence[str],
                   embed_batch: Callable[[Sequence[str]], Vectors]) -> Vectors:
        """``embed_batch`` over ``texts``, :attr:`batch_size` at a time, stacked."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = [
            embed_batch(texts[i : i + self.batch_size])
            for i in range(0, len(texts), self.batch_size)
        ]
        return np.ascontiguousarray(np.vstack(parts), dtype=np.float32)

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        """Async version of :meth:`embed`; by default runs it in a worker thread."""
        return await asyncio.to_thread(self.embed, texts)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        """Embed texts that queries search for (chunks, statements); :meth:`embed` unless
        the model embeds documents and queries differently (:attr:`two_sided`)."""
        return self.embed(texts)

    def embed_one(self, text: str) -> Vectors:
        vector: Vectors = self.embed([text])[0]
        return vector

    def count_tokens(self, text: str) -> int | None:
        """Tokens of ``text`` for this model, when the embedder can tell (else None)."""
        return None


def normalize(vectors: npt.NDArray[np.floating]) -> Vectors:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit: Vectors = (vectors / np.maximum(norms, 1e-12)).astype(np.float32)
    return unit


EmbedderFactory = Callable[[str, "ModelSettings"], Embedder]
_REGISTRY: dict[str, EmbedderFactory] = {}


def register(name: str, factory: EmbedderFactory) -> None:
    """Register ``factory(model, settings)`` for model strings ``name/...``
    (or exactly ``name``)."""
    _REGISTRY[name] = factory


def available() -> list[str]:
    return sorted(_REGISTRY)


def create(model: str, settings: ModelSettings) -> Embedder:
    """Build the embedder a model string names: ``local/all-minilm-l6-v2``,
    ``openai/NAME`` or ``openai/NAME@BASE_URL`` (with ``embedding_dim``)."""
    from isotope.errors import IsotopeError

    factory = _REGISTRY.get(model)
    if factory is None and not model.startswith("local/"):
        factory = _REGISTRY.get(model.split("/", 1)[0])
    if factory is None:
        raise IsotopeError(
            f"unknown embedding model {model!r}; choose from: {', '.join(available())} "
            "(openai/ takes a model name: openai/NAME[@BASE_URL])"
        )
    return factory(model, settings)


def _local(model: str, settings: ModelSettings) -> Embedder:
    from isotope.embedders.minilm import MiniLMEmbedder

    return MiniLMEmbedder(model, threads=settings.threads)


def _openai(model: str, settings: ModelSettings) -> Embedder:
    from isotope.embedders.openai import OpenAIEmbedder
    from isotope.errors import IsotopeError
    from isotope.providers.openai import parse_model

    if not settings.embedding_dim:
        raise IsotopeError(
            f"set ISOTOPE_EMBEDDING_DIM to the dimension of {model!r} (e.g. 1536 for "
            "text-embedding-3-small)"
        )
    name, base_url = parse_model(model)
    key = settings.openai_api_key
    return OpenAIEmbedder(
        name, dim=settings.embedding_dim, base_url=base_url or settings.openai_base_url,
        api_key=key.get_secret_value() if key else None, timeout=settings.llm_timeout,
        max_retries=settings.llm_max_retries,
    )


def _e5(model: str, settings: ModelSettings) -> Embedder:
    from isotope.embedders.e5 import E5Embedder

    return E5Embedder(model, threads=settings.threads)


register("local/all-minilm-l6-v2", _local)
register("local/multilingual-e5-small", _e5)
register("openai", _openai)

__all__ = ["Embedder", "Vectors", "available", "create", "normalize", "register"]
