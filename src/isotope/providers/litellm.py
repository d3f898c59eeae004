"""Providers that are not OpenAI-compatible, through ``litellm`` (optional extra
``isotopedb[litellm]``), e.g. ``litellm/anthropic/claude-3-5-haiku-latest``.

litellm fetches a price list from the network on import unless
``LITELLM_LOCAL_MODEL_COST_MAP`` is set; isotope sets it (offline by default).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

from isotope.errors import MissingDependency, ProviderError
from isotope.providers import LLM, AsyncFirst, Prompt, collect
from isotope.settings import ModelSettings


class LiteLLMChat(AsyncFirst, LLM):
    def __init__(self, model: str, settings: ModelSettings) -> None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        try:
            import litellm
        except ImportError as exc:
            raise MissingDependency.from_import(
                exc, f"the litellm model {model!r}", "litellm") from exc
        self._litellm: Any = litellm
        self.model = model
        self.model_id = f"litellm:{model}"
        self.concurrency = settings.llm_concurrency
        self.timeout = settings.llm_timeout
        self.retries = settings.llm_max_retries
        key = settings.openai_api_key
        self.api_base = settings.openai_base_url
        self.api_key = key.get_secret_value() if key else None

    async def acomplete_batch(
        self, prompts: Sequence[Prompt], *, max_tokens: int = 256, temperature: float = 0.0,
        json_schema: dict[str, Any] | None = None,
    ) -> list[str]:
        extra: dict[str, Any] = {}
        if json_schema is not None:
            extra["response_format"] = {"type": "json_object"}
        semaphore = asyncio.Semaphore(self.concurrency)

        async def one(prompt: Prompt) -> str:
            async with semaphore:
                try:
                    response = await self._litellm.acompletion(
                        model=self.model, messages=prompt, max_tokens=max_tokens,
                        temperature=temperature, timeout=self.timeout,
                        num_retries=self.retries, api_base=self.api_base, api_key=self.api_key,
                        **extra,
                    )
                except Exception as exc:  # litellm maps every provider's errors
                    raise ProviderError(f"{self.model_id}: {exc}") from exc
                usage = getattr(response, "usage", None)
                if usage is not None:
                    self.usage.add(usage.prompt_tokens or 0, usage.completion_tokens or 0)
                return str(response.choices[0].message.content or "")

        outcomes = await asyncio.gather(*(one(p) for p in prompts), return_exceptions=True)
        return collect(outcomes)
