"""Reading a user's files, naming them, and writing at a path a user gives. Every path that
reads a user file goes through :func:`read_file`: it reads only regular files (never a
FIFO, socket or device, which could block forever or never end) and at most
``max_bytes``, even if the file grows. Every file written at a path a user gives goes
through :func:`write_atomically` (no link followed, whole or not at all).

A source is the path it was reached by (made absolute, symbolic links *not* resolved), so
ingest, sync, delete, filters and file references all agree on one name: after
``current -> r1`` becomes ``current -> r2``, ``current/x`` is the same source with new
content, and a deleted link is a deleted source.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from contextvars import ContextVar
from pathlib import Path
from stat import S_IMODE, S_ISREG
from typing import BinaryIO

from isotope.errors import LoaderError

DEFAULT_MAX_BYTES = 64_000_000
"""The default of the ``max_file_mb`` setting, in bytes."""


def source_path(path: str | Path) -> Path:
    """The absolute path a file was reached by: ``~`` expanded, ``.`` and ``..`` folded,
    symbolic links kept."""
    return Path(os.path.abspath(os.path.expanduser(path)))  # (~nobody is kept as it is)


CONFINE: ContextVar[tuple[Path, ...] | None] = ContextVar("isotope_confine", default=None)
"""While set (a server's ``serve_roots``, resolved): every file opened through
:func:`open_regular` must be, once opened, a file below one of these folders; checked on
the opened descriptor, so a link swapped in after a walk checked the path is refused."""


def _same_file(handle: int, path: Path) -> bool:
    """Whether ``path`` is the very file opened as ``handle`` (device and inode)."""
    try:
        here, there = os.fstat(handle), os.stat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def opened_path(handle: int, path: Path) -> Path | None:
    """Where the opened ``handle`` really is (None when the system cannot say)."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{handle}"))
    except OSError:
        pass
    # no /proc: the resolved path, if it is the very file that was opened
    real = Path(os.path.realpath(path))
    return real if _same_file(handle, real) else None


def open_regular(path: str | Path) -> BinaryIO:
    """``path`` opened for reading if it is a regular file, else a :class:`LoaderError`:
    opened without blocking (a FIFO would block the open itself) and checked on the
    opened file, so a file swapped for a FIFO between a check and the open is caught
    (and, while :data:`CONFINE` is set, one swapped for a link out of those folders)."""
    path = Path(path)
    try:
        handle = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                         | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise LoaderError(path, f"cannot read: {exc.strerror or exc}") from exc
    try:
        if not S_ISREG(os.fstat(handle).st_mode):
            raise LoaderError(path, "not a regular file (a FIFO, socket or device); "
                              "exclude it")
        roots = CONFINE.get()
        if roots is not None:
            real = opened_path(handle, path)
            if real is None or not any(real == r or r in real.parents for r in roots):
                raise LoaderError(path, f"a link leading out of the serve_roots ({real}); "
                                  "not read")
        if hasattr(os, "set_blocking"):
            os.set_blocking(handle, True)
        return os.fdopen(handle, "rb")
    except BaseException:
        os.close(handle)
        raise


def identify(handle: int, path: Path) -> tuple[os.stat_result, Path]:
    """The status of the opened ``handle`` and its real path, the path whose identity
    (device and inode) is that of the very file opened: what an access list is decided
    from. A :class:`LoaderError` where no path is that file (replaced while it was
    opened: /proc says ``.../pay.md (deleted)``; or the system cannot say)."""
    real = opened_path(handle, path)
    if real is None or not _same_file(handle, real):
        raise LoaderError(path, "the file was replaced while it was read; ingest it again")
    return os.fstat(handle), real


def read_file(path: str | Path, max_bytes: int) -> tuple[os.stat_result, bytes]:
    """A regular file's status and its bytes; anything else (a FIFO, a device, a file
    over ``max_bytes``) is a :class:`LoaderError` before a byte is read."""
    stat, data, _ = read_opened(path, max_bytes)
    return stat, data


def read_opened(path: str | Path, max_bytes: int) -> tuple[os.stat_result, bytes, Path]:
    """:func:`read_file`, and the real path of the very file read (:func:`identify`: links
    followed as the open followed them): what an access list is given for, never the
    path resolved again later, when a link may point elsewhere."""
    path = Path(path)
    with open_regular(path) as fh:
        stat, real = identify(fh.fileno(), path)
        try:
            if stat.st_size > max_bytes:
                raise LoaderError(
                    path, f"the file is {stat.st_size / 1e6:.0f} MB, over the max_file_mb "
                    f"limit of {max_bytes / 1e6:g} MB; split it, or raise the limit "
                    "(ISOTOPE_MAX_FILE_MB)")
            data = fh.read(max_bytes + 1)  # at most the limit, even if the file grows
        except OSError as exc:
            raise LoaderError(path, f"cannot read: {exc.strerror or exc}") from exc
    if len(data) > max_bytes:
        raise LoaderError(path, f"the file grew over the max_file_mb limit of "
                          f"{max_bytes / 1e6:g} MB while being read")
    return stat, data, real


def write_atomically(path: str | Path, data: bytes | str, *, private: bool = False) -> None:
    """Write ``data`` (text: as UTF-8) to ``path``, whole or not at all: into a new file
    beside it that :func:`tempfile.mkstemp` makes (``O_CREAT|O_EXCL|O_NOFOLLOW``, a name
    no one can plant a link at beforehand), flushed to disk, then renamed over ``path``
    (a link at ``path`` itself is replaced, never followed). Every file isotope writes at
    a path a user gives (an export, ``eval --write``, a project's files) is written so.

    The file's mode is that of the file it replaces, else what the umask leaves of
    0o666 (0o600 whatever it was with ``private``: it may hold a password). An error
    (an ``OSError``) leaves ``path`` as it was and no temporary file behind."""
    path = Path(path)
    content = data.encode("utf-8") if isinstance(data, str) else data
    mode = 0o600 if private else _mode_of(path)
    # (the name's start, to be recognised; short enough for the longest name there is)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:64]}.",
                                         suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            os.fchmod(out.fileno(), mode)
            out.write(content)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _mode_of(path: Path) -> int:
    """The permissions a file written at ``path`` gets: those of the regular file there
    (not a link's target), else 0o666 less the umask."""
    with contextlib.suppress(OSError):
        found = os.lstat(path)
        if S_ISREG(found.st_mode):
            return S_IMODE(found.st_mode)
    return 0o666 & ~_umask()


def _umask() -> int:
    """The process's umask, read without setting it (another thread may be creating a
    file meanwhile); 0o022 where the system does not say."""
    with (contextlib.suppress(OSError, ValueError, IndexError),
          open("/proc/self/status", encoding="ascii", errors="replace") as status):
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022
