"""Projects: named indexes in one folder (the ``projects_dir`` setting, by default
``$XDG_DATA_HOME/isotope/projects``), each an index directory with its own settings saved
inside it. One of them may be the default, used when a command names no index.

Which index a command uses, first match wins: ``--index DIR`` (or a path given to
``Isotope.open``), ``--project NAME`` (or a bare name given to ``Isotope.open``), the
``ISOTOPE_INDEX`` setting, the ``ISOTOPE_PROJECT`` setting, the default project, and
finally ``./.isotope``.

The default project's name is kept in ``.default`` in the projects folder: a name no
project can have (project names start with a letter or digit). Earlier versions kept it in
``default``, which collided with a project named ``default``; that file is still read, and
moved to ``.default`` when the default is next written or a project ``default`` created.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from isotope.errors import IsotopeError, SettingsError
from isotope.files import write_atomically
from isotope.redaction import has_secret
from isotope.settings import (
    LOCAL_FIELDS,
    Settings,
    index_settings,
    project_settings,
    resolve,
)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
DEFAULT_FILE = ".default"
"""The file in the projects folder holding the default project's name."""
LEGACY_DEFAULT_FILE = "default"
"""Where versions before ``.default`` kept it (a project may be named ``default``)."""


class ProjectError(IsotopeError):
    """A project that does not exist, already exists, or has an invalid name."""


@dataclass
class ProjectInfo:
    name: str
    path: Path
    """The project's folder in the projects folder."""
    is_default: bool
    counts: dict[str, int]
    settings: dict[str, Any]
    location: str = ""
    """Where its index is: the folder, or the location it points at (password hidden)."""


def _settings(settings: Settings | None) -> Settings:
    return settings if settings is not None else resolve(None)[0]


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise ProjectError(
            f"invalid project name {name!r}: use letters, digits, '.', '_' and '-' (at most "
            "64, starting with a letter or digit)")
    return name


def is_name(value: str, settings: Settings | None = None) -> bool:
    """A bare name (no folder part) names a project if a project of that name exists, or
    if no file or directory of that name exists here."""
    if not _NAME.match(value) or value.startswith("."):
        return False
    return exists(value, settings) or not Path(value).exists()


def path_of(name: str, settings: Settings | None = None) -> Path:
    base = _settings(settings).projects_dir
    return base / check_name(name)


LOCATION_FILE = "location"
"""In a project's folder instead of an index: the location of the index the project points
at (a store URL, or a directory elsewhere)."""


def exists(name: str, settings: Settings | None = None) -> bool:
    from isotope.stores.sqlite_connection import DB_NAME

    path = path_of(name, settings)
    return (path / DB_NAME).is_file() or (path / LOCATION_FILE).is_file()


def location_of(name: str, settings: Settings | None = None) -> str:
    """Where a project's index is: its own folder, or the location the folder points at."""
    path = require(name, settings)
    pointer = path / LOCATION_FILE
    if pointer.is_file():
        location = pointer.read_text(encoding="utf-8").strip()
        if pointer.stat().st_mode & 0o077 and has_secret(location):
            with contextlib.suppress(OSError):  # written by an older isotope: made private
                pointer.chmod(0o600)
        return location
    return str(path)


def of_index(name: object, settings: Settings) -> str | None:
    """``name`` when it names a project whose location is the index ``settings`` open
    (its own folder, or the location it points at), else None."""
    if (isinstance(name, str) and is_name(name, settings) and exists(name, settings)
            and location_of(name, settings) == str(settings.index)):
        return name
    return None


def require(name: str, settings: Settings | None = None) -> Path:
    if not exists(name, settings):
        raise ProjectError(f"no project {name!r}; create it with `isotope project create "
                           f"{name}` (`isotope project list` shows the projects)")
    return path_of(name, settings)


def _read_marker(path: Path) -> str | None:
    if not path.is_file():  # a project named "default" is a folder
        return None
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def _write_marker(base: Path, name: str | None) -> None:
    """Point ``.default`` at ``name`` (None: no default), replacing it atomically, and
    drop the pointer file of earlier versions."""
    marker = base / DEFAULT_FILE
    if name is None:
        marker.unlink(missing_ok=True)
    else:
        base.mkdir(parents=True, exist_ok=True)
        write_atomically(marker, name + "\n")
    legacy = base / LEGACY_DEFAULT_FILE
    if legacy.is_file() and not legacy.is_symlink():
        with contextlib.suppress(OSError):
            legacy.unlink()


def _migrate(base: Path) -> None:
    """Move the pointer file of earlier versions (``default``) to ``.default``."""
    legacy = base / LEGACY_DEFAULT_FILE
    if legacy.is_file() and not legacy.is_symlink():
        current = _read_marker(base / DEFAULT_FILE)
        _write_marker(base, current or _read_marker(legacy))


def default(settings: Settings | None = None) -> str | None:
    """The default project, if one is set and exists."""
    base = _settings(settings).projects_dir
    name = _read_marker(base / DEFAULT_FILE) or _read_marker(base / LEGACY_DEFAULT_FILE)
    return name if name and _NAME.match(name) and exists(name, settings) else None


def set_default(name: str, settings: Settings | None = None) -> None:
    require(name, settings)
    _write_marker(_settings(settings).projects_dir, name)


def index_path(settings: Settings, origins: dict[str, str]) -> str:
    """The location of the index a command uses when given none explicitly (see the
    module docstring): a directory, or a store URL."""
    if origins.get("index") != "default":
        return settings.index
    if settings.project:
        return location_of(settings.project, settings)
    name = default(settings)
    return location_of(name, settings) if name else settings.index


def create(name: str, *, location: str | None = None, **values: Any) -> Path:
    """Create an empty project whose saved settings are ``values`` over the defaults. With
    ``location`` (a store URL, or a directory elsewhere), the project's folder points at
    an index there instead of holding one."""
    from isotope import stores

    base, _ = resolve(None)
    path = path_of(name, base)
    if exists(name, base):
        raise ProjectError(f"project {name!r} already exists ({path})")
    if name == LEGACY_DEFAULT_FILE:  # the old default pointer would be in the way
        _migrate(base.projects_dir)
    unknown = set(values) - set(Settings.model_fields)
    if unknown:
        raise ProjectError(f"unknown setting(s): {', '.join(sorted(unknown))}; "
                           "`isotope config` lists them")
    local = sorted(set(values) & set(LOCAL_FIELDS))
    if local:
        raise ProjectError(
            f"{', '.join(local)}: a setting of this machine or server, never saved in a "
            f"project; set it in the environment (ISOTOPE_{local[0].upper()}) or in .env")
    try:
        settings, _ = resolve(None, **values)
    except SettingsError as exc:
        raise ProjectError(f"project {name!r}: {exc}") from None
    saved = {**index_settings(settings), **project_settings(settings, values)}
    if location is not None:
        store = stores.open(location, create=True)
        path.mkdir(parents=True, exist_ok=True)
        # (only its owner may read it: it may hold a password)
        write_atomically(path / LOCATION_FILE, str(location) + "\n", private=True)
    else:
        store = stores.open(path, create=True)
    try:
        store.set_meta("settings", saved)
        store.set_meta("project", name)
    finally:
        store.close()
    return path


def info(name: str, settings: Settings | None = None) -> ProjectInfo:
    from isotope import stores

    path = require(name, settings)
    location = location_of(name, settings)
    store = stores.open(location, create=False)
    try:
        return ProjectInfo(name, path, default(settings) == name, store.counts(),
                           store.get_meta("settings") or {}, stores.describe(location))
    finally:
        store.close()


def listing(settings: Settings | None = None) -> list[ProjectInfo]:
    base = _settings(settings).projects_dir
    if not base.is_dir():
        return []
    return [info(p.name, settings) for p in sorted(base.iterdir())
            if p.is_dir() and _NAME.match(p.name) and exists(p.name, settings)]


@dataclass
class Deleted:
    """What :func:`delete` removed."""

    name: str
    path: Path
    """The project's entry in the projects folder (now gone)."""
    kept: Path | str | None = None
    """When that entry was a symbolic link: the folder it pointed to, left in place with
    its index (only the link was removed); when it pointed at a location (a store URL),
    that location, whose index is left as it is. None when the folder itself was deleted."""

    def message(self) -> str:
        """One line for the user, e.g. ``deleted project docs (/path/to/docs)``."""
        if self.kept is None:
            return f"deleted project {self.name} ({self.path})"
        if isinstance(self.kept, str):
            return (f"deleted project {self.name}; the index it pointed at, {self.kept}, was "
                    "left as it is (delete it there if you no longer need it)")
        return (f"deleted project {self.name}: removed the link {self.path}; the folder it "
                f"pointed to, {self.kept}, was left in place (delete it yourself if you no "
                "longer need it)")


def delete(name: str, settings: Settings | None = None) -> Deleted:
    """Delete a project: its index directory (its cache entries stay in the shared cache).

    When the project's entry in the projects folder is a symbolic link to a folder
    elsewhere, only the link is removed: the folder it points to and the index in it are
    left in place, and the returned :class:`Deleted` names it in ``kept`` (its
    :meth:`Deleted.message` says so). A link whose folder is gone is removed too.
    """
    path = path_of(name, settings)
    if path.is_symlink() and not exists(name, settings):  # a dangling link
        path.unlink()
        _forget_default(name, settings)
        return Deleted(name, path)
    path = require(name, settings)
    from isotope import stores

    if (path / LOCATION_FILE).is_file():  # the index lives elsewhere: keep it
        location = stores.describe(location_of(name, settings))
        shutil.rmtree(path)
        _forget_default(name, settings)
        return Deleted(name, path, location)
    kept = None
    store = stores.open(path, create=False)
    try:
        with store.writer():  # not while something writes to it
            if path.is_symlink():
                kept = path.resolve()
                path.unlink()
            else:
                shutil.rmtree(path)
    finally:
        store.close()
    _forget_default(name, settings)
    return Deleted(name, path, kept)


def _forget_default(name: str, settings: Settings | None) -> None:
    if default(settings) is None:
        _write_marker(_settings(settings).projects_dir, None)
