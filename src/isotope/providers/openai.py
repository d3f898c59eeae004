"""Any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, llama.cpp's server, gateways)
through the ``openai`` SDK's client: chat here, embeddings in
:mod:`isotope.embedders.openai` (both through :class:`EndpointClient`). Replies are read
as plain JSON (:meth:`EndpointClient.post`): the SDK's typed replies cost more client CPU
than the call itself at a model server's pace (3.4 ms against 2.3 ms a call here), and
the client's CPU is what bounds the calls a process keeps in flight.

Prompts of a batch run concurrently (``llm_concurrency``, default 8) under a rate limiter
(``requests_per_minute``, ``tokens_per_minute``). A blocking batch runs on the endpoint's
own event loop (a daemon thread) with one async client for the process, its connections
kept; batches from several threads at once share the ``llm_concurrency`` slots, so a
caller can ask for the next batch while it works on the last one's replies. Timeouts,
connection errors, HTTP 429 and 5xx are retried with exponential backoff and jitter,
honouring ``Retry-After``; authentication errors fail at once with the setting to fix. A
batch in which some prompts fail keeps the replies that succeeded and raises
:class:`BatchGenerationError` listing the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar

from isotope.errors import MissingDependency, ProviderError
from isotope.providers import LLM, AsyncFirst, Prompt, collect, yes_share
from isotope.providers.ratelimit import RateLimiter

log = logging.getLogger(__name__)
T = TypeVar("T")


class ProviderAuthError(ProviderError):
    """The endpoint refused the credentials: retrying cannot help."""

    fatal = True


class ServerDown(ProviderError):
    """The endpoint stopped answering (two calls in a row gave up on connection errors or
    502-504 replies, and no call got a reply meanwhile; a timeout is a slow reply, not a
    server that is down): the other calls stop at once instead of each retrying its own
    way."""

    fatal = True
    unreachable = True


DOWN_FOR = 30.0
"""Seconds after a call gave up on a server that is down during which every call fails at
once (then one may try it again)."""
DOWN_STATUSES = (502, 503, 504)


def parse_model(model: str) -> tuple[str, str | None]:
    """``openai/NAME`` or ``openai/NAME@BASE_URL`` -> (NAME, BASE_URL or None)."""
    name = model.split("/", 1)[1] if "/" in model else model
    if "@" in name:
        name, base_url = name.split("@", 1)
        return name, base_url
    return name, None


class EndpointClient:
    """The SDK client plus the retry policy shared by chat and embeddings."""

    def __init__(self, base_url: str | None, api_key: str | None, *, timeout: float,
                 max_retries: int, limiter: RateLimiter, key_setting: str) -> None:
        try:
            import openai
        except ImportError as exc:
            raise MissingDependency.from_import(
                exc, "OpenAI-compatible providers", "openai") from exc
        self.openai = openai
        self.base_url = base_url
        self.api_key = api_key or "not-needed"
        self.timeout = timeout
        self.max_retries = max_retries
        self.limiter = limiter
        self.key_setting = key_setting
        self._sync: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._async: Any = None
        self._loop_lock = threading.Lock()
        self._down_until = 0.0
        self._down = ""
        self._answered = 0.0
        """When a call last got a reply (``time.monotonic``)."""
        self._gave_up = 0
        """Calls that gave up on a server that seemed down since the last reply."""

    def sync(self) -> Any:
        """The blocking SDK client (made once; its connection pool is kept), which retries
        a call that fails before its reply starts (connection, 429, 5xx)."""
        if self._sync is None:
            self._sync = self.openai.OpenAI(base_url=self.base_url, api_key=self.api_key,
                                            timeout=self.timeout, max_retries=self.max_retries)
        return self._sync

    def submit(self, work: Callable[[Any], Coroutine[Any, Any, T]]) -> T:
        """``work(client)`` run on this endpoint's own event loop with its one async
        client (made once: its connection pool is kept for the process), from any
        thread; cancelled if the wait is interrupted (Ctrl-C)."""
        with self._loop_lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, name="isotope-endpoint",
                                 daemon=True).start()
            loop = self._loop
        future = asyncio.run_coroutine_threadsafe(self._with_client(work), loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    async def _with_client(self, work: Callable[[Any], Coroutine[Any, Any, T]]) -> T:
        if self._async is None:  # (on the loop's one thread: made once)
            self._async = self.make()
        return await work(self._async)

    def close(self) -> None:
        """Close the clients and stop the endpoint's loop."""
        if self._sync is not None:
            self._sync.close()
            self._sync = None
        with self._loop_lock:
            loop, self._loop = self._loop, None
            if loop is None:
                return
            if self._async is not None:
                with contextlib.suppress(Exception):
                    asyncio.run_coroutine_threadsafe(self._async.close(), loop).result(5)
                self._async = None
            self.limiter.rebind()  # its lock belonged to that loop

            def stop() -> None:  # calls still waiting end (cancelled) instead of hanging
                for task in asyncio.all_tasks(loop):
                    task.cancel()
                loop.call_soon(loop.stop)

            loop.call_soon_threadsafe(stop)

    def make(self) -> Any:
        """A new async client, for the event loop of its caller (clients are bound to the
        loop they first run on)."""
        return self.openai.AsyncOpenAI(base_url=self.base_url, api_key=self.api_key,
                                       timeout=self.timeout, max_retries=0)

    async def post(self, client: Any, what: str, path: str, body: dict[str, Any]
                   ) -> dict[str, Any]:
        """POST ``body`` to ``path`` through the SDK's client (its errors, headers and
        timeouts) and return the reply's JSON as it is: the SDK's typed reply costs more
        time than the call (a third of a call's CPU at a server's pace)."""
        import httpx  # (the SDK's own HTTP library)

        response = await client.post(path, body=body, cast_to=httpx.Response)
        try:
            reply = response.json()
        except ValueError as exc:
            raise ProviderError(f"{what}: the endpoint's reply to {path} is not JSON "
                                f"({response.text[:80]!r})") from exc
        if not isinstance(reply, dict):
            raise ProviderError(f"{what}: the endpoint's reply to {path} is not an object")
        return reply

    async def call(self, what: str, tokens: int, request: Callable[[], Awaitable[T]]) -> T:
        """``request()``, retried with backoff; failing at once while the server is known
        to be down (a circuit: see :class:`ServerDown`)."""
        openai = self.openai
        attempt = 0
        started = time.monotonic()
        while True:
            if time.monotonic() < self._down_until:
                raise ServerDown(self._down)
            await self.limiter.acquire(tokens)
            try:
                reply = await request()
                self._down_until, self._answered, self._gave_up = 0.0, time.monotonic(), 0
                return reply
            except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
                raise ProviderAuthError(
                    f"{what}: the endpoint {self.base_url or 'api.openai.com'} refused the "
                    f"credentials (HTTP {exc.status_code}); set {self.key_setting} or "
                    "OPENAI_API_KEY"
                ) from exc
            except (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError,
                    openai.APIConnectionError) as exc:
                if attempt >= self.max_retries:
                    down = (self._answered < started  # no call answered meanwhile
                            and not isinstance(exc, openai.APITimeoutError)
                            and (isinstance(exc, openai.APIConnectionError)
                                 or getattr(exc, "status_code", None) in DOWN_STATUSES))
                    self._gave_up = self._gave_up + 1 if down else 0
                    if down and self._gave_up >= 2:
                        self._down_until = time.monotonic() + DOWN_FOR
                        self._down = (
                            f"{what}: the model server {self.base_url or 'api.openai.com'} is "
                            f"not answering ({_describe(exc)}, {attempt + 1} attempts over "
                            f"{time.monotonic() - started:.0f} s): no more calls are made to "
                            f"it for {DOWN_FOR:.0f} s; run the command again when it is back "
                            "(`isotope enrich` generates the questions of what was stored)")
                        raise ServerDown(self._down) from exc
                    raise ProviderError(f"{what}: gave up after {attempt + 1} attempts: "
                                        f"{_describe(exc)}") from exc
                delay = _retry_after(exc) or min(30.0, 0.5 * 2**attempt)
                delay += random.uniform(0, delay / 4)
                log.info("%s: %s; retrying in %.1f s", what, _describe(exc), delay)
                await asyncio.sleep(delay)
                attempt += 1
            except openai.APIStatusError as exc:
                raise ProviderError(f"{what}: HTTP {exc.status_code}: {_describe(exc)}") from exc


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    return f"HTTP {status}" if status else type(exc).__name__


def _retry_after(exc: Exception) -> float | None:
    response = getattr(exc, "response", None)
    if response is None:
        return None
    value = response.headers.get("retry-after")
    try:
        return min(60.0, max(0.0, float(value))) if value is not None else None
    except ValueError:
        return None


class OpenAIChat(AsyncFirst, LLM):
    """Chat completions from an OpenAI-compatible endpoint."""

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 concurrency: int = 8, limiter: RateLimiter | None = None,
                 timeout: float = 120.0, max_retries: int = 5) -> None:
        self.model = model
        self.model_id = f"openai:{model}" + (f"@{base_url}" if base_url else "")
        self.concurrency = concurrency
        self._slots: asyncio.Semaphore | None = None
        self._no_logprobs = False
        self._client = EndpointClient(base_url, api_key, timeout=timeout, max_retries=max_retries,
                               limiter=limiter or RateLimiter(),
                               key_setting="ISOTOPE_OPENAI_API_KEY")

    concurrent_calls = True

    def complete_batch(
        self, prompts: Sequence[Prompt], *, max_tokens: int = 256, temperature: float = 0.0,
        json_schema: dict[str, Any] | None = None,
    ) -> list[str]:
        """The batch on the endpoint's own loop and client, in the provider's shared
        ``llm_concurrency`` slots (with any other thread's batch in flight)."""
        return self._client.submit(lambda client: self._batch(
            client, None, prompts, max_tokens=max_tokens, temperature=temperature,
            json_schema=json_schema))

    async def acomplete_batch(
        self, prompts: Sequence[Prompt], *, max_tokens: int = 256, temperature: float = 0.0,
        json_schema: dict[str, Any] | None = None,
    ) -> list[str]:
        """The batch on the caller's event loop, with a client of its own."""
        client = self._client.make()
        try:
            return await self._batch(client, asyncio.Semaphore(self.concurrency), prompts,
                                     max_tokens=max_tokens, temperature=temperature,
                                     json_schema=json_schema)
        finally:
            await client.close()

    async def _batch(
        self, client: Any, semaphore: asyncio.Semaphore | None, prompts: Sequence[Prompt], *,
        max_tokens: int, temperature: float, json_schema: dict[str, Any] | None,
    ) -> list[str]:
        """The batch's calls, at most ``semaphore``'s at once (None: the provider's slots
        on the endpoint's loop, shared by every batch there)."""
        if semaphore is None:
            if self._slots is None:  # (on the endpoint loop's one thread)
                self._slots = asyncio.Semaphore(self.concurrency)
            semaphore = self._slots
        extra: dict[str, Any] = {}
        if json_schema is not None:  # JSON mode is the widely supported subset
            extra["response_format"] = {"type": "json_object"}
        refused: list[ProviderError] = []  # (credentials refused, or the server down)

        async def one(prompt: Prompt) -> str:
            async with semaphore:
                if refused:  # fail fast: no more calls once one of them failed for good
                    raise refused[0]
                estimate = sum(len(m["content"]) for m in prompt) // 4 + max_tokens
                try:
                    reply = await self._client.call(
                        self.model_id, estimate,
                        lambda: self._client.post(client, self.model_id, "/chat/completions", {
                            "model": self.model, "messages": prompt,
                            "max_tokens": max_tokens, "temperature": temperature, **extra}),
                    )
                except (ProviderAuthError, ServerDown) as exc:
                    refused.append(exc)
                    raise
                return self._content(reply)

        outcomes = await asyncio.gather(*(one(p) for p in prompts), return_exceptions=True)
        if refused:
            raise refused[0]
        return collect(outcomes)


    def yes_probability(self, prompt: Prompt) -> float | None:
        """P(yes) from the first token's ``top_logprobs`` (one token asked for); None when
        the endpoint gives no log-probabilities (it refuses them, or leaves them out):
        it is then not asked again."""
        if self._no_logprobs:
            return None
        body = {"model": self.model, "messages": prompt, "max_tokens": 1, "temperature": 0.0,
                "logprobs": True, "top_logprobs": 20}
        try:
            reply = self._client.submit(lambda client: self._client.call(
                self.model_id, sum(len(m["content"]) for m in prompt) // 4 + 1,
                lambda: self._client.post(client, self.model_id, "/chat/completions", body)))
        except (ProviderAuthError, ServerDown):
            raise
        except ProviderError as exc:  # (an endpoint without logprobs may refuse them)
            refused = ": HTTP 4" in str(exc)
            log.warning("%s: no log-probabilities for this answer's check (%s)%s",
                        self.model_id, exc, ": answers are checked by their words alone"
                        if refused else "")
            self._no_logprobs = refused
            return None
        self._content(reply)  # (its usage counted)
        try:
            first = reply["choices"][0]["logprobs"]["content"][0]
            tops = {str(t["token"]): float(t["logprob"]) for t in first["top_logprobs"]}
            tops.setdefault(str(first["token"]), float(first["logprob"]))
        except (KeyError, TypeError, IndexError, ValueError):
            log.warning("%s gives no log-probabilities: answers are checked by their words "
                        "alone", self.model_id)
            self._no_logprobs = True
            return None
        return yes_share(tops)

    def _content(self, reply: dict[str, Any]) -> str:
        """A chat reply's text (its usage counted); "" when it has no choice."""
        usage = reply.get("usage")
        if isinstance(usage, dict):
            self.usage.add(int(usage.get("prompt_tokens") or 0),
                           int(usage.get("completion_tokens") or 0))
        choices = reply.get("choices")
        if not choices:
            return ""
        try:
            content = choices[0]["message"]["content"]
        except (KeyError, TypeError, IndexError) as exc:
            raise ProviderError(f"{self.model_id}: a chat reply without a message: "
                                f"{str(reply)[:120]}") from exc
        return str(content or "")

    def stream(self, prompt: Prompt, *, max_tokens: int = 256, temperature: float = 0.0
               ) -> Iterator[str]:
        """The reply's pieces as the server sends them; closing the iterator closes the
        connection, which stops the server generating."""
        openai = self._client.openai
        try:
            pieces = self._client.sync().chat.completions.create(
                model=self.model, messages=prompt, max_tokens=max_tokens,
                temperature=temperature, stream=True)
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise ProviderAuthError(
                f"{self.model_id}: the endpoint refused the credentials (HTTP "
                f"{exc.status_code}); set ISOTOPE_OPENAI_API_KEY or OPENAI_API_KEY") from exc
        except openai.APIError as exc:
            raise ProviderError(f"{self.model_id}: {_describe(exc)}") from exc
        try:
            for piece in pieces:
                if piece.choices and piece.choices[0].delta.content:
                    yield str(piece.choices[0].delta.content)
        except openai.APIError as exc:
            raise ProviderError(f"{self.model_id}: {_describe(exc)}") from exc
        finally:
            pieces.close()

    def close(self) -> None:
        """Close the client and its loop (a later call makes new ones)."""
        self._client.close()
        self._slots = None  # (bound to the loop just stopped)


