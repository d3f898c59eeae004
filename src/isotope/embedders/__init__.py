"""Embedders: the contract, and the registry that builds one from a model string.

An embedder implements :meth:`Embedder.embed_batch`; :meth:`Embedder.embed` batches on top
of it by the size the embedder declares. Vectors are float32 and L2-normalised, so a dot
product is a cosine similarity.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]


class Embedder(ABC):
    """Turns texts into unit vectors."""

    model_id: str = ""
    """Identifies the model and its weights; saved in the index and checked on open."""
    dim: int = 0
    batch_size: int = 32

    @abstractmethod
    def embed_batch(self, texts: Sequence[str]) -> Vectors:
        """Embed at most ``batch_size`` texts: an array of shape (len(texts), dim)."""

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed any number of texts, batch by batch."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = [
            self.embed_batch(texts[i : i + self.batch_size])
            for i in range(0, len(texts), self.batch_size)
        ]
        return np.ascontiguousarray(np.vstack(parts), dtype=np.float32)

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


EmbedderFactory = Callable[[str, int], Embedder]
_REGISTRY: dict[str, EmbedderFactory] = {}


def register(name: str, factory: EmbedderFactory) -> None:
    """Register ``factory(model, threads)`` for model strings ``name/...``
    (or exactly ``name``)."""
    _REGISTRY[name] = factory


def available() -> list[str]:
    return sorted(_REGISTRY)


def create(model: str, *, threads: int = 2) -> Embedder:
    """Build the embedder a model string names, e.g. ``local/all-minilm-l6-v2``."""
    from isotope.errors import IsotopeError

    factory = _REGISTRY.get(model) or _REGISTRY.get(model.split("/", 1)[0])
    if factory is None:
        raise IsotopeError(
            f"unknown embedding model {model!r}; choose from: {', '.join(available())}"
        )
    return factory(model, threads)


def _local(model: str, threads: int) -> Embedder:
    from isotope.embedders.minilm import MiniLMEmbedder

    return MiniLMEmbedder(model, threads=threads)


register("local/all-minilm-l6-v2", _local)

__all__ = ["Embedder", "Vectors", "available", "create", "normalize", "register"]
