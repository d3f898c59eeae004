"""Embeddings from an OpenAI-compatible ``/v1/embeddings`` endpoint (``openai/NAME``,
``openai/NAME@BASE_URL``), through the same client, retries and rate limiter as the chat
provider (:mod:`isotope.providers.openai`)."""

from __future__ import annotations

import base64
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
            reply = await self._client.call(
                self.model_id, sum(len(t) for t in texts) // 4,
                lambda: self._client.post(client, self.model_id, "/embeddings", {
                    "model": self.model, "input": list(texts), "encoding_format": "base64"}),
            )
            return normalize(self._vectors(reply, len(texts)))

        return self._client.submit(run)

    def _vectors(self, reply: dict[str, Any], n: int) -> np.ndarray:
        """The reply's vectors in the order of the texts: base64 of float32 as asked (as
        the SDK asks too), or lists of numbers from a server that ignores the format."""
        try:
            data = sorted(reply["data"], key=lambda d: int(d["index"]))
            vectors = [np.frombuffer(base64.b64decode(d["embedding"]), dtype=np.float32)
                       if isinstance(d["embedding"], str)
                       else np.asarray(d["embedding"], dtype=np.float32) for d in data]
        except (KeyError, TypeError, ValueError) as exc:
            raise ProviderError(f"{self.model_id}: an embeddings reply without its vectors "
                                f"({exc})") from exc
        if len(vectors) != n:
            raise ProviderError(f"{self.model_id}: {len(vectors)} vectors for {n} texts")
        wrong = next((v for v in vectors if v.shape != (self.dim,)), None)
        if wrong is not None:
            raise ProviderError(
                f"{self.model_id} returned vectors of {wrong.size} numbers where "
                f"{self.dim} were expected; set ISOTOPE_EMBEDDING_DIM to the model's "
                "dimension")
        return np.stack(vectors) if vectors else np.zeros((0, self.dim), np.float32)
