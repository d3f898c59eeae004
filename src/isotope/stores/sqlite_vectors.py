"""The embedded store's vectors, stored once: each kind's vectors live in a saved base
index in ``vectors/`` (exact float32 for small indexes, HNSW over int8 for large ones),
plus the log of what changed since (the ``vector_log`` table: vectors added, items
removed), written in the same transaction as the rows they belong to.

A kind's base is a list of segments, as an LSM tree keeps them
(:class:`isotope.ann.segments.SegmentedIndex`): each segment's files are saved once under
its tag and never changed, and each names the ids it replaced or removed in older ones. A
reader maps the segments named in the index's meta (``vectors``: per kind, its segments
and the last log entry folded into them) and applies the log entries after it in memory
(:class:`isotope.ann.layered.LayeredIndex`): a write costs a few log rows, never a
rebuild, and the next search in any process sees it at once. Compaction folds the log of
a kind into a new small segment, saved under a new tag before the meta names it, and then
deletes the log entries it folded; once the newer segments (the tail) hold a quarter of
the oldest one's items (the base), they are folded into it: the base's graph is kept (in
the writer's memory) and only the tail's vectors are added, so an item is added to a graph
twice in all and the base's files are written again each time the kind grows by a
quarter, not at every compaction. ``isotope compact`` folds everything into one segment.
A crash at any point leaves the old segments and the whole log, or the new ones and the
rest of the log. Replaced segment files are deleted once the meta names others (a
process that still maps them keeps reading them).

Why not tiers of equal segments merged by size: on two cores, adding each item to a graph
about three times (once per tier) left the compaction minutes behind a bulk load
(327,000 question vectors waiting in the log at 720,000), while the base's graph, kept
and grown, costs one more addition per item.

Nothing here is a cache: a base file lost or damaged loses the vectors in it, and
``isotope check --repair`` embeds those items again from their stored text.

A compaction also saves, beside a large kind's vectors and under the same tag, the
postings its keyword search reads instead of FTS5 (:mod:`sqlite_keywords`); the same log
entries tell it which rows changed since. Those are derived from the FTS5 tables: if
they are lost, keyword search asks FTS5 until the next compaction.

Why one module of this size: the log, the base files, the meta that names them and the
compaction that moves from one to the other are one protocol (its crash safety depends
on the order of its steps), so they are read and changed together."""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import numpy as np

from isotope import ann
from isotope import settings as choices
from isotope.ann import Ids, VectorIndex
from isotope.ann.layered import LayeredIndex
from isotope.ann.segments import SegmentedIndex
from isotope.embedders import Vectors
from isotope.errors import IndexDamaged, StoreError
from isotope.stores import KINDS, Kind, sqlite_keywords
from isotope.stores.schema_steps import FTS_COLUMNS
from isotope.stores.sqlite_connection import release
from isotope.stores.sqlite_keywords import KeywordBase, KeywordLayer, row_texts
from isotope.stores.sqlite_schema import set_meta

log = logging.getLogger(__name__)
COMPACT_AFTER = 20_000
"""Log entries of a kind after which a write compacts that kind (under the writer lock)."""
BEHIND = 5 * COMPACT_AFTER
"""Log entries of a kind from which a write waits for the compaction running: the vectors
saved stay at most this far behind the rows (a bulk load faster than the graph takes
vectors would otherwise grow the log without bound: 470,000 question vectors waited at
960,000 on two cores, searched exactly meanwhile and kept in the database)."""
HNSW_FROM = 20_000
"""With ``vector_index = "auto"``: items of a kind from which its base is HNSW."""
TAIL_SHARE = 0.25
"""The newer segments of a kind (its tail) are folded into the oldest (its base) once they
hold this share of the base's items: the base's graph is kept and only the tail's vectors
are added (an item is added twice in all, once to its small segment and once to the
base), and the base's files are written again each time the kind grows by a quarter."""
MAX_TAIL = 8
"""... or once the tail holds more than this many segments (each is searched)."""
GONE = ".gone.npy"
"""The file ending of a segment's list of ids it hides in older segments."""
RETIRE_AFTER = 15.0
"""Seconds a replaced segment's files are kept for readers that read its name just before
(a reader opens the files it read in the same snapshot, within milliseconds; one that
finds them gone reads the names again, outside a caller's transaction). Kept short: a
bulk load replaces segments every few seconds, and each kept one is disk."""
RETIRED = "vectors_retired"
STALE_AFTER = 3600.0
"""Seconds after which a file in vectors/ that the meta does not name is deleted."""
POLICIES: tuple[str, ...] = get_args(choices.VectorIndex)
KEYWORD_POLICIES: tuple[str, ...] = get_args(choices.KeywordIndex)
KEYWORDS_FROM = 20_000
"""With ``keyword_index = "auto"``: rows of atoms or chunks from which keyword search reads
saved postings instead of FTS5 (questions stay on FTS5: ``hybrid`` leaves their keyword
signal out by default, and their postings would cost 56 bytes a question)."""
Writer = Callable[[], AbstractContextManager[sqlite3.Connection]]
"""The store's write transaction."""
META = "vectors"


@dataclass
class _Loaded:
    tag: str | None
    seq: int
    """The last log entry applied."""
    index: LayeredIndex
    keywords: KeywordLayer | None = None


Part = tuple[VectorIndex, Ids]
"""A segment opened (or made, not yet saved), with the ids it hides in older ones."""


def segments_of(info: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The segments of a kind's meta entry, oldest first, each with its ``tag``, ``impl``,
    ``count``, ``digest``, ``bytes`` and ``gone`` (how many ids it hides in older ones).
    An entry saved before segments names one base: one segment."""
    if not info:
        return []
    if "segments" in info:
        return [dict(segment) for segment in info["segments"]]
    return [{key: info[key] for key in ("tag", "impl", "count", "digest", "bytes")
             if key in info}]


def impl_for(policy: str, count: int) -> str:
    """The base implementation a kind of ``count`` items gets under ``policy``."""
    if policy == "auto":
        return "hnsw" if count >= HNSW_FROM else "exact"
    return policy


class VectorStore:
    """Each kind's vectors: its base index plus the log since, up to date on each read."""

    def __init__(self, folder: Path, conn: Callable[[], sqlite3.Connection],
                 snapshot: Callable[[], AbstractContextManager[None]],
                 meta: Callable[[str], Any], dim: Callable[[], int | None]) -> None:
        self.folder = folder
        self._conn, self._snapshot, self._meta, self._dim = conn, snapshot, meta, dim
        self._loaded: dict[Kind, _Loaded] = {}
        self._writable: dict[Kind, tuple[str, VectorIndex]] = {}
        """The base this process last saved, kept in memory for its next compaction."""
        self._lock = threading.RLock()
        """Guards what this process holds (``_loaded``, ``_writable``), briefly."""
        self._starting = threading.Lock()
        """Held while a background compaction is looked for and started."""
        self._compacting = {kind: threading.Lock() for kind in KINDS}
        self._threads: dict[Kind, threading.Thread] = {}
        self.policy = "auto"
        self.keyword_policy = "auto"

    # -- reads -------------------------------------------------------------------------
    def bases(self) -> dict[str, dict[str, Any]]:
        found = self._meta(META)
        return found if isinstance(found, dict) else {}

    def index(self, kind: Kind) -> LayeredIndex:
        """The vectors of ``kind`` as of the index's latest committed state."""
        try:
            return self._index(kind)
        except IndexDamaged:
            # a compaction may have replaced the base between reading its name and
            # opening its files: read the name again, once (outside a caller's snapshot)
            if self._conn().in_transaction:
                raise
            return self._index(kind)

    def _index(self, kind: Kind) -> LayeredIndex:
        with self._lock, self._snapshot():
            info = self.bases().get(kind)
            tag = info["tag"] if info else None
            loaded = self._loaded.get(kind)
            if loaded is None or loaded.tag != tag:
                base = self._open_base(kind, info, writable=False)
                loaded = _Loaded(tag, int(info["seq"]) if info else 0, LayeredIndex(base),
                                 self._open_keywords(info))
                self._loaded[kind] = loaded
            self._apply(kind, loaded)
            return loaded.index

    def keywords(self, kind: Kind) -> KeywordLayer | None:
        """The saved postings of ``kind`` with the changes since, as of the index's latest
        committed state (None: keyword search asks FTS5)."""
        with self._lock:
            self.index(kind)
            loaded = self._loaded.get(kind)
            return loaded.keywords if loaded is not None else None

    def _open_keywords(self, info: dict[str, Any] | None) -> KeywordLayer | None:
        saved = (info or {}).get("keywords")
        if not info or not saved:
            return None
        base = sqlite_keywords.load(self._keyword_file(str(info["tag"])), int(saved["bytes"]))
        return KeywordLayer(base) if base is not None else None

    def _keyword_file(self, tag: str) -> Path:
        return self.folder / f"{tag}.{sqlite_keywords.SUFFIX}"

    def _open_base(self, kind: Kind, info: dict[str, Any] | None, *,
                   writable: bool) -> VectorIndex | None:
        """The segments ``info`` names, searched as one (None: there are none)."""
        return _joined([self._open_segment(kind, segment, writable=writable)
                        for segment in segments_of(info)])

    def _segment_files(self, segment: dict[str, Any]) -> list[Path]:
        cls = ann.kinds().get(str(segment.get("impl")))
        files = cls.files(self.folder, str(segment["tag"])) if cls else []
        gone = self.folder / f"{segment['tag']}{GONE}"
        return [*files, gone] if segment.get("gone") and gone.exists() else files

    def _open_segment(self, kind: Kind, segment: dict[str, Any], *, writable: bool) -> Part:
        cls = ann.kinds().get(str(segment.get("impl")))
        tag = str(segment["tag"])
        index, gone = None, np.zeros(0, dtype=np.int64)
        if cls is not None and _sizes_agree(self._segment_files(segment), segment):
            # (a file of the wrong size is never handed to the index library to map)
            index = cls.load(self.folder, tag, writable=writable)
            if index is not None and segment.get("gone"):
                try:
                    gone = np.load(self.folder / f"{tag}{GONE}").astype(np.int64)
                except Exception:  # missing, or any damage
                    index = None
                if len(gone) != int(segment["gone"]):
                    index = None
        if index is None or len(index) != int(segment.get("count", len(index))):
            raise IndexDamaged(
                f"the {kind} vectors of the index at {self.folder.parent} are missing or "
                f"damaged ({self.folder / tag}.*); run `isotope check --repair` "
                "to embed them again from their text")
        return index, gone

    def _apply(self, kind: Kind, loaded: _Loaded) -> None:
        """Fold the log entries after ``loaded.seq`` into a copy of ``loaded.index`` (a
        search in another thread keeps the one it has, unchanged)."""
        rows = self._log(kind, after=loaded.seq)
        if rows:
            changed = loaded.index.copy()
            apply_log(changed, rows, self._dim(), kind, self.folder.parent)
            if loaded.keywords is not None:
                last = {int(r[1]): r[3] is not None for r in rows}
                added = row_texts(self._conn(), kind, FTS_COLUMNS[kind],
                                  [row for row, adds in last.items() if adds])
                loaded.keywords = loaded.keywords.changed(
                    np.fromiter(last, dtype=np.int64, count=len(last)), added)
            loaded.index, loaded.seq = changed, int(rows[-1][0])

    def _log(self, kind: Kind, *, after: int = 0, upto: int = 2**63 - 1
             ) -> list[tuple[Any, ...]]:
        """The log entries ``(seq, item, group, vector)`` of ``kind`` after ``after``, up
        to ``upto``, read in parts (each its own short read outside a snapshot)."""
        rows: list[tuple[Any, ...]] = []
        while part := self._conn().execute(
                "SELECT seq, item, grp, vector FROM vector_log WHERE seq > ? AND seq <= ? "
                "AND kind = ? ORDER BY seq LIMIT 20000", (after, upto, kind)).fetchall():
            rows += part
            after = int(part[-1][0])
        return rows

    def _last(self, kind: Kind) -> int:
        """The last log entry of ``kind`` (0: none)."""
        return int(self._conn().execute(
            "SELECT coalesce(MAX(seq), 0) FROM vector_log WHERE kind = ?", (kind,)
        ).fetchone()[0])

    def _altered(self, segment: dict[str, Any]) -> bool:
        """Whether a segment's files differ from the digest taken when it was saved (read
        whole: for check and repair, not for every open)."""
        return bool(segment.get("digest")) and digest(
            self._segment_files(segment)) != segment["digest"]

    def log_size(self, kind: Kind) -> int:
        return int(self._conn().execute(
            "SELECT COUNT(*) FROM vector_log WHERE kind = ?", (kind,)).fetchone()[0])

    # -- compaction --------------------------------------------------------------------
    def compact(self, kind: Kind, write: Writer, *, force: bool = False) -> bool:
        """Fold the log of ``kind`` into a new base now (if it holds ``COMPACT_AFTER``
        entries, the base's implementation is not the one the policy wants, or
        ``force``). Returns whether a new base was committed."""
        with self._compacting[kind]:
            return self._compact(kind, write, force=force)

    def compact_later(self, kind: Kind, write: Writer) -> None:
        """Compact ``kind`` in a background thread if its log has grown and none runs:
        writes go on at full speed, and searches (in any process) read the log meanwhile."""
        with self._starting:  # (two writing threads: one compaction started, and known)
            self._compact_later(kind, write)

    def _compact_later(self, kind: Kind, write: Writer) -> None:
        running = self._threads.get(kind)
        if running is not None and running.is_alive():
            if self.log_size(kind) < BEHIND:
                return
            running.join()  # the writer waits: the index keeps up with the rows
        if self.log_size(kind) < COMPACT_AFTER:
            return

        def run() -> None:
            try:
                if self._compacting[kind].acquire(blocking=False):
                    try:
                        self._compact(kind, write, force=False, background=True)
                    finally:
                        self._compacting[kind].release()
            except StoreError as exc:  # a full disk: said in one line
                log.warning("compacting the %s vectors failed: %s; they stay in the log",
                            kind, exc)
            except Exception:  # never lose a write for it: the log still holds everything
                log.warning("compacting the %s vectors of %s failed; they stay in the log "
                            "(`isotope compact` tries again)", kind, self.folder.parent,
                            exc_info=True)

        thread = threading.Thread(target=run, name=f"isotope-compact-{kind}", daemon=True)
        self._threads[kind] = thread
        thread.start()

    def wait(self) -> None:
        """Let running background compactions finish."""
        for thread in list(self._threads.values()):
            thread.join()

    def _compact(self, kind: Kind, write: Writer, *, force: bool,
                 background: bool = False) -> bool:
        with self._snapshot():
            info = self.bases().get(kind)
            segments = segments_of(info)
            pending = self.log_size(kind)
            count = (int(info["count"]) if info else 0) + pending
            wanted = impl_for(self.policy, count)
            mismatch = info is not None and (
                any(segment.get("impl") != wanted for segment in segments)
                or bool(info.get("keywords")) != self.wants_keywords(kind, count))
            if not (force or mismatch or pending >= COMPACT_AFTER):
                return False
            # everything into one segment when asked, when the implementation changes,
            # while the kind is small (an exact base), and when the log alone is a
            # quarter of the base (it would be folded into it at once: its vectors are
            # added to the base's graph directly); else the log into a new segment
            whole = (force or mismatch or wanted != "hnsw" or not segments
                     or pending >= TAIL_SHARE * int(segments[0].get("count", 0)))
            with self._lock:
                kept = self._writable.pop(kind, None)  # may change below
            if kept and (not segments or kept[0] != segments[0]["tag"]):
                kept = None
            parts: list[Part] = [
                (kept[1], np.zeros(0, np.int64)) if kept and n == 0 else
                self._open_segment(kind, segment, writable=whole and len(segments) == 1)
                for n, segment in enumerate(segments)]
            last = self._last(kind)
        # the log is read in short reads, not in the snapshot: a long read would keep the
        # WAL file from being reused while the writer goes on
        rows = self._log(kind, after=int(info["seq"]) if info else 0, upto=last)
        seq = int(rows[-1][0]) if rows else (int(info["seq"]) if info else 0)
        # one core for a background compaction (the writer keeps the other), every core
        # when it starts behind (the writer will wait for it soon)
        behind = pending >= BEHIND // 2
        threads = max(1, (os.cpu_count() or 1) - 1) if background and not behind else None
        vectors = [r for r in rows if not text_only(r)]
        if (not vectors and info is not None and not force
                and all(segment.get("impl") == wanted for segment in segments)):
            # only rows' keyword text changed (a chunk's questions): the segments stay as
            # they are, the keyword postings are made again
            return self._commit(kind, info, segments, None, seq, write,
                                count=int(info["count"]), hold=kept)
        if whole:
            if len(parts) > 1:
                parts = [self._merge(kind, parts, segments, threads,
                                     kept[1] if kept else None)]
            base = parts[0][0] if parts else ann.create("exact")
            apply_log(base, rows, self._dim(), kind, self.folder.parent)
            wanted = impl_for(self.policy, len(base))  # on what is left, deletes applied
            if base.name != wanted:
                base = _convert(base, wanted)
            return self._commit(kind, info, [], (base, np.zeros(0, np.int64)), seq, write)
        new = ann.create("hnsw")
        new.threads = threads
        apply_log(new, rows, self._dim(), kind, self.folder.parent)
        touched = np.unique(np.fromiter((int(r[1]) for r in vectors), np.int64, len(vectors)))
        visible = _joined(parts)
        shown = visible.ids()[0] if visible is not None else touched[:0]
        gone = np.intersect1d(touched, shown)
        parts.append((new, gone))
        # shown now: what was shown less what the log touched, and the new segment's items
        # (all of them touched); counted here, not by joining every segment's ids again
        count = len(shown) - len(gone) + len(new)
        tail = sum(len(part) for part, _ in parts[1:])
        if tail >= TAIL_SHARE * len(parts[0][0]) or len(parts) > MAX_TAIL + 1:
            # the tail into the base: the base's graph is kept, the tail's vectors added
            merged = self._merge(kind, parts, [*segments, None], threads,
                                 kept[1] if kept else None)
            return self._commit(kind, info, [], merged, seq, write)
        return self._commit(kind, info, segments, parts[-1], seq, write,
                            count=count, hold=kept)

    def _merge(self, kind: Kind, parts: list[Part], saved: Sequence[dict[str, Any] | None],
               threads: int | None, held: VectorIndex | None) -> Part:
        """One segment holding what ``parts`` (every segment, oldest first; each one saved
        as ``saved`` names it, or None if made in memory) show. The largest of them is
        kept (loaded to be changed, unless it is held writable already), the items others
        hide in it removed, and the others' added."""
        joined = SegmentedIndex(parts)
        biggest = max(range(len(parts)), key=lambda n: len(parts[n][0]))
        segment, base = saved[biggest], parts[biggest][0]
        if segment is not None and base is not held:  # (mapped: never changed)
            base = self._open_segment(kind, segment, writable=True)[0]
        base.threads = threads
        base.remove(joined.hidden[biggest])
        for n, (part, _) in enumerate(parts):
            if n == biggest:
                continue
            ids, groups = joined.visible(n)
            for start in range(0, len(ids), 100_000):
                found, vectors = part.get(ids[start : start + 100_000])
                base.add(found, groups[np.searchsorted(ids, found)], vectors)
        return base, np.zeros(0, np.int64)

    def wants_keywords(self, kind: Kind, count: int) -> bool:
        """Whether ``kind``, with ``count`` rows, gets saved postings for keyword search."""
        if self.keyword_policy == "auto":
            return kind != "questions" and count >= KEYWORDS_FROM
        return self.keyword_policy == "postings"

    def _commit(self, kind: Kind, info: dict[str, Any] | None, kept: list[dict[str, Any]],
                new: Part | None, seq: int, write: Writer, *, count: int | None = None,
                hold: tuple[str, VectorIndex] | None = None) -> bool:
        """Save the segment ``new`` under a new tag and name in the meta, in place of
        ``info``'s segments, the segments ``kept`` of them followed by the new one (together
        everything of ``kind`` up to log entry ``seq``), deleting the log entries they hold,
        unless another compaction named other segments meanwhile (then this one is
        dropped: it may lack what the other folded in). The keyword postings, if the kind
        gets them, are made from the tables as they are now (at ``seq`` or later: the log
        entries after ``seq`` are applied to them again, which changes nothing)."""
        tag = f"{kind}-{uuid.uuid4().hex[:12]}"  # this state's (and its postings')
        named = f"{kind}-{uuid.uuid4().hex[:12]}"  # the new segment's
        files: list[Path] = []
        if new is None:  # (no vector changed: the segments kept are all of them)
            assert count is not None, "the items shown, unchanged"
            base, segments, impl = None, list(kept), str((info or {}).get("impl"))
        else:
            base, gone = new
            base.save(self.folder, named)
            files = base.files(self.folder, named)
            if len(gone):
                path = self.folder / f"{named}{GONE}"
                ann.write_array(path, np.asarray(gone, dtype=np.int64))
                files.append(path)
            segment: dict[str, Any] = {
                "tag": named, "impl": base.name, "count": len(base), "gone": len(gone),
                "digest": digest(files), "bytes": sum(p.stat().st_size for p in files)}
            segments, impl = [*kept, segment], base.name
            count = len(base) if count is None else count  # (items shown)
        entry: dict[str, Any] = {"tag": tag, "seq": seq, "count": count,
                                 "impl": impl, "segments": segments}
        if self.wants_keywords(kind, count):
            with self._snapshot():
                postings = KeywordBase.build(self._conn(), kind)
            path = self._keyword_file(tag)
            postings.save(path)
            files.append(path)
            entry["keywords"] = {"bytes": path.stat().st_size, "digest": digest([path])}
        now = time.time()
        with write() as conn:
            bases = self.bases()
            retired = self._meta(RETIRED) or {}
            if (bases.get(kind) or {}).get("tag") != (info or {}).get("tag"):
                committed = False
            else:
                bases[kind] = entry
                # their files stay a while: a reader may have just read their names
                for old in _tags(info) - _tags(entry):
                    retired[old] = now
                gone_tags = [t for t, when in retired.items() if now - when >= RETIRE_AFTER]
                for old in gone_tags:
                    del retired[old]
                set_meta(conn, META, bases)
                set_meta(conn, RETIRED, retired)
                conn.execute("DELETE FROM vector_log WHERE kind = ? AND seq <= ?", (kind, seq))
                committed = True
        if not committed:
            for path in files:
                path.unlink(missing_ok=True)
            return False
        with self._lock:  # what the next compaction starts from, kept in memory
            if base is not None and len(segments) == 1:
                self._writable[kind] = (named, base)
            elif hold is not None:
                self._writable[kind] = hold  # the base, unchanged
            self._loaded.pop(kind, None)
        try:  # housekeeping: the write above is done whatever happens here
            for old in gone_tags:  # (a process mapping them keeps reading them)
                for path in self.folder.glob(f"{old}.*"):
                    path.unlink(missing_ok=True)
            release(self._conn())
            self.remove_stale()
        except (OSError, sqlite3.Error):
            log.info("tidying %s after a compaction failed", self.folder, exc_info=True)
        return True

    def rebuild(self, kind: Kind, write: Writer, table: tuple[Ids, Ids],
                embed_rows: Callable[[Ids], Vectors] | None) -> int:
        """A new base of ``kind`` holding exactly the table's rows ``(rowids, chunk
        rowids)``: the vectors still readable (a damaged base is given up), the others
        embedded again from their text with ``embed_rows`` (if given). Returns how many
        rows are left without a vector. The caller holds the writer lock."""
        with self._compacting[kind]:
            with self._snapshot():
                info = self.bases().get(kind)
                parts: list[Part] = []
                for segment in segments_of(info):
                    try:
                        opened: Part | None = self._open_segment(kind, segment,
                                                                 writable=False)
                    except IndexDamaged:
                        opened = None
                    if opened is None or self._altered(segment):
                        # its vectors cannot be trusted, nor can what it hid in older
                        # segments: those are embedded again too
                        parts = []
                    else:
                        parts.append(opened)
                rows = self._log(kind)
            current = LayeredIndex(_joined(parts))
            apply_log(current, rows, self._dim(), kind, self.folder.parent)
            seq = int(rows[-1][0]) if rows else (int(info["seq"]) if info else 0)
            ids, groups = table
            made = ann.create(impl_for(self.policy, len(ids)))
            missing: list[Ids] = []
            held, held_groups = current.ids()
            for start in range(0, len(ids), 50_000):
                part, part_groups = ids[start : start + 50_000], groups[start : start + 50_000]
                known = np.isin(part, held)
                # a vector filed under another chunk is made again too
                where = np.searchsorted(held, part[known])
                known[known] = held_groups[where] == part_groups[known]
                found, vectors = current.get(part[known])
                if len(found):  # (in the order the index keeps them)
                    made.add(found, part_groups[np.searchsorted(part, found)], vectors)
                missing.append(part[~np.isin(part, found)])
            lost = np.concatenate(missing) if missing else np.zeros(0, dtype=np.int64)
            if len(lost) and embed_rows is not None:
                for start in range(0, len(lost), 2_000):
                    part = lost[start : start + 2_000]
                    made.add(part, groups[np.searchsorted(ids, part)], embed_rows(part))
                lost = lost[:0]
            if not self._commit(kind, info, [], (made, np.zeros(0, np.int64)), seq, write):
                raise IndexDamaged(f"the {kind} vectors of {self.folder.parent} changed while "
                                   "they were rebuilt; run the repair again")
            return len(lost)

    def remove_stale(self, older_than: float | None = None) -> None:
        """Delete files the meta does not name (a crash's leftovers, files of schema 4 and
        before, replaced bases past their retirement) once they are ``older_than`` seconds
        old: a younger one may belong to a compaction about to name it."""
        now = time.time()
        named = set().union(*(_tags(info) for info in self.bases().values()))
        # replaced bases are kept RETIRE_AFTER seconds for readers that just read their name
        retired = {tag: now - float(when) for tag, when in (self._meta(RETIRED) or {}).items()}
        named |= {tag for tag, age in retired.items() if age < RETIRE_AFTER}
        expired = {tag for tag, age in retired.items() if age >= RETIRE_AFTER}
        older_than = STALE_AFTER if older_than is None else older_than
        for path in self.folder.glob("*"):
            try:
                old = now - path.stat().st_mtime >= older_than
            except OSError:
                continue
            tag = path.name.split(".", 1)[0]
            if tag in expired or (old and tag not in named):
                path.unlink(missing_ok=True)

    def remove_old_cache(self) -> None:
        """Delete the vector cache files of schema 4 and before (``KIND.json`` and
        ``KIND-STATE.*``, STATE being 32 hex digits): the vectors moved to the log."""
        for path in self.folder.glob("*"):
            tag = path.name.split(".", 1)[0]
            if path.name in {f"{k}.json" for k in KINDS} or re.fullmatch(
                    r"(questions|atoms|chunks)-[0-9a-f]{32}", tag):
                path.unlink(missing_ok=True)

    # -- checks ------------------------------------------------------------------------
    def check(self, kind: Kind, table: tuple[Ids, Ids]) -> list[tuple[str, Ids]]:
        """The vectors of ``kind`` against the table's ``(rowids, chunk rowids)``: each
        problem with the table rows it touches. The base files are read whole and
        compared with the digest taken when they were saved."""
        info = self.bases().get(kind)
        none = np.zeros(0, dtype=np.int64)
        for segment in segments_of(info):
            if self._altered(segment):
                return [(f"the {kind} vectors in {self.folder / str(segment['tag'])}.* are "
                         "damaged (they differ from what was saved): `isotope check "
                         "--repair` embeds them again", table[0])]
        try:
            index = self.index(kind)
        except IndexDamaged as exc:
            return [(str(exc), table[0])]
        ids, groups = index.ids()
        problems: list[tuple[str, Ids]] = []
        saved = (info or {}).get("keywords")
        if info and saved:
            path = self._keyword_file(str(info["tag"]))
            if (not path.exists() or digest([path]) != saved.get("digest")
                    or sqlite_keywords.load(path) is None):
                problems.append((f"the {kind} keyword postings {path} are missing or damaged "
                                 "(keyword search uses FTS5 meanwhile): `isotope compact` "
                                 "or `isotope check --repair` makes them again", none))
        return problems + compare(kind, table, (ids, groups))


def compare(kind: Kind, table: tuple[Ids, Ids], held: tuple[Ids, Ids], place: str = ""
            ) -> list[tuple[str, Ids]]:
    """The vectors ``held`` (ids, chunk rows; sorted) of ``kind`` against the table's
    ``(rowids, chunk rowids)``: rows without a vector, vectors of no row, vectors filed
    under another chunk, each problem with the table rows it touches (``place``: where
    the vectors are, said after ``kind``)."""
    ids, groups = held
    rows, chunks = table
    none = np.zeros(0, dtype=np.int64)
    problems: list[tuple[str, Ids]] = []
    missing = np.setdiff1d(rows, ids)
    if len(missing):
        problems.append((f"{len(missing)} {kind} have no sound vector{place} (`isotope "
                         "check --repair` embeds them again)", missing))
    extra = np.setdiff1d(ids, rows)
    if len(extra):
        problems.append((f"{len(extra)} vectors of {kind}{place} belong to no row "
                         "(`isotope check --repair` drops them)", none))
    both, at_rows, at_ids = np.intersect1d(rows, ids, return_indices=True)
    wrong = both[chunks[at_rows] != groups[at_ids]] if len(both) else none
    if len(wrong):
        problems.append((f"{len(wrong)} vectors of {kind}{place} are filed under the "
                         "wrong chunk (`isotope check --repair` files them again)", wrong))
    return problems


def _tags(info: dict[str, Any] | None) -> set[str]:
    """The tags whose files a kind's meta entry names: its segments' and its own (its
    keyword postings')."""
    if not info:
        return set()
    return {str(info["tag"])} | {str(segment["tag"]) for segment in segments_of(info)}


def _joined(parts: list[Part]) -> VectorIndex | None:
    """Segments searched as one: the only one as it is."""
    if not parts:
        return None
    return parts[0][0] if len(parts) == 1 else SegmentedIndex(parts)


def _sizes_agree(files: list[Path], info: dict[str, Any]) -> bool:
    """The base's files have the total size recorded when it was saved (a cheap check on
    every open; ``isotope check`` compares the digest)."""
    if "bytes" not in info:
        return True
    try:
        return sum(p.stat().st_size for p in files) == int(info["bytes"])
    except OSError:
        return False


def digest(files: list[Path]) -> str:
    """sha256 over the bytes of ``files`` (a base index's), read in blocks."""
    import hashlib

    made = hashlib.sha256()
    for path in files:
        with open(path, "rb") as fh:
            while block := fh.read(1 << 20):
                made.update(block)
    return made.hexdigest()


def text_only(row: tuple[Any, ...]) -> bool:
    """Whether a log entry says only that its item's text changed, not its vector (an
    empty vector: a chunk's questions changed, or with Chroma its metadata)."""
    return row[3] is not None and not len(row[3])


def apply_log(index: VectorIndex, rows: list[tuple[Any, ...]], dim: int | None, kind: Kind,
              where: Path) -> None:
    """Apply log rows ``(seq, item, group, vector or None)``, in order, to ``index``: only
    each item's last entry counts, so every touched item is removed once and those whose
    last entry adds a vector are added back in one batch. A vector of the wrong size is
    left out, with a warning (``isotope check`` names the item); an entry of its text
    alone (:func:`text_only`) changes nothing here."""
    last: dict[int, tuple[Any, ...]] = {}
    for row in rows:
        if not text_only(row):
            last[int(row[1])] = row
    if not last:
        return
    adds = [r for r in last.values() if r[3] is not None]
    if dim is None:  # unknown: the commonest size is taken for float16
        sizes = [len(r[3]) for r in adds]
        dim = max(set(sizes), key=sizes.count) // 2 if sizes else 0
    # float16 since schema 5; float32 as the tables held them before
    half = [r for r in adds if r[2] is not None and dim and len(r[3]) == 2 * dim]
    full = [r for r in adds if r[2] is not None and dim and len(r[3]) == 4 * dim]
    sound = half + full
    index.remove(np.fromiter(last, dtype=np.int64, count=len(last)))
    for rows, dtype in ((half, np.float16), (full, np.float32)):
        if rows:
            index.add(np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows)),
                      np.fromiter((r[2] for r in rows), dtype=np.int64, count=len(rows)),
                      np.frombuffer(b"".join(r[3] for r in rows), dtype=dtype
                                    ).reshape(len(rows), -1).astype(np.float32))
    if len(sound) < len(adds):
        log.warning("%d %s vectors of the index at %s are damaged (wrong size) and left out "
                    "of search; run `isotope check`", len(adds) - len(sound), kind, where)


def _convert(base: VectorIndex | None, name: str) -> VectorIndex:
    """A new index of implementation ``name`` holding everything ``base`` holds."""
    made = ann.create(name)
    if base is None:
        return made
    ids, groups = base.ids()
    for start in range(0, len(ids), 100_000):
        part = ids[start : start + 100_000]
        found, vectors = base.get(part)  # (in the order the index keeps them)
        made.add(found, groups[start : start + 100_000][np.searchsorted(part, found)],
                 vectors)
    return made


