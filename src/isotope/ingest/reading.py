"""What a file makes, as one walk that the ingest and its dry run both take: each source
it holds (the file itself; a mailbox's messages; an email's attachments), loaded,
unchanged since it was stored, or refused with why; and, after a container's members,
which ones it held (so the ingest removes those it no longer does).

The walk reads and loads; it never stores. A document is yielded before its attachments,
so the ingest stores a message before the attachments that name it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from isotope import loaders
from isotope.errors import LoaderError
from isotope.files import identify, open_regular
from isotope.models import Source, content_hash
from isotope.reports import FileError
from isotope.stores import Store


@dataclass
class Loaded:
    """A source to store: its record, its document, and what was stored under its uri."""

    source: Source
    document: loaders.Document
    existing: Source | None


@dataclass
class Unchanged:
    """A source stored from this content by this pipeline: nothing to do."""

    uri: str


@dataclass
class Members:
    """The end of ``owner``'s members (a mailbox's messages, a message's attachments):
    the sources it holds now. ``mailbox``: the owner is a file of messages."""

    owner: str
    seen: set[str] = field(default_factory=set)
    new: set[str] = field(default_factory=set)
    """Those of ``seen`` not stored before this walk."""
    mailbox: bool = False


Found = Loaded | Unchanged | FileError | Members


@dataclass(frozen=True)
class Read:
    """A file as the walk read it: the real path of that very file (:func:`identify`)
    and its status (device, inode and names: ``st_nlink``). Who may see what it holds is
    decided from these, never from its path resolved again."""

    real: str
    stat: os.stat_result


def uri_of(found: Found) -> str | None:
    """The source a found item is about (None: the end of a container's members)."""
    if isinstance(found, Loaded):
        return found.source.uri
    if isinstance(found, Unchanged):
        return found.uri
    if isinstance(found, FileError):
        return found.path
    return None


@dataclass
class Reader:
    """Walks files into :data:`Found` items, deciding what is unchanged as the ingest
    does (``is_current``)."""

    store: Store
    read: Callable[[Path], tuple[os.stat_result, bytes, Path]]
    is_current: Callable[[Source | None, str], bool]
    max_bytes: int
    max_chars: int
    grouping: str
    seen: dict[str, Read] = field(default_factory=dict)
    """Each file read, by the path it was reached by (its source's name)."""

    def sources(self, path: Path, root: Path) -> Iterator[Found]:
        """Everything ``path`` (found under ``root``) makes, in the order to store it."""
        try:
            loader = loaders.loader_for(path)
            if loader is not None and loader.members is not None:
                with open_regular(path) as handle:  # (opened once: its members are of it)
                    stat, real = identify(handle.fileno(), path)
                    self.seen[str(path)] = Read(str(real), stat)
                    members = loader.members(path, self.max_bytes, grouping=self.grouping,
                                             **loaders.handle_for(loader.members, handle))
                    yield from self._members(str(path), str(path), members, stat.st_mtime,
                                             root, mailbox=True)
                return
            stat, data, real = self.read(path)
            self.seen[str(path)] = Read(str(real), stat)
            uri, digest = str(path), content_hash(data)
            existing = self.store.get_source(uri)
            if existing is None and str(real) != uri:
                # stored by an older isotope under its resolved path (the file read's:
                # never resolved again, a link may point elsewhere since): take its place
                existing = self.store.get_source(str(real))
            if self.is_current(existing, digest) and existing and existing.uri == uri:
                yield Unchanged(uri)
                return
            document, used = loaders.load(path, data, root=root, max_chars=self.max_chars,
                                          real=real)
        except LoaderError as exc:
            yield FileError(exc.path, exc.reason)
            return
        except OSError as exc:
            yield FileError(str(path), f"cannot read: {exc.strerror or exc}")
            return
        source = Source(uri=uri, content_hash=digest, size=stat.st_size, mtime=stat.st_mtime,
                        loader=used.name, metadata={**document.metadata}, root=str(root))
        yield from self._document(source, document, existing)

    def _document(self, source: Source, document: loaders.Document,
                  existing: Source | None) -> Iterator[Found]:
        yield Loaded(source, document, existing)
        if document.members or (existing is not None and existing.metadata.get("attachments")):
            yield from self._members(source.uri, str(source.metadata.get("file") or source.uri),
                                     document.members, source.mtime, Path(source.root or "."))

    def _members(self, owner: str, file: str, members: Iterable[loaders.Member],
                 mtime: float | None, root: Path, *, mailbox: bool = False
                 ) -> Iterator[Found]:
        """The members of ``owner`` as sources ``OWNER#NAME`` naming it as their
        ``container`` and ``file`` as the file they are in (memory: one member)."""
        end = Members(owner, mailbox=mailbox)
        for member in members:
            uri = f"{owner}#{member.name}"
            end.seen.add(uri)
            if not member.data:
                yield FileError(uri, "a member over the max_file_mb limit of "
                                f"{self.max_bytes / 1e6:.0f} MB: left out")
                continue
            digest = content_hash(member.data)
            existing = self.store.get_source(uri)
            if existing is None:
                end.new.add(uri)
            if self.is_current(existing, digest):
                yield Unchanged(uri)
                continue
            try:
                document = loaders.load_member(member.loader, Path(uri), member.data,
                                               max_chars=self.max_chars)
            except LoaderError as exc:
                yield FileError(exc.path, exc.reason)
                continue
            source = Source(uri=uri, content_hash=digest, size=len(member.data), mtime=mtime,
                            loader=member.loader, root=str(root),
                            metadata={**document.metadata, "container": owner, "file": file})
            yield from self._document(source, document, existing)
        yield end
