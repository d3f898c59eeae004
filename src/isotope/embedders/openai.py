"""Embeddings from an OpenAI-compatible ``/v1/embeddings`` endpoint (``openai/NAME``,
``openai/NAME@BASE_URL``), through the same client, retries and rate limiter as the chat
provider (:mod:`isotope.providers.openai`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from isotope.embedders import Embedder, Vectors, normalize
from isotope.errors import ProviderError
from isotope.providers.openai import EndpointClient
from isotope.providers.ratelimit import RateLimiter


class OpenAIEmbedder(Embedder):
    """Embeddings from an OpenAI-compatible ``/v1/embeddings`` endpoint."""

    def __init__(self, model: str, *, dim: int, base_url: str | None = None,
                 api_key: str | None = None, timeout: float = 60.0, max_retries: int = 5,
                 batch_size: int = 64) -> None:
        self.model = model
        self.model_id = f"openai:{model}"  # the same model on another host is compatible
        self.dim = dim
        self.batch_size = batch_size
        self._client = EndpointClient(base_url, api_key, timeout=timeout, max_retries=max_retries,
                               limiter=RateLimiter(), key_setting="ISOTOPE_OPENAI_API_KEY")

    def close(self) -> None:
        self._client.close()

    def embed_batch(self, texts: Sequence[str]) -> Vectors:
        """On the endpoint's own loop and client (one for the process)."""
        async def run(client: Any) -> Vectors:
            response = await self._client.call(
                self.model_id, sum(len(t) for t in texts) // 4,
                lambda: client.embeddings.create(model=self.model, input=list(texts)),
            )
            data = sorted(response.data, key=lambda d: d.index)
            vectors = np.array([d.embedding for d in data], dtype=np.float32)
            if vectors.ndim != 2 or vectors.shape[1] != self.dim:
                raise ProviderError(
                    f"{self.model_id} returned vectors of shape {vectors.shape}, expected "
                    f"(n, {self.dim}); set ISOTOPE_EMBEDDING_DIM to the model's dimension"
                )
            return normalize(vectors)

        return self._client.submit(run)
