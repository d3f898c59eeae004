"""What an index's meta says of itself when it is opened: the settings it was made with
(:func:`saved_settings`) and those it fixed (:func:`fixed_of`, :func:`fixed_settings`;
:data:`isotope.settings.FIXED`), the embedding model it was built with (checked by
:func:`check_embedding`, which also writes a new index's meta on its first open), and the
question filter's thresholds put on the embedding model's scale (:func:`on_scale`); the
settings it fixed kept when it is opened with others (:func:`keep_fixed`,
:func:`fixed_conflicts`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from isotope import embedders, stores
from isotope._version import __version__
from isotope.embedders import Embedder
from isotope.errors import FixedSetting, ModelMismatch
from isotope.settings import EXPLICIT, FIXED, INDEX_FIELDS, REMAKE, Settings, index_settings
from isotope.stores import Store


def fixed_of(store: Store) -> dict[str, Any]:
    """The values of the settings the index at ``store`` has fixed
    (:data:`isotope.settings.FIXED`): those saved with its settings when it was made (an
    index made before one existed has its default), and those its store keeps
    (:meth:`Store.fixed_settings`); none for an index not made yet."""
    saved = store.get_meta("settings")
    fields = Settings.model_fields
    fixed = {name: saved.get(name, fields[name].default) for name in FIXED
             if name in INDEX_FIELDS} if isinstance(saved, dict) else {}
    return {**fixed, **{name: value for name, value in store.fixed_settings().items()
                        if name in FIXED}}


def saved_settings(path: str | Path) -> dict[str, Any] | None:
    """The settings saved in the index at ``path`` when it was made, or None where there
    is no index yet (reads only its meta)."""
    if not stores.exists(str(path)):
        return None
    store = stores.open(str(path), create=False)
    try:
        saved = store.get_meta("settings")
    finally:
        store.close()
    return saved if isinstance(saved, dict) else None


def fixed_settings(path: str | Path) -> dict[str, Any]:
    """:func:`fixed_of` the index at ``path`` (none where there is no index yet; reads
    only its meta)."""
    if not stores.exists(str(path)):
        return {}
    store = stores.open(str(path), create=False)
    try:
        return fixed_of(store)
    finally:
        store.close()


def embeddings_for(settings: Settings) -> Embedder:
    """The embedding model the ``embedding_model`` setting names."""
    return embedders.create(settings.embedding_model, settings)


def on_scale(settings: Settings, embedder: Embedder, origins: dict[str, str] | None, *,
             fresh: bool) -> dict[str, float]:
    """The question filter's thresholds left at their defaults, put on the embedding
    model's cosine scale (:attr:`Embedder.question_filter`; saved so in a new index's
    settings). Left at its default: not set anywhere, or, in an index not built yet (a
    project just created), saved with the default value."""
    fields, origins = type(settings).model_fields, origins or {}
    return {name: value for name, value in embedder.question_filter
            if origins.get(name, "default") == "default"
            or (fresh and origins.get(name) == "index"
                and getattr(settings, name) == fields[name].default)}


def check_embedding(store: Store, settings: Settings, embedder: Embedder,
                    scaled: dict[str, float]) -> None:
    """:class:`ModelMismatch` when ``embedder`` is not the model the index at ``store``
    was built with. An index with none yet (its first open) is given it, with its
    ``settings`` (and the time, the version) when it has none saved, or the ``scaled``
    thresholds (:func:`on_scale`) over those saved (a project's, saved before its first
    open)."""
    saved = store.get_meta("embedding")
    if saved is None:
        if store.get_meta("settings") is None:
            store.set_meta("settings", index_settings(settings))
            store.set_meta("created_at", datetime.now(UTC).isoformat())
            store.set_meta("isotope_version", __version__)
        elif scaled:  # (a project's settings, saved before its first open)
            store.set_meta("settings", {**store.get_meta("settings"), **scaled})
        store.set_meta("embedding", {"model": settings.embedding_model,
                                     "model_id": embedder.model_id, "dim": embedder.dim})
        return
    if saved["model_id"] != embedder.model_id or saved["dim"] != embedder.dim:
        raise ModelMismatch(
            f"the index at {stores.describe(settings.index)} was built with "
            f"embedding model "
            f"{saved['model']!r} ({saved['model_id']}, {saved['dim']}-d), not "
            f"{embedder.model_id!r} ({embedder.dim}-d). Use the same model "
            f"(ISOTOPE_EMBEDDING_MODEL={saved['model']}) or ingest into a new index"
        )


def fixed_conflicts(settings: Settings, origins: Mapping[str, str],
                    fixed: Mapping[str, Any], where: str) -> list[FixedSetting]:
    """The index-fixed settings (:data:`FIXED`) given explicitly with a value other than
    the index's (``fixed``: the index's values; ``where``: the index, as shown), each as
    the error that refuses it."""
    found = []
    for name, theirs in fixed.items():
        if name not in FIXED or origins.get(name) not in EXPLICIT:
            continue
        given = getattr(settings, name)
        if _same(given, theirs):
            continue
        origin = origins[name]
        said = ("an argument" if origin == "argument" else f"$ISOTOPE_{name.upper()}"
                if origin == "env" else f"ISOTOPE_{name.upper()} in .env")
        found.append(FixedSetting(
            name, f"{name} = {_shown_value(given)} (from {said}): the index at {where} was "
            f"made with {name} = {_shown_value(theirs)} and keeps it; to change it, "
            f"{FIXED[name]}; or unset it to use the index's value"))
    return found


def keep_fixed(settings: Settings, origins: dict[str, str], fixed: Mapping[str, Any],
               where: str, *, remake: bool = False, refuse: bool = True
               ) -> tuple[Settings, dict[str, str]]:
    """``settings`` and ``origins`` with each index-fixed setting at the index's value
    (``fixed``), from ``index``. One given explicitly with another value is refused
    (:class:`FixedSetting`; with ``refuse`` False, replaced silently: what ``isotope
    config`` shows), unless ``remake`` and it is one that making the sources again
    changes (:data:`REMAKE`): that one is kept."""
    for problem in fixed_conflicts(settings, origins, fixed, where):
        if refuse and not (remake and problem.setting in REMAKE):
            raise problem
    taken = {name: value for name, value in fixed.items() if name in FIXED
             and not (remake and name in REMAKE and origins.get(name) in EXPLICIT)}
    if not taken:
        return settings, origins
    return (settings.model_copy(update=taken),
            {**origins, **dict.fromkeys(taken, "index")})


def _same(given: Any, theirs: Any) -> bool:
    if isinstance(given, str) and isinstance(theirs, str):
        return given.rstrip("/") == theirs.rstrip("/")
    return bool(given == theirs)


def _shown_value(value: Any) -> str:
    from isotope.redaction import mask_location

    return mask_location(value) if isinstance(value, str) else json.dumps(value)
