"""Keeping an index in step with its files: which sources a sync removes (and when it
refuses to), the state of a source's file, repairing a damaged index, and the access
lists set by hand on the sources a pattern names (:func:`set_access`)."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from isotope.access import access_list, mark_for, set_for
from isotope.embedders import Embedder
from isotope.errors import LoaderError, SourceNotFound, SyncRefused
from isotope.files import read_file, source_path
from isotope.models import Source, content_hash
from isotope.reports import FileError, IngestReport
from isotope.stores import Store

SYNC_MAX_REMOVED = 0.5
"""A sync refuses (without ``force``) to remove all of a root's sources, or more than this
share of them when the root holds more than four: an unmounted or emptied folder looks
like that."""


def removes_too_many(removed: int, held: int, *, all_gone: bool) -> bool:
    """The one rule by which a sync, or an ingest of a container (a mailbox), refuses to
    remove sources without ``force``: it would remove everything (``all_gone``), or more
    than :data:`SYNC_MAX_REMOVED` of more than four."""
    return removed > 0 and (all_gone or (held > 4 and removed > SYNC_MAX_REMOVED * held))


def members_of(store: Store) -> dict[str, set[str]]:
    """The sources inside others (a mailbox's messages, an email's attachments), by the
    source or file they are in (their ``container``)."""
    found: dict[str, set[str]] = {}
    for info in store.sources():
        container = info.source.metadata.get("container")
        if container:
            found.setdefault(str(container), set()).add(info.source.uri)
    return found


def inside(uris: Iterable[str], members: dict[str, set[str]]) -> set[str]:
    """Every source inside ``uris`` (by :func:`members_of`), at every level."""
    found: set[str] = set()
    todo = list(uris)
    while todo:
        for inner in members.get(todo.pop(), ()):
            if inner not in found:
                found.add(inner)
                todo.append(inner)
    return found


def set_access(store: Store, pattern: str | Path, allow: Sequence[str] | None, *,
               lock_wait: float) -> list[str]:
    """What :meth:`isotope.Isotope.set_access` does (as it documents it), under the
    writer lock: the sources ``pattern`` names, and those inside them, given the access
    list ``allow`` by hand; returns them."""
    from isotope.search.filters import source_globs

    listed = None if allow is None else access_list(allow)
    with store.writer(lock_wait):
        uris = [info.source.uri for info in store.sources()]
        globs = source_globs(str(pattern))
        exact = {str(pattern), str(source_path(pattern))}
        matched = [u for u in uris if u in exact or any(
            fnmatch.fnmatchcase(u, g) for g in globs)]
        if not matched:
            raise SourceNotFound(f"no source matches {str(pattern)!r}; `isotope list` "
                                 "shows what is there")
        # an email's attachments, a mailbox's messages: theirs too
        matched += sorted(inside(matched, members_of(store)) - set(matched))
        marks = {u: mark_for(stored) if (stored := store.get_source(u)) else set_for(u)
                 for u in matched}
        store.set_access(matched, listed, by_hand=marks)
    return matched


def drop(store: Store, uri: str, members: dict[str, set[str]]) -> list[str]:
    """Delete the source ``uri`` and, first, every source inside it, at every level (the
    caller holds the writer lock); returns what was deleted."""
    gone: list[str] = []
    for inner in sorted(members.pop(uri, set())):
        gone += drop(store, inner, members)
    if store.delete_source(uri):
        gone.append(uri)
    for held in members.values():
        held.discard(uri)
    return gone


def deleted_sources(store: Store, paths: Sequence[str | Path], *, force: bool) -> list[str]:
    """The file sources below ``paths`` whose files are gone; SyncRefused if that is
    all or most of a root's sources and not ``force``."""
    infos = [i.source for i in store.sources() if i.source.loader != "chunks"]
    gone: list[str] = []
    for root in (source_path(p) for p in paths):
        if not root.exists():
            continue
        top = str(root)
        # below the path as given, and below its resolved path (where an older isotope
        # stored the sources it reached through links)
        tops = {top.rstrip(os.sep) + os.sep, str(root.resolve()).rstrip(os.sep) + os.sep}
        below = [s.uri for s in infos if s.uri == top or s.uri.startswith(tuple(tops))]
        files = {s.uri: str(s.metadata.get("file") or s.uri) for s in infos}
        missing = [uri for uri in below if gone_file(files[uri])]
        most = removes_too_many(len(missing), len(below), all_gone=len(missing) == len(below))
        emptied = emptied_folder(missing, top)
        if missing and (most or emptied) and not force:
            where = (f"{len(missing)} of the {len(below)} sources below {top}" if most
                     else f"the sources of {emptied}, now an empty folder")
            raise SyncRefused(
                f"sync would remove {where}, whose files are gone (is a folder unmounted "
                "or emptied?); nothing was changed. If the files really were deleted, "
                "run it again with --force (Isotope.sync(..., force=True))")
        gone += [uri for uri in missing if uri not in gone]
    return gone


def repair(store: Store, reingest: Callable[[dict[Path, Path]], IngestReport],
           embed: Embedder | None = None) -> RepairReport:
    """Make a damaged index whole (the caller holds the writer lock): see
    :meth:`isotope.Isotope.repair`. ``reingest`` ingests files again, unchanged or not;
    ``embed`` embeds again the items whose vectors were lost.
    ``report.problems`` is left for the caller to fill after the lock is released."""
    report = RepairReport()
    found = store.inspect()
    if found.storage_damaged:
        # deleting "orphans" could delete live rows that a broken index no longer finds:
        # nothing is touched
        report.problems = found.problems
        return report
    store.repair(embed)
    redo: dict[Path, Path] = {}
    for uri in found.damaged_sources:
        source = store.get_source(uri)
        path = Path(uri)
        root = Path(source.root) if source and source.root else path
        if (source is None or source.loader != "chunks") and path.is_absolute() \
                and path.is_file():
            redo[path] = root
        elif source is not None and source.loader != "chunks" and not root.exists():
            report.kept.append(uri)  # its folder is gone (unmounted?): left alone
        else:
            if source is not None:
                store.delete_source(uri)
            report.removed.append(uri)  # without a row, its rows were orphans
    if redo:
        ingested = reingest(redo)
        report.reingested = ingested.added + ingested.replaced
        report.errors = ingested.errors
    return report


@dataclass
class RepairReport:
    """What :meth:`Isotope.repair` did."""

    reingested: list[str] = field(default_factory=list)
    """Sources ingested again from their files."""
    removed: list[str] = field(default_factory=list)
    """Damaged sources that could not be ingested again (file gone, or ready-made
    chunks) and were removed: ingest them again yourself."""
    kept: list[str] = field(default_factory=list)
    """Damaged sources left as they are because the folder they were ingested from is
    gone (an unmounted drive?): mount it and repair again, or delete them."""
    errors: list[FileError] = field(default_factory=list)
    """Files that failed to ingest again (their damaged source was left as it was)."""
    problems: list[str] = field(default_factory=list)
    """Problems left after the repair."""


def emptied_folder(missing: Sequence[str], top: str) -> str | None:
    """A folder below ``top`` that exists but is empty and would lose two or more of the
    ``missing`` sources: an unmounted drive inside the tree looks like that."""
    lost: dict[str, int] = {}
    for uri in missing:
        folder = os.path.dirname(uri)
        while folder.startswith(top) and folder != top:
            lost[folder] = lost.get(folder, 0) + 1
            folder = os.path.dirname(folder)
    for folder, count in sorted(lost.items()):
        if count >= 2 and os.path.isdir(folder) and not os.listdir(folder):
            return folder
    return None


def gone_file(path: str) -> bool:
    """The file is not there: not found (a folder unreadable, or a stale network mount,
    is not proof of deletion)."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False
    return False


def source_state(source: Source, max_bytes: int) -> str:
    """``current``, ``changed``, ``missing`` or ``incomplete`` for a file source (the
    file's size and mtime are compared first, its hash only when they differ; a file that
    is no longer a regular file, or is over ``max_bytes``, is ``changed``). A source inside
    a file (a mailbox's message, an attachment) is ``current`` while that file is there
    (``missing`` once it is gone)."""
    if source.loader == "chunks" or not os.path.isabs(source.uri):
        return "incomplete" if source.status == "incomplete" else ""
    container = source.metadata.get("file")  # a member of a mailbox, or an attachment
    try:
        stat = os.stat(str(container or source.uri))
    except OSError:
        return "missing"
    if container:  # a mailbox's message, an attachment: there while its file is
        return "incomplete" if source.status == "incomplete" else "current"
    if stat.st_size != source.size or stat.st_mtime != source.mtime:
        try:
            if content_hash(read_file(source.uri, max_bytes)[1]) != source.content_hash:
                return "changed"
        except LoaderError:
            return "changed"
    return "incomplete" if source.status == "incomplete" else "current"
