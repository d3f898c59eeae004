"""A rate limiter for remote providers: requests per minute and tokens per minute, as
token buckets that refill continuously and hold at most one second's worth, so requests
are paced evenly instead of bursting a minute's budget at once."""

from __future__ import annotations

import asyncio
import time


class RateLimiter:
    """``await limiter.acquire(tokens)`` waits until one more request of ``tokens``
    tokens fits both budgets. None disables a budget."""

    def __init__(self, requests_per_minute: float | None = None,
                 tokens_per_minute: float | None = None) -> None:
        self.rpm = requests_per_minute
        self.tpm = tokens_per_minute
        # Bucket sizes: one second's worth (at least one request / one call's tokens).
        self._request_cap = max(1.0, (requests_per_minute or 0) / 60)
        self._token_cap = float(tokens_per_minute or 0) / 60
        self._requests = self._request_cap
        self._tokens = self._token_cap
        self._stamp = time.monotonic()
        self._lock = asyncio.Lock()

    def rebind(self) -> None:
        """A new lock, for use on another event loop (an asyncio lock belongs to the loop
        it first waited on)."""
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = time.monotonic()
        elapsed = now - self._stamp
        self._stamp = now
        if self.rpm:
            self._requests = min(self._request_cap, self._requests + elapsed * self.rpm / 60)
        if self.tpm:
            self._tokens = min(self._token_cap, self._tokens + elapsed * self.tpm / 60)

    async def acquire(self, tokens: int = 0) -> None:
        if not self.rpm and not self.tpm:
            return
        async with self._lock:
            while True:
                self._refill()
                need_requests = 1 - self._requests if self.rpm else 0
                cost = min(tokens, self._token_cap) if self.tpm else 0
                need_tokens = cost - self._tokens if self.tpm else 0
                if need_requests <= 0 and need_tokens <= 0:
                    if self.rpm:
                        self._requests -= 1
                    if self.tpm:
                        self._tokens -= cost
                    return
                wait = 0.0
                if self.rpm and need_requests > 0:
                    wait = max(wait, need_requests * 60 / self.rpm)
                if self.tpm and need_tokens > 0:
                    wait = max(wait, need_tokens * 60 / self.tpm)
                await asyncio.sleep(wait)
