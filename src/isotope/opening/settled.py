"""Which index is opened, and with which settings (:func:`open_index`, what
:meth:`isotope.Isotope.open` runs): a path or a project's name resolved to the index's
location (:mod:`isotope.projects`), the settings resolved over those saved in the index,
the settings it fixed kept (:func:`isotope.opening.meta.keep_fixed`), its store opened; an
index folder the call made, still empty, removed when the opening fails."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from isotope import projects, stores
from isotope.embedders import Embedder
from isotope.errors import IsotopeError
from isotope.opening.meta import embeddings_for, fixed_of, keep_fixed
from isotope.settings import REMAKE, Settings, resolve
from isotope.stores import Store

T = TypeVar("T")

Make = Callable[[Store, Settings, Embedder, dict[str, str]], T]
"""What makes the opened index of its store, settings, embedder and their origins."""


def open_index(make: Make[T], path: str | Path | None, settings: dict[str, Any], *,
               create: bool, store: Store | None, embedder: Embedder | None,
               remake: bool) -> tuple[T, dict[str, Any]]:
    """The index ``make`` makes of the index at ``path`` (as :meth:`isotope.Isotope.open`
    documents it), opened with ``settings`` (its keyword arguments), and the settings it
    fixed given otherwise with ``remake`` (each with its value)."""
    base = _located(path, settings, create=create)
    opened = store is None
    folder = Path(base.index).expanduser() if stores.scheme(base.index) is None else None
    made_here = opened and folder is not None and not folder.exists()
    if store is None:
        store = stores.open(base.index, create=create)
    try:
        saved = store.get_meta("settings")
        resolved, origins = resolve(saved, **settings)
        resolved, origins = keep_fixed(resolved, origins, fixed_of(store),
                                       stores.describe(base.index), remake=remake)
        if embedder is None:
            embedder = embeddings_for(resolved)
        made = make(store, resolved, embedder, origins)
    except BaseException:
        if opened:  # (an index folder this call made, still empty, is removed)
            try:
                empty = made_here and not store.counts().get("sources")
            except IsotopeError:
                empty = False
            store.close()
            if empty and folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
        raise
    return made, (_remade(saved, resolved) if remake and isinstance(saved, dict) else {})


def _located(path: str | Path | None, settings: dict[str, Any], *, create: bool
             ) -> Settings:
    """The settings with the ``index`` the call means set in ``settings``: ``path`` (a
    bare name that is a project's: that project), else the ``index`` setting, else the
    ``project`` setting (made, when named in the call and ``create``), else the default
    project, else ``./.isotope``."""
    if isinstance(path, str) and projects.is_name(path):
        settings["project"], path = path, None
    base, origins = resolve(None, **settings)
    if path is not None:
        settings["index"] = str(path)
    elif (create and origins["project"] == "argument" and base.project
          and not projects.exists(base.project, base)):
        settings["index"] = projects.create(base.project)
    else:
        settings["index"] = projects.index_path(base, origins)
    return resolve(None, **settings)[0]


def _remade(saved: dict[str, Any], resolved: Settings) -> dict[str, Any]:
    """The settings of :data:`isotope.settings.REMAKE` ``resolved`` gives otherwise than
    ``saved``."""
    fields = Settings.model_fields
    return {name: getattr(resolved, name) for name in REMAKE
            if saved.get(name, fields[name].default) != getattr(resolved, name)}
