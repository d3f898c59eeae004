"""Keyword scoring, the same for every engine: the terms (FTS5's own tokenizer), the
query's terms and their weights, and BM25 as FTS5 computes it.

Both engines rank alike because both take their terms and their formula from here: the
embedded store's FTS5 tables use :data:`TOKENIZE` (and its saved postings,
:mod:`isotope.stores.sqlite_keywords`, score with :func:`idf` and :func:`saturation`); the
PostgreSQL store keeps postings made by :class:`Tokenizer` and computes the same formula
in SQL from :data:`K1`, :data:`B` and :data:`MIN_IDF` (:func:`isotope.stores.postgres_sql.bm25`).

BM25 (Robertson et al.), FTS5's variant: for each query term t held by n of N rows,
``idf(t) = ln((N - n + 0.5) / (n + 0.5))``, floored at 1e-6 (terms in half the rows or
more); a row of length L holding t f times gains ``idf(t) * f (k1 + 1) / (f + k1 (1 - b +
b L / avgdl))``; a query is its words OR'ed, each word a phrase, so a term scores once per
word that makes it."""

from __future__ import annotations

import re
import sqlite3
import threading
from collections import Counter
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

K1, B = 1.2, 0.75
"""FTS5's BM25 constants."""
MIN_IDF = 1e-6
"""FTS5's idf for terms in half the rows or more."""
TOKENIZE = "porter unicode61"
"""The tokenizer of the embedded store's FTS5 tables (and so of every engine's terms)."""

Floats = npt.NDArray[np.float64]


def idf(rows: int, holding: Floats) -> Floats:
    """FTS5's idf of terms held by ``holding`` of ``rows`` rows."""
    value = np.log((rows - holding + 0.5) / (holding + 0.5))
    return np.where(value <= 0, MIN_IDF, value)


def saturation(freqs: Floats, lengths: Floats, avgdl: float) -> Floats:
    """The term-frequency part of BM25 for rows of ``lengths`` holding a term ``freqs``
    times (times the term's idf: its score)."""
    return freqs * (K1 + 1) / (freqs + K1 * (1 - B + B * lengths / avgdl))


def query_words(query: str) -> list[str]:
    """The words of a keyword query, lowercased, each once, in order (what both engines
    OR together; punctuation separates words and is never FTS5 syntax)."""
    return list(dict.fromkeys(re.findall(r"\w+", query.lower())))


def query_terms(words: Sequence[str], tokenizer: Tokenizer | None = None) -> Counter[str]:
    """The terms of ``words`` and how many words make each (its weight: a term scores
    once per word, as FTS5 scores each OR'ed phrase)."""
    counted: Counter[str] = Counter()
    for terms in (tokenizer or TOKENIZER).words(words):
        counted.update(set(terms))
    return counted


class Tokenizer:
    """FTS5's own tokenizer, run on a private in-memory database: terms are exactly those
    FTS5 indexes and matches. Thread-safe (one lock); each word's terms are remembered."""

    def __init__(self) -> None:
        self._conn = sqlite3.connect(":memory:", check_same_thread=False)
        self._conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(text, tokenize='{TOKENIZE}')")
        self._conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
        self._lock = threading.Lock()
        self._words: dict[str, tuple[str, ...]] = {}

    def texts(self, texts: Sequence[str]) -> list[Counter[str]]:
        """The term frequencies of each text."""
        counts: list[Counter[str]] = [Counter() for _ in texts]
        with self._lock:
            self._conn.executemany("INSERT INTO t(rowid, text) VALUES (?, ?)",
                                   enumerate(texts))
            for doc, term in self._conn.execute("SELECT doc, term FROM v"):
                counts[doc][term] += 1
            self._conn.execute("DELETE FROM t")
        return counts

    def words(self, words: Sequence[str]) -> list[tuple[str, ...]]:
        """The terms of each word, in order (usually one; a word FTS5 splits has more)."""
        new = [w for w in dict.fromkeys(words) if w not in self._words]
        if new:
            with self._lock:
                self._conn.executemany("INSERT INTO t(rowid, text) VALUES (?, ?)",
                                       enumerate(new))
                found: dict[int, list[str]] = {}
                for doc, term in self._conn.execute("SELECT doc, term FROM v ORDER BY doc, "
                                                    "offset"):
                    found.setdefault(doc, []).append(term)
                self._conn.execute("DELETE FROM t")
            if len(self._words) > 100_000:
                self._words.clear()
            for i, word in enumerate(new):
                self._words[word] = tuple(found.get(i, ()))
        return [self._words[w] for w in words]


TOKENIZER = Tokenizer()
"""The process's tokenizer."""
