"""Projects: named indexes in one folder (the ``projects_dir`` setting, by default
``$XDG_DATA_HOME/isotope/projects``), each an index directory with its own settings saved
inside it. One of them may be the default, used when a command names no index.

Which index a command uses, first match wins: ``--index DIR`` (or a path given to
``Isotope.open``), ``--project NAME`` (or a bare name given to ``Isotope.open``), the
``ISOTOPE_INDEX`` setting, the ``ISOTOPE_PROJECT`` setting, the default project, and
finally ``./.isotope``.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from isotope.errors import IsotopeError, SettingsError
from isotope.settings import (
    Settings,
    index_settings,
    project_settings,
    resolve,
)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
DEFAULT_FILE = "default"


class ProjectError(IsotopeError):
    """A project that does not exist, already exists, or has an invalid name."""


@dataclass
class ProjectInfo:
    name: str
    path: Path
    is_default: bool
    counts: dict[str, int]
    settings: dict[str, Any]


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


def exists(name: str, settings: Settings | None = None) -> bool:
    from isotope.stores.sqlite import DB_NAME

    return (path_of(name, settings) / DB_NAME).is_file()


def require(name: str, settings: Settings | None = None) -> Path:
    if not exists(name, settings):
        raise ProjectError(f"no project {name!r}; create it with `isotope project create "
                           f"{name}` (`isotope project list` shows the projects)")
    return path_of(name, settings)


def default(settings: Settings | None = None) -> str | None:
    marker = _settings(settings).projects_dir / DEFAULT_FILE
    try:
        name = marker.read_text().strip()
    except OSError:
        return None
    return name if name and _NAME.match(name) and exists(name, settings) else None


def set_default(name: str, settings: Settings | None = None) -> None:
    require(name, settings)
    base = _settings(settings).projects_dir
    (base / DEFAULT_FILE).write_text(name + "\n")


def index_path(settings: Settings, origins: dict[str, str]) -> Path:
    """The index a command uses when given none explicitly (see the module docstring)."""
    if origins.get("index") != "default":
        return settings.index
    if settings.project:
        return require(settings.project, settings)
    name = default(settings)
    return path_of(name, settings) if name else settings.index


def create(name: str, **values: Any) -> Path:
    """Create an empty project whose saved settings are ``values`` over the defaults."""
    from isotope.stores.sqlite import SQLiteStore

    base, _ = resolve(None)
    path = path_of(name, base)
    if exists(name, base):
        raise ProjectError(f"project {name!r} already exists ({path})")
    unknown = set(values) - set(Settings.model_fields)
    if unknown:
        raise ProjectError(f"unknown setting(s): {', '.join(sorted(unknown))}; "
                           "`isotope config` lists them")
    try:
        settings, _ = resolve(None, **values)
    except SettingsError as exc:
        raise ProjectError(f"project {name!r}: {exc}") from None
    saved = {**index_settings(settings), **project_settings(settings, values)}
    store = SQLiteStore(path, create=True)
    try:
        store.set_meta("settings", saved)
        store.set_meta("project", name)
    finally:
        store.close()
    return path


def info(name: str, settings: Settings | None = None) -> ProjectInfo:
    from isotope.stores.sqlite import SQLiteStore

    path = require(name, settings)
    store = SQLiteStore(path, create=False)
    try:
        return ProjectInfo(name, path, default(settings) == name, store.counts(),
                           store.get_meta("settings") or {})
    finally:
        store.close()


def listing(settings: Settings | None = None) -> list[ProjectInfo]:
    base = _settings(settings).projects_dir
    if not base.is_dir():
        return []
    return [info(p.name, settings) for p in sorted(base.iterdir())
            if p.is_dir() and _NAME.match(p.name) and exists(p.name, settings)]


def delete(name: str, settings: Settings | None = None) -> Path:
    """Delete a project's index directory (its cache entries stay in the shared cache)."""
    path = require(name, settings)
    from isotope.stores.sqlite import SQLiteStore

    store = SQLiteStore(path, create=False)
    try:
        with store.writer():  # not while something writes to it
            shutil.rmtree(path)
    finally:
        store.close()
    if default(settings) is None:
        (_settings(settings).projects_dir / DEFAULT_FILE).unlink(missing_ok=True)
    return path
