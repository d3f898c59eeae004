"""A content-addressed cache of language model replies and embeddings, so unchanged
content is never paid for twice.

A reply is keyed by the sha256 of (model id, the whole prompt, generation parameters):
the prompt carries the prompt version and the input text, so changing the question prompt
misses the cache for questions but still hits it for atoms. An embedding is keyed by
(embedding model id, text), so changing the embedding model re-embeds but regenerates
nothing. The cache is one SQLite file (``cache_dir/cache.db``) shared by every index of
the user; it is safe to delete.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import shlex
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from isotope.embedders import Embedder, Vectors
from isotope.models import CacheStats
from isotope.providers import LLM, BatchGenerationError, Limits, Prompt, Usage

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, text TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL DEFAULT 0, completion_tokens INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS embeddings (key TEXT PRIMARY KEY, vector BLOB NOT NULL);
"""

_T = TypeVar("_T")


class Cache:
    """The cache file. Thread-safe; several processes may share it (SQLite WAL).

    Nothing touches the file system before the first lookup or store. A cache that cannot
    be opened, read or written (not a database, corrupt, read-only, a folder where the file
    should be, ...) turns itself off for the rest of its life with one warning: lookups
    then find nothing and stores keep nothing, so the work goes on uncached. Only errors of
    the cache file are absorbed so; the caller's own errors propagate."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._local = threading.local()
        self._lock = threading.Lock()
        self.broken: str | None = None
        """Why the cache turned itself off (None: it is on)."""

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            # Opened on first use, once per thread: the folder and the tables too, as the
            # file may have been deleted since another thread opened it.
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None,
                                   check_same_thread=False)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.executescript(_SCHEMA)
            except BaseException:
                conn.close()
                raise
            self._local.conn = conn
        return conn

    def _use(self, work: Callable[[sqlite3.Connection], _T], default: _T) -> _T:
        """``work`` on this thread's connection, or ``default`` if the cache is off or
        fails now (which turns it off)."""
        if self.broken is None:
            try:
                return work(self._conn())
            except (sqlite3.Error, OSError) as exc:
                self._disable(exc)
        self.close()
        return default

    def _disable(self, exc: sqlite3.Error | OSError) -> None:
        with self._lock:
            if self.broken is not None:
                return
            self.broken = self._reason(exc)
        log.warning("the cache at %s is unusable (%s); working without it. %s",
                    self.path, self.broken, self._advice())

    def _blocking_file(self) -> Path | None:
        """The nearest existing ancestor of the cache file, if it is not a folder."""
        for parent in self.path.parents:
            try:
                if parent.exists():
                    return None if parent.is_dir() else parent
            except OSError:
                return None
        return None

    def _reason(self, exc: sqlite3.Error | OSError) -> str:
        if isinstance(exc, sqlite3.Error):
            return str(exc) or type(exc).__name__
        blocking = self._blocking_file()
        if blocking is not None:
            return f"{blocking} is not a directory"
        if exc.strerror and exc.filename:
            return f"{exc.strerror}: {exc.filename}"
        return str(exc) or type(exc).__name__

    def _advice(self) -> str:
        try:
            if self._blocking_file() is not None:
                return ("Set cache_dir (ISOTOPE_CACHE_DIR) to a folder, or turn the cache "
                        "off (ISOTOPE_CACHE=false).")
            if self.path.is_dir():
                return f"Deleting it is safe: rm -r {shlex.quote(str(self.path))}"
            if self.path.exists():
                files = [self.path, *(Path(f"{self.path}{end}") for end in ("-wal", "-shm"))]
                names = " ".join(shlex.quote(str(f)) for f in files if f.exists())
                return f"Deleting it is safe: rm {names}"
        except OSError:
            pass
        return ("Set cache_dir (ISOTOPE_CACHE_DIR) to a writable folder, or turn the cache "
                "off (ISOTOPE_CACHE=false).")

    @staticmethod
    def reply_key(model_id: str, prompt: Prompt, params: dict[str, Any]) -> str:
        blob = json.dumps([model_id, prompt, params], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    @staticmethod
    def embedding_key(model_id: str, text: str) -> str:
        return hashlib.sha256(f"{model_id}\x1f{text}".encode()).hexdigest()

    def get_replies(self, keys: Sequence[str]) -> dict[str, tuple[str, int, int]]:
        """The cached replies among ``keys`` (none if the cache is off or fails)."""
        if not keys:
            return {}

        def read(conn: sqlite3.Connection) -> dict[str, tuple[str, int, int]]:
            found: dict[str, tuple[str, int, int]] = {}
            for start in range(0, len(keys), 500):
                part = keys[start : start + 500]
                rows = conn.execute(
                    f"SELECT key, text, prompt_tokens, completion_tokens FROM replies "
                    f"WHERE key IN ({','.join('?' * len(part))})", list(part),
                )
                # A row of the wrong types (a damaged page) is a miss.
                found.update({r[0]: (r[1], r[2], r[3]) for r in rows
                              if isinstance(r[1], str) and isinstance(r[2], int)
                              and isinstance(r[3], int)})
            return found

        return self._use(read, {})

    def put_replies(self, rows: Sequence[tuple[str, str, int, int]]) -> None:
        if rows:
            self._use(lambda conn: conn.executemany(
                "INSERT OR REPLACE INTO replies VALUES (?, ?, ?, ?)", list(rows)), None)

    def get_embeddings(self, keys: Sequence[str]) -> dict[str, bytes]:
        """The cached vectors among ``keys`` (none if the cache is off or fails)."""
        if not keys:
            return {}

        def read(conn: sqlite3.Connection) -> dict[str, bytes]:
            found: dict[str, bytes] = {}
            for start in range(0, len(keys), 500):
                part = keys[start : start + 500]
                rows = conn.execute(
                    f"SELECT key, vector FROM embeddings "
                    f"WHERE key IN ({','.join('?' * len(part))})", list(part),
                )
                found.update({r[0]: r[1] for r in rows if isinstance(r[1], bytes)})
            return found

        return self._use(read, {})

    def put_embeddings(self, rows: Sequence[tuple[str, bytes]]) -> None:
        if rows:
            self._use(lambda conn: conn.executemany(
                "INSERT OR REPLACE INTO embeddings VALUES (?, ?)", list(rows)), None)

    def close(self) -> None:
        """Close this thread's connection (the next use opens another)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            self._local.conn = None
            with contextlib.suppress(sqlite3.Error):
                conn.close()


class CachedLLM(LLM):
    """Answers from the cache what it can, and asks the wrapped model for the rest (in one
    batch). Replies are stored as they arrive, so a batch that fails half way keeps what
    succeeded and a re-run asks only for the missing ones. With ``cache=None`` it only
    counts the calls (``stats.misses``)."""

    stats: CacheStats

    def __init__(self, inner: LLM, cache: Cache | None, *, seed: int = 0) -> None:
        self.inner = inner
        self.cache = cache
        self.model_id = inner.model_id
        self.batch_sequences = inner.batch_sequences  # forwarded: see sample_batched
        self.local = inner.local
        self.concurrent_calls = inner.concurrent_calls
        self.seed = seed
        self.stats = CacheStats()

    @property
    def usage(self) -> Usage:
        return self.inner.usage

    def _keys(self, prompts: Sequence[Prompt], max_tokens: int, temperature: float,
              json_schema: dict[str, Any] | None = None) -> list[str]:
        params = {"max_tokens": max_tokens, "temperature": temperature, "seed": self.seed,
                  "json_schema": json_schema}
        return [Cache.reply_key(self.model_id, p, params) for p in prompts]

    def _batched_keys(self, prompts: Sequence[Prompt], max_tokens: int, temperature: float,
                      questions: int, limits: Sequence[Limits] | None = None) -> list[str]:
        """Each prompt's key, with its own ``limits`` where given."""
        ends = limits or [Limits(max_tokens, questions)] * len(prompts)
        return [Cache.reply_key(self.model_id, p, {
            "sampling": "batched", "max_tokens": end.max_tokens, "temperature": temperature,
            "seed": self.seed, "questions": end.questions}) for p, end in zip(
                prompts, ends, strict=True)]

    def cached(self, prompts: Sequence[Prompt], *, max_tokens: int = 256,
               temperature: float = 0.0, json_schema: dict[str, Any] | None = None,
               batched: int | None = None) -> list[bool]:
        """Which prompts the cache already answers (for dry runs); ``batched``: as
        replies of :meth:`sample_batched` asking for that many questions."""
        if self.cache is None:
            return [False] * len(prompts)
        keys = (self._keys(prompts, max_tokens, temperature, json_schema) if batched is None
                else self._batched_keys(prompts, max_tokens, temperature, batched))
        found = self.cache.get_replies(keys)
        return [k in found for k in keys]

    def complete_batch(
        self, prompts: Sequence[Prompt], *, max_tokens: int = 256, temperature: float = 0.0,
        json_schema: dict[str, Any] | None = None,
    ) -> list[str]:
        if self.cache is None:
            self.stats.count(0, len(prompts))
            return self.inner.complete_batch(prompts, max_tokens=max_tokens,
                                             temperature=temperature, json_schema=json_schema)
        keys = self._keys(prompts, max_tokens, temperature, json_schema)
        found = self.cache.get_replies(keys)
        replies: list[str | None] = [found[k][0] if k in found else None for k in keys]
        missing = [i for i, r in enumerate(replies) if r is None]
        self.stats.count(len(prompts) - len(missing), len(missing))
        if not missing:
            return [r or "" for r in replies]
        before = Usage(self.inner.usage.prompt_tokens, self.inner.usage.completion_tokens)
        try:
            fresh: Sequence[str | None] = self.inner.complete_batch(
                [prompts[i] for i in missing], max_tokens=max_tokens, temperature=temperature,
                json_schema=json_schema,
            )
            error: BatchGenerationError | None = None
        except BatchGenerationError as exc:
            fresh, error = exc.results, exc
        spent = self.inner.usage.completion_tokens - before.completion_tokens
        per_call = spent // max(1, len(missing))
        self.cache.put_replies([
            (keys[i], text, 0, per_call) for i, text in zip(missing, fresh, strict=True)
            if text is not None
        ])
        for i, text in zip(missing, fresh, strict=True):
            replies[i] = text
        if error is not None:
            raise BatchGenerationError(
                replies, {missing[i]: message for i, message in error.failures.items()}
            ) from error
        return [r or "" for r in replies]

    def stream(self, prompt: Prompt, *, max_tokens: int = 256, temperature: float = 0.0
               ) -> Iterator[str]:
        """A cached reply whole; else the model's pieces as they come, the reply cached
        once it is complete (a stream stopped early is not)."""
        key = self._keys([prompt], max_tokens, temperature)[0]
        found = self.cache.get_replies([key]) if self.cache is not None else {}
        if key in found:
            self.stats.count(1, 0)
            yield found[key][0]
            return
        self.stats.count(0, 1)
        pieces: list[str] = []
        stream = self.inner.stream(prompt, max_tokens=max_tokens, temperature=temperature)
        try:
            for piece in stream:
                pieces.append(piece)
                yield piece
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        if self.cache is not None:
            self.cache.put_replies([(key, "".join(pieces), 0, 0)])

    def yes_probability(self, prompt: Prompt) -> float | None:
        """The wrapped model's P(yes), cached as a reply is (a model that gives none is
        asked each time: it answers at once)."""
        key = Cache.reply_key(self.model_id, prompt, {"yes_probability": 1})
        found = self.cache.get_replies([key]) if self.cache is not None else {}
        if key in found:
            with contextlib.suppress(ValueError):
                held = float(found[key][0])
                self.stats.count(1, 0)
                return held
        probability = self.inner.yes_probability(prompt)
        if probability is not None:
            self.stats.count(0, 1)
            if self.cache is not None:
                self.cache.put_replies([(key, repr(probability), 0, 1)])
        return probability

    def sample_batched(self, groups: Sequence[Sequence[Prompt]], *, max_tokens: int,
                       temperature: float, questions: int,
                       limits: Sequence[Sequence[Limits]] | None = None) -> list[list[str]]:
        """Batched decoding of the wrapped local model, each reply cached like any other;
        the prompts the cache lacks go to the model in one call."""
        sampler = self.inner.sample_batched
        keys = [self._batched_keys(prompts, max_tokens, temperature, questions,
                                   limits[g] if limits else None)
                for g, prompts in enumerate(groups)]
        found = self.cache.get_replies([k for ks in keys for k in ks]) if self.cache else {}
        out = [[found[k][0] if k in found else None for k in ks] for ks in keys]
        missing = [[i for i, r in enumerate(rs) if r is None] for rs in out]
        asked = sum(len(m) for m in missing)
        self.stats.count(sum(len(ks) for ks in keys) - asked, asked)
        if asked:
            asking: dict[str, Any] = {} if limits is None else {"limits": [
                [limits[g][i] for i in m] for g, m in enumerate(missing)]}
            fresh: list[list[str]] = sampler(
                [[prompts[i] for i in m] for prompts, m in zip(groups, missing, strict=True)],
                max_tokens=max_tokens, temperature=temperature, questions=questions,
                **asking)
            rows = []
            for g, (m, replies) in enumerate(zip(missing, fresh, strict=True)):
                for i, text in zip(m, replies, strict=True):
                    out[g][i] = text
                    rows.append((keys[g][i], text, 0, 0))
            if self.cache is not None:
                self.cache.put_replies(rows)
        return [[r or "" for r in rs] for rs in out]

    def close(self) -> None:
        self.inner.close()


class CachedEmbedder(Embedder):
    """Embeds only texts the cache has not seen with this model."""

    stats: CacheStats

    def __init__(self, inner: Embedder, cache: Cache) -> None:
        self.inner = inner
        self.cache = cache
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.batch_size = inner.batch_size
        self.two_sided = inner.two_sided
        self.question_filter = inner.question_filter
        self.stats = CacheStats()

    def close(self) -> None:
        self.inner.close()

    def embed_batch(self, texts: Sequence[str]) -> Vectors:
        return self.embed(texts)

    def embed(self, texts: Sequence[str]) -> Vectors:
        return self._cached(texts, self.model_id, self.inner.embed)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        # (the key of a document differs only when the model embeds it differently)
        return self._cached(texts, ("document\x1f" if self.two_sided else "") + self.model_id,
                            self.inner.embed_documents)

    def _cached(self, texts: Sequence[str], model: str,
                embed: Callable[[Sequence[str]], Vectors]) -> Vectors:
        keys = [self.cache.embedding_key(model, t) for t in texts]
        size = self.dim * np.dtype(np.float32).itemsize
        # A vector of the wrong size (a damaged page) is a miss, and is stored again.
        found = {k: v for k, v in self.cache.get_embeddings(keys).items() if len(v) == size}
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        missing = [i for i, k in enumerate(keys) if k not in found]
        for i, k in enumerate(keys):
            if k in found:
                out[i] = np.frombuffer(found[k], dtype=np.float32)
        self.stats.count(len(texts) - len(missing), len(missing))
        if missing:
            vectors = embed([texts[i] for i in missing])
            out[missing] = vectors
            self.cache.put_embeddings(
                [(keys[i], vectors[j].tobytes()) for j, i in enumerate(missing)]
            )
        return out

    def embed_one(self, text: str) -> Vectors:
        # Queries are not cached: one lookup costs about what embedding costs.
        return self.inner.embed_one(text)

    def count_tokens(self, text: str) -> int | None:
        return self.inner.count_tokens(text)
