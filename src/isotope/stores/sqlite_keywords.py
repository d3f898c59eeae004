"""Keyword search for large kinds of the embedded store: BM25 as FTS5 computes it, read
from a saved impact index instead of FTS5's doclists.

Why: FTS5's ``bm25()`` reads every posting of every query term twice per query (once to
count the rows that hold the term, for its idf; once to score every row holding any
term), so a query with one common word costs tens of milliseconds at a few hundred
thousand rows. The saved index holds each term's postings (row, term frequency) sorted by
row, each row's length and each term's largest score, so a query scores the rows of its
rare terms first and looks up the common terms only for those rows, stopping as soon as
no other row can enter the top k (MaxScore, Turtle and Flood 1995).

The index is made from FTS5's own tokens (``fts5vocab``) and scores with FTS5's
formula (:mod:`isotope.stores.keywords`), so its ranking and scores are FTS5's (ties go
to the lower row id, as the store asks FTS5).
The statistics (row count, average length, each term's row count) are those of the last
compaction; the rows changed since (the vector log's entries) are hidden from the saved
postings and scored apart, from their text, with the same statistics. A 5-byte posting
(row, term frequency) per term of each row: 70 MB for the atoms and chunks of a million
questions.

It is derived from the FTS5 tables: a missing or damaged file makes keyword search fall
back to FTS5 (slower, never wrong) until the next compaction makes it again. The file
says how to tell: a CRC-32 of each small array (checked when the file is opened) and of
each block of :data:`BLOCK` postings (checked the first time a query reads the block),
with the postings' bounds; a file that fails either is not used again by the process,
and ``isotope check`` names it.

Why one module of this size: the file's layout, its checksums, the build from FTS5's
tables and the MaxScore search over it must agree byte for byte; the scoring itself
(terms, idf, saturation) is :mod:`isotope.stores.keywords`."""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from isotope.ann import write_file
from isotope.stores.keywords import TOKENIZER, idf, query_terms, saturation

log = logging.getLogger(__name__)
SUFFIX = "keywords"
MAGIC = b"ISOKW002"
"""(``ISOKW001``, without checksums and with term frequencies capped at 255, is read as
missing: the next compaction writes the new form.)"""
BLOCK = 65_536
"""Postings per checksummed block."""
DENSE_FROM = 200_000
"""Candidate rows from which a query scores every posting of its terms at once."""

Floats = npt.NDArray[np.float64]
Rows = npt.NDArray[np.int64]


def term_key(term: str) -> int:
    """A term's 64-bit key (stable across processes, unlike ``hash``)."""
    return int.from_bytes(hashlib.blake2b(term.encode(), digest_size=8).digest(), "little")


class DamagedKeywords(ValueError):
    """A saved keyword index whose bytes differ from what was written."""


def _crc(array: npt.NDArray[Any]) -> int:
    return zlib.crc32(np.ascontiguousarray(array).data)


def frequencies(freqs: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Term frequencies in the smallest unsigned type that holds them all (no cap: a
    term written 600 times in a row counts 600 times, as in FTS5)."""
    top = int(freqs.max()) if len(freqs) else 0
    kind = np.uint8 if top < 2**8 else np.uint16 if top < 2**16 else np.uint32
    return freqs.astype(kind)




@dataclass
class KeywordBase:
    """The saved postings of one kind (arrays may be mapped from the file)."""

    rows: npt.NDArray[np.int64]
    """Row id of each document, ascending (documents are numbered by position here)."""
    lengths: npt.NDArray[np.uint32]
    """Tokens of each document."""
    keys: npt.NDArray[np.uint64]
    """Each term's key, ascending."""
    starts: npt.NDArray[Any]
    """Where each term's postings start (one more: where the last ends)."""
    tops: npt.NDArray[np.float16]
    """Each term's largest tf-part of a row's score, rounded up (times the term's weight:
    the most it can add to a row's score)."""
    docs: npt.NDArray[np.int32]
    freqs: npt.NDArray[Any]
    """Postings: document and term frequency (see :func:`frequencies`), by term then
    document."""
    total: int
    """FTS5's row count and token count, for idf and the average length."""
    tokens: int
    blocks: dict[str, list[int]] | None = None
    """CRC-32 of each block of :data:`BLOCK` postings of ``docs`` and ``freqs`` (None: a
    base being built, not read from a file)."""
    verified: npt.NDArray[np.bool_] | None = None
    """Blocks checked so far."""
    damaged: str = ""
    """Why the file cannot be used (set by the first block that fails)."""
    @property
    def avgdl(self) -> float:
        return self.tokens / max(1, self.total)

    def __len__(self) -> int:
        return len(self.rows)

    def saturation(self, freqs: Floats, lengths: Floats) -> Floats:
        return saturation(freqs, lengths, self.avgdl)

    def holding(self, terms: npt.NDArray[np.int64]) -> Floats:
        """How many rows hold each term (by position)."""
        ends: Floats = np.asarray(self.starts[terms + 1], dtype=np.float64)
        return ends - np.asarray(self.starts[terms], dtype=np.float64)

    def find(self, keys: Sequence[int]) -> npt.NDArray[np.int64]:
        """The position of each key among the terms, -1 if no row holds it."""
        wanted = np.array(keys, dtype=np.uint64)
        at = np.searchsorted(self.keys, wanted)
        at = np.minimum(at, max(0, len(self.keys) - 1))
        found = (self.keys[at] == wanted) if len(self.keys) else np.zeros(len(wanted), bool)
        return np.where(found, at, -1).astype(np.int64)

    def postings(self, term: int) -> tuple[npt.NDArray[np.int32], npt.NDArray[Any]]:
        """A term's postings; :class:`DamagedKeywords` if a block they lie in fails its
        checksum or holds a document out of range (checked once per block)."""
        start, end = int(self.starts[term]), int(self.starts[term + 1])
        if self.blocks is not None and end > start:
            self._verify(start // BLOCK, (end - 1) // BLOCK)
        return self.docs[start:end], self.freqs[start:end]

    def _verify(self, first: int, last: int) -> None:
        if self.damaged:
            raise DamagedKeywords(self.damaged)
        assert self.blocks is not None and self.verified is not None
        for block in range(first, last + 1):
            if self.verified[block]:
                continue
            part = slice(block * BLOCK, (block + 1) * BLOCK)
            docs, freqs = self.docs[part], self.freqs[part]
            if (_crc(docs) != self.blocks["docs"][block]
                    or _crc(freqs) != self.blocks["freqs"][block]
                    or (len(docs) and (int(docs.min()) < 0 or int(docs.max()) >= len(self)))):
                self.damaged = f"postings block {block} differs from what was saved"
                raise DamagedKeywords(self.damaged)
            self.verified[block] = True

    # -- the file ----------------------------------------------------------------------
    _ARRAYS = ("rows", "lengths", "keys", "starts", "tops", "docs", "freqs")

    def save(self, path: Path) -> None:
        arrays = {name: np.ascontiguousarray(getattr(self, name)) for name in self._ARRAYS}
        header: dict[str, Any] = {"total": self.total, "tokens": self.tokens, "arrays": {},
                                  "blocks": {name: [_crc(arrays[name][i:i + BLOCK])
                                                    for i in range(0, len(arrays[name]),
                                                                   BLOCK)]
                                             for name in ("docs", "freqs")}}
        offset = 0
        for name, array in arrays.items():
            crc = _crc(array) if name not in ("docs", "freqs") else None
            header["arrays"][name] = [array.dtype.str, offset, len(array), crc]
            offset += _padded(array.nbytes)
        header["digest"] = _header_digest(header)
        head = json.dumps(header).encode()

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as fh:
                fh.write(MAGIC + len(head).to_bytes(8, "little"))
                fh.write(head + b" " * (_padded(len(head)) - len(head)))
                for array in arrays.values():
                    _write_padded(fh, array)

        write_file(path, write)

    @classmethod
    def load(cls, path: Path) -> KeywordBase:
        """The base saved at ``path``, mapped (``ValueError`` if it is not one, or its
        small arrays fail their checksums or bounds; the postings are checked a block at a
        time as queries read them)."""
        with open(path, "rb") as fh:
            start = fh.read(16)
            if len(start) < 16 or start[:8] != MAGIC:
                raise ValueError(f"{path} is not a keyword index")
            size = int.from_bytes(start[8:], "little")
            header = json.loads(fh.read(size))
        if not isinstance(header, dict) or (
                "digest" in header and header["digest"] != _header_digest(header)):
            raise DamagedKeywords(f"{path}: its header differs from what was saved")
        data = 16 + _padded(size)
        made: dict[str, Any] = {}
        expected = data
        for name in cls._ARRAYS:
            dtype, offset, count, crc = header["arrays"][name]
            made[name] = (np.memmap(path, dtype=np.dtype(dtype), mode="r",
                                    offset=data + offset, shape=(count,)).view(np.ndarray)
                          if count else np.zeros(0, dtype=np.dtype(dtype)))
            expected = max(expected, data + offset + _padded(np.dtype(dtype).itemsize * count))
        if path.stat().st_size != expected:
            raise ValueError(f"{path} has the wrong size")
        for name in cls._ARRAYS:
            crc = header["arrays"][name][3]
            if crc is not None and _crc(made[name]) != crc:
                raise DamagedKeywords(f"{path}: its {name} differ from what was saved")
        blocks = {name: [int(c) for c in header["blocks"][name]] for name in ("docs", "freqs")}
        starts = made["starts"]
        if (len(starts) != len(made["keys"]) + 1 or (len(starts) and int(starts[0]) != 0)
                or (len(starts) and int(starts[-1]) != len(made["docs"]))
                or len(made["freqs"]) != len(made["docs"])
                or len(made["lengths"]) != len(made["rows"])
                or len(blocks["docs"]) != -(-len(made["docs"]) // BLOCK)
                or (len(starts) > 1 and bool((np.diff(starts.astype(np.int64)) < 0).any()))):
            raise DamagedKeywords(f"{path}: its arrays do not fit together")
        return cls(**made, total=int(header["total"]), tokens=int(header["tokens"]),
                   blocks=blocks, verified=np.zeros(len(blocks["docs"]), bool))

    # -- making one --------------------------------------------------------------------
    @classmethod
    def build(cls, conn: sqlite3.Connection, kind: str) -> KeywordBase:
        """The postings of FTS5 table ``{kind}_fts`` as ``conn`` sees it now (read in
        batches: never every posting as Python objects)."""
        for view in ("row", "instance"):
            conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.isotope_{kind}_{view} "
                         f"USING fts5vocab(main, '{kind}_fts', '{view}')")
        rows, lengths = _document_lengths(conn, kind)
        terms, sizes, docs, freqs = _postings(conn, kind, rows)
        keys = np.array([term_key(t) for t in terms], dtype=np.uint64)
        order = np.argsort(keys, kind="stable")  # postings laid out in key order
        was = np.r_[0, np.cumsum(sizes)][:-1]
        sizes = sizes[order]
        written = int(sizes.sum())
        starts = np.r_[0, np.cumsum(sizes)]
        # each term's postings, moved from where it was read to its place in key order
        moved = np.arange(written) + np.repeat(was[order] - starts[:-1], sizes)
        docs, freqs = docs[moved], freqs[moved]
        base = cls(rows=rows, lengths=lengths, keys=keys[order],
                   starts=starts.astype(np.uint32 if written < 2**32 else np.int64),
                   tops=np.zeros(len(keys), np.float16), docs=docs, freqs=frequencies(freqs),
                   total=len(rows), tokens=int(lengths.sum()))
        tops = np.zeros(len(keys))
        if written:  # each term's largest part of a score (every term holds a row)
            parts = base.saturation(freqs.astype(float), lengths[docs].astype(float))
            tops = np.maximum.reduceat(parts, starts[:-1])
        rounded = tops.astype(np.float16)  # up, so that it stays a bound
        low = rounded.astype(float) < tops
        rounded[low] = np.nextafter(rounded[low], np.float16(np.inf))
        base.tops = rounded
        return base


def _header_digest(header: dict[str, Any]) -> int:
    """A checksum of a saved base's header (its counts, array types, offsets and
    checksums): an edit of any of them is found at open, not as wrong scores."""
    rest = {k: v for k, v in header.items() if k != "digest"}
    return zlib.crc32(json.dumps(rest, sort_keys=True).encode())


def _padded(size: int) -> int:
    return (size + 7) // 8 * 8


def _write_padded(fh: BinaryIO, array: npt.NDArray[Any]) -> None:
    data = array.tobytes()
    fh.write(data + b"\0" * (_padded(len(data)) - len(data)))


def _document_lengths(conn: sqlite3.Connection, kind: str
                      ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint32]]:
    """Each FTS5 row's id and length (its columns' token counts, FTS5 varints)."""
    ids: list[int] = []
    sizes: list[int] = []
    for rowid, blob in conn.execute(f"SELECT id, sz FROM {kind}_fts_docsize ORDER BY id"):
        ids.append(rowid)
        sizes.append(_varint_sum(blob or b""))
    return np.array(ids, dtype=np.int64), np.array(sizes, dtype=np.uint32)


def _varint_sum(blob: bytes) -> int:
    """The sum of the SQLite varints in ``blob``."""
    total, value, i = 0, 0, 0
    while i < len(blob):
        value, used = 0, 0
        while True:
            byte = blob[i]
            i += 1
            used += 1
            if used == 9:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if byte < 0x80 or i >= len(blob):
                break
        total += value
    return total


def _postings(conn: sqlite3.Connection, kind: str, rows: Rows, batch: int = 1_000_000
              ) -> tuple[list[str], Rows, npt.NDArray[np.int32], Rows]:
    """The terms of ``kind`` in the order fts5vocab lists them, how many rows hold each,
    and their postings one after another (each row's position among ``rows`` and the
    term's frequency there).

    The terms and how many times each occurs come from the ``row`` view, the row of each
    occurrence from the ``instance`` view, which lists them in the same order (term, then
    row): only row numbers cross into Python, never a term per occurrence, and they are
    counted with array operations about ``batch`` occurrences at a time."""
    listed = conn.execute(f"SELECT term, doc, cnt FROM temp.isotope_{kind}_row").fetchall()
    terms = [str(r[0]) for r in listed]
    holding = np.fromiter((r[1] for r in listed), dtype=np.int64, count=len(listed))
    occurs = np.fromiter((r[2] for r in listed), dtype=np.int64, count=len(listed))
    cursor = conn.execute(f"SELECT doc FROM temp.isotope_{kind}_instance")
    docs: list[Rows] = []
    freqs: list[Rows] = []
    ends = np.cumsum(occurs)
    first = 0
    while first < len(terms):  # whole terms at a time
        last = max(first + 1, int(np.searchsorted(ends, ends[first] + batch, side="right")))
        wanted = int(occurs[first:last].sum())
        found = np.zeros(0, dtype=np.int64)
        while len(found) < wanted and (part := cursor.fetchmany(wanted - len(found))):
            found = np.concatenate([found, np.fromiter((r[0] for r in part), np.int64,
                                                       count=len(part))])
        if len(found) != wanted:
            raise sqlite3.DatabaseError(f"the {kind} keyword index changed while read")
        term = np.repeat(np.arange(last - first), occurs[first:last])
        if ((term[1:] == term[:-1]) & (found[1:] < found[:-1])).any():  # (never seen)
            found = found[np.lexsort((found, term))]
        starts = np.flatnonzero(np.r_[True, (term[1:] != term[:-1])
                                      | (found[1:] != found[:-1])])
        if not np.array_equal(np.bincount(term[starts], minlength=last - first),
                              holding[first:last]):
            raise sqlite3.DatabaseError(f"the {kind} keyword index changed while read")
        docs.append(found[starts])
        freqs.append(np.diff(np.r_[starts, len(found)]))
        first = last
    every = np.concatenate(docs) if docs else np.zeros(0, np.int64)
    return (terms, holding, np.searchsorted(rows, every).astype(np.int32),
            np.concatenate(freqs) if freqs else np.zeros(0, np.int64))


@dataclass
class KeywordLayer:
    """A saved base with the rows changed since: those are hidden from the base and
    scored from their terms. Never changed in place once searched (``changed`` makes a
    new one), so threads can search while another applies the log."""

    base: KeywordBase
    hidden: npt.NDArray[np.bool_] | None = None
    """Base documents removed or replaced since the base was made."""
    rows: Rows = field(default_factory=lambda: np.zeros(0, np.int64))
    keys: npt.NDArray[np.uint64] = field(default_factory=lambda: np.zeros(0, np.uint64))
    freqs: Floats = field(default_factory=lambda: np.zeros(0))
    lengths: Floats = field(default_factory=lambda: np.zeros(0))
    """Postings of the rows added since, one entry per (row, term)."""
    allowed: Rows | None = None
    """Only these rows (sorted) may be found (None: all)."""

    def changed(self, touched: Rows, added: dict[int, Counter[str]]) -> KeywordLayer:
        """This layer with the rows ``touched`` (by the log) removed, then the rows
        ``added`` (row id: term frequencies) added."""
        hidden = (np.zeros(len(self.base), bool) if self.hidden is None
                  else self.hidden.copy())
        at = np.searchsorted(self.base.rows, touched)
        inside = at < len(self.base.rows)
        inside[inside] = self.base.rows[at[inside]] == touched[inside]
        hidden[at[inside]] = True
        keep = ~np.isin(self.rows, touched)
        new_rows = [r for r, terms in added.items() for _ in terms]
        new_keys = [term_key(t) for terms in added.values() for t in terms]
        new_freqs = [float(n) for terms in added.values() for n in terms.values()]
        new_lengths = [float(sum(terms.values())) for terms in added.values() for _ in terms]
        return KeywordLayer(
            self.base, hidden,
            np.concatenate([self.rows[keep], np.array(new_rows, np.int64)]),
            np.concatenate([self.keys[keep], np.array(new_keys, np.uint64)]),
            np.concatenate([self.freqs[keep], np.array(new_freqs)]),
            np.concatenate([self.lengths[keep], np.array(new_lengths)]))

    def search(self, words: Sequence[str], k: int, allowed: Rows | None = None
               ) -> list[tuple[int, float]] | None:
        """The ``k`` best rows ``(row id, score)`` for a query of ``words`` (each an FTS5
        phrase OR'ed with the others), among the row ids ``allowed`` (sorted; None: all:
        the others are left out before the top k is taken, as FTS5's restricted query
        does), or None when FTS5 must answer (a word FTS5 splits in several terms)."""
        terms = TOKENIZER.words(words)
        if any(len(t) != 1 for t in terms) or self.base.total == 0 or self.base.damaged:
            return None  # (an empty base has no statistics to score the rows added since)
        layer = self if allowed is None else self.within(allowed)
        try:
            return layer._search(query_terms(words), k)
        except DamagedKeywords as exc:
            log.warning("the saved keyword index is damaged (%s); keyword search uses FTS5 "
                        "until `isotope compact` or `isotope check --repair` makes it again",
                        exc)
            return None

    def within(self, allowed: Rows) -> KeywordLayer:
        """This layer with every row but ``allowed`` (sorted row ids) hidden."""
        hidden = ~_within(self.base.rows, allowed)
        if self.hidden is not None:
            hidden |= self.hidden
        # (the rows added since stay whole: a term's row count is the index's, as FTS5's)
        return KeywordLayer(self.base, hidden, self.rows, self.keys, self.freqs,
                            self.lengths, allowed)

    def _search(self, times: Counter[str], k: int) -> list[tuple[int, float]]:
        keys = [term_key(t) for t in times]
        base = self.base
        at = base.find(keys)
        weights = np.array(list(times.values()), float)
        holding = np.zeros(len(at))
        present = at >= 0
        if present.any():
            holding[present] = base.holding(at[present])
        for i in np.flatnonzero(~present):  # terms only rows added since hold
            holding[i] = len(np.unique(self.rows[self.keys == np.uint64(keys[i])]))
        weights *= idf(base.total, holding)
        found = self._search_base(at, weights, k) + self._search_delta(keys, weights, k)
        found.sort(key=lambda hit: (-hit[1], hit[0]))
        return found[:k]

    def _search_base(self, at: npt.NDArray[np.int64], weights: Floats, k: int
                     ) -> list[tuple[int, float]]:
        base = self.base
        terms = [int(t) for t in np.flatnonzero(at >= 0)]
        if not terms or k <= 0:
            return []
        bound = {t: float(weights[t]) * float(base.tops[int(at[t])]) for t in terms}
        terms.sort(key=lambda t: -bound[t])
        lists = {t: base.postings(int(at[t])) for t in terms}
        candidates = np.zeros(0, np.int64)
        scores = np.zeros(0)
        for i, t in enumerate(terms):
            docs = lists[t][0]
            if len(candidates) + len(docs) > DENSE_FROM:
                return self._dense(terms, lists, weights, k)
            new = docs[~_within(docs, candidates)].astype(np.int64)
            # a candidate's score is whole (every term's part): only new rows are scored
            candidates = np.concatenate([candidates, new])
            scores = np.concatenate([scores, self._score(new, terms, lists, weights)])
            order = np.argsort(candidates, kind="stable")
            candidates, scores = candidates[order], scores[order]
            rest = sum(bound[u] for u in terms[i + 1:])
            visible = scores[scores > -1]
            if len(visible) >= k and rest < np.partition(visible, -k)[-k]:
                break  # no row outside the candidates can enter the top k
        return self._top(candidates, scores, k)

    def _score(self, candidates: Rows, terms: list[int],
               lists: dict[int, tuple[npt.NDArray[np.int32], npt.NDArray[Any]]],
               weights: Floats) -> Floats:
        """Each candidate's full score (-2 for hidden ones)."""
        base = self.base
        lengths = base.lengths[candidates].astype(float)
        scores = np.zeros(len(candidates))
        for t in terms:
            docs, freqs = lists[t]
            at = np.searchsorted(docs, candidates)
            hit = at < len(docs)
            hit[hit] = docs[at[hit]] == candidates[hit]
            scores[hit] += weights[t] * base.saturation(freqs[at[hit]].astype(float),
                                                        lengths[hit])
        if self.hidden is not None:
            scores[self.hidden[candidates]] = -2.0
        return scores

    def _dense(self, terms: list[int],
               lists: dict[int, tuple[npt.NDArray[np.int32], npt.NDArray[Any]]],
               weights: Floats, k: int) -> list[tuple[int, float]]:
        """Every posting of the terms scored at once (queries of common terms)."""
        base = self.base
        scores = np.zeros(len(base))
        held = np.zeros(len(base), bool)
        for t in terms:
            docs, freqs = lists[t]
            scores[docs] += weights[t] * base.saturation(
                freqs.astype(float), base.lengths[docs].astype(float))
            held[docs] = True
        if self.hidden is not None:
            held &= ~self.hidden
        candidates = np.flatnonzero(held)
        return self._top(candidates, scores[candidates], k)

    def _top(self, candidates: Rows, scores: Floats, k: int) -> list[tuple[int, float]]:
        keep = scores > -1
        candidates, scores = candidates[keep], scores[keep]
        if len(scores) > k:  # the k best, and any tied with the last (lowest rows win)
            best = scores >= np.partition(scores, len(scores) - k)[len(scores) - k]
            candidates, scores = candidates[best], scores[best]
        order = np.lexsort((candidates, -scores))[:k]
        return [(int(self.base.rows[candidates[i]]), float(scores[i])) for i in order]

    def _search_delta(self, keys: list[int], weights: Floats, k: int
                      ) -> list[tuple[int, float]]:
        if not len(self.rows):
            return []
        wanted = np.array(keys, np.uint64)
        hit = np.isin(self.keys, wanted)
        if self.allowed is not None:
            hit &= _within(self.rows, self.allowed)
        if not hit.any():
            return []
        order = np.argsort(wanted)
        term = order[np.searchsorted(wanted[order], self.keys[hit])]
        part = weights[term] * self.base.saturation(self.freqs[hit], self.lengths[hit])
        rows, where = np.unique(self.rows[hit], return_inverse=True)
        scores = np.bincount(where, weights=part)
        best = np.lexsort((rows, -scores))[:k]
        return [(int(rows[i]), float(scores[i])) for i in best]


def _within(docs: npt.NDArray[Any], sorted_rows: Rows) -> npt.NDArray[np.bool_]:
    """Which of ``docs`` are in ``sorted_rows`` (ascending)."""
    if not len(sorted_rows):
        return np.zeros(len(docs), bool)
    at = np.minimum(np.searchsorted(sorted_rows, docs), len(sorted_rows) - 1)
    return np.asarray(sorted_rows[at] == docs, dtype=bool)


def load(path: Path, size: int | None = None) -> KeywordBase | None:
    """The base at ``path`` if it is there and sound (of ``size`` bytes if given), else
    None with a warning: keyword search then asks FTS5."""
    try:
        if size is not None and path.stat().st_size != size:
            raise ValueError(f"{path} has the wrong size")
        return KeywordBase.load(path)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        log.warning("the keyword index %s cannot be read (%s); keyword search uses FTS5 "
                    "until `isotope compact` makes it again", path, exc)
        return None


def row_texts(conn: sqlite3.Connection, kind: str, columns: Sequence[str], rows: list[int]
              ) -> dict[int, Counter[str]]:
    """The term frequencies of rows of ``kind`` (their indexed columns, read from the
    table as FTS5 reads them)."""
    found: dict[int, Counter[str]] = {}
    for start in range(0, len(rows), 500):
        part = rows[start : start + 500]
        marks = ",".join("?" * len(part))
        cols = " || ' ' || ".join(f"coalesce({c}, '')" for c in columns)
        got = conn.execute(f"SELECT rowid, {cols} FROM {kind} WHERE rowid IN ({marks})",
                           part).fetchall()
        for (rowid, _), terms in zip(got, TOKENIZER.texts([t for _, t in got]), strict=True):
            found[int(rowid)] = terms
    return found

