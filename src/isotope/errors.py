"""Named exceptions. Each message says what went wrong, where, and how to fix it."""

from __future__ import annotations

from pathlib import Path


class IsotopeError(Exception):
    """Base class of every error isotope raises on purpose."""

    unreachable = False
    """A server could not be reached, or the connection to it was lost (nothing else went
    wrong: the same call may succeed once it answers)."""


class SourceNotFound(IsotopeError):
    """A path given to ingest, or a source given to delete, does not exist."""


class LoaderError(IsotopeError):
    """One file could not be turned into text. Ingest reports it and goes on with the rest."""

    def __init__(self, path: str | Path, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class UnsupportedFile(LoaderError):
    """No loader is registered for the file's extension."""


class ModelMismatch(IsotopeError):
    """The index was built with a different embedding model than the one asked for."""


class InvalidIndex(IsotopeError):
    """The index directory is missing, unreadable, or of an unknown schema."""


class IndexLocked(IsotopeError):
    """Another process is writing to the index."""


class SettingsError(IsotopeError):
    """A setting's value is invalid (the message names it and where it came from)."""


class FixedSetting(SettingsError):
    """A setting the index fixed when it was made (:data:`isotope.settings.FIXED`: graph,
    questions_per_atom, vector_backend, pg_vector_index) was given another value, in an
    argument, the environment or ``.env``; nothing was done. The message says how to change
    it (a new index, ``isotope ingest --force``, ``isotope copy``)."""

    def __init__(self, setting: str, message: str) -> None:
        self.setting = setting
        super().__init__(message)


class MissingDependency(IsotopeError):
    """An optional dependency is not installed; the message names the extra to install."""

    def __init__(self, what: str, extra: str) -> None:
        self.extra = extra
        super().__init__(f"{what} needs an optional dependency: pip install 'isotopedb[{extra}]'")

    @classmethod
    def from_import(cls, exc: ImportError, what: str, extra: str) -> IsotopeError:
        """The error for a failed import: a missing module is a missing dependency; an
        installed one that fails to import (an interrupted import, a broken build) is
        said as such, not reported as missing."""
        if isinstance(exc, ModuleNotFoundError):
            return cls(what, extra)
        return IsotopeError(
            f"{what}: an installed package failed to import ({exc}); run the command again, "
            f"and if it fails again reinstall it: pip install --force-reinstall "
            f"'isotopedb[{extra}]'")


class ModelFileError(IsotopeError):
    """A model's weights are missing, incomplete or fail their checksum."""


class ProviderError(IsotopeError):
    """A language model or embedding provider failed."""

    fatal = False
    """Every later call would fail the same way (e.g. bad credentials): stop the ingest
    instead of going on with the next source."""
    unreachable = False
    """The model server stopped answering: what needs it waits for a later run, and what
    does not (storing the files read) goes on before the ingest stops."""


class IndexDamaged(InvalidIndex):
    """The index's database file is damaged; ``isotope check`` says what is affected."""


class StoreError(IsotopeError):
    """A write to the index failed (the disk is full, the index is read-only); nothing of
    that write was stored."""

    retry = False
    """The same write may succeed if made again (the server broke a deadlock)."""


class DiskFull(StoreError):
    """A write failed because the disk (or the user's quota) is full; nothing of it was
    stored. The server answers 507."""


class InvalidArgument(IsotopeError, ValueError):
    """A value given to a call is out of range (``k``, an empty query...)."""


class SyncRefused(IsotopeError):
    """A sync would remove all or most of a root's sources (an unmounted or emptied
    folder looks like that); nothing was removed. ``force=True`` (``--force``) removes."""
