"""Copy an index between engines and vector backends (a folder with usearch or Chroma
vectors, PostgreSQL; any two stores, in any direction): every source with its chunks,
atoms, questions and vectors, and the index's own description (settings, embedding
model), without calling any model."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from isotope import stores
from isotope.errors import IsotopeError

log = logging.getLogger(__name__)

COPIED_META = ("settings", "embedding", "created_at", "isotope_version", "fitted_weights",
               "query_adapter", "query_adapter_matrix")
"""What describes an index, the signal weights fitted on its users' marks, and its query
adapter (:mod:`isotope.search.adapter`'s keys; the rest of its meta is each store's own
bookkeeping; the project an index belongs to stays with the original)."""


@dataclass
class CopyReport:
    source: str
    target: str
    sources: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Sources the target already held, unchanged (``resume``)."""
    chunks: int = 0
    atoms: int = 0
    questions: int = 0


def copy_index(source: str | Path, target: str | Path, *, resume: bool = False,
               progress: Callable[[int, int, str], None] | None = None,
               vector_build: tuple[str, str, int] = ("hnsw", "auto", 0),
               backend: stores.VectorBackend | None = None) -> CopyReport:
    """Copy the index at ``source`` into ``target`` (a directory or a store URL; created
    if missing), under the target's writer lock. The target must hold no sources, unless
    ``resume``: then the sources it holds unchanged (same content hash) are skipped, as
    after an interrupted copy. Each source is one transaction in the target; the index's
    description (settings, embedding model) is written last, so an interrupted copy is
    not mistaken for a finished one. ``vector_build``: the index a PostgreSQL target's
    question vectors get, and the memory and workers it builds its vector indexes with at
    the end (the ``pg_vector_index`` and ``hnsw_build_*`` settings); ``backend``: where a
    new embedded target keeps its vectors (the ``vector_backend`` setting)."""
    src = stores.open(source, create=False)
    try:
        dst = stores.open(target, create=True)
        dst.set_vector_build(*vector_build)
        if backend is not None:
            dst.set_vector_backend(backend)
        try:
            with dst.writer():
                return _copy(src, dst, stores.describe(source), stores.describe(target),
                             resume, progress)
        finally:
            dst.close()
    finally:
        src.close()


def _identity(src: stores.Store, described: str) -> dict[str, object]:
    """What names the index being copied: its location (password masked), when it was
    created, and its embedding model."""
    embedding = src.get_meta("embedding") or {}
    return {"location": described, "created_at": src.get_meta("created_at"),
            "model_id": embedding.get("model_id")}


def _same_model(a: dict[str, object], b: dict[str, object]) -> bool:
    return (a.get("model_id"), a.get("dim")) == (b.get("model_id"), b.get("dim"))


def _copy(src: stores.Store, dst: stores.Store, source: str, target: str, resume: bool,
          progress: Callable[[int, int, str], None] | None) -> CopyReport:
    report = CopyReport(source, target)
    held = {info.source.uri: info.source.content_hash for info in dst.sources()}
    if held and not resume:
        raise IsotopeError(f"{target} already holds sources; copy into an empty index (a "
                           "new directory, or a new ?schema=), or pass --resume to finish "
                           "an interrupted copy")
    origin = _identity(src, source)
    if held and dst.get_meta("copy_of") != origin:
        raise IsotopeError(f"{target} holds an index that is not a copy of {source} (or was "
                           "copied from it by an older isotope); --resume only finishes a "
                           "copy of the same index: copy into an empty index instead")
    theirs, ours = src.get_meta("embedding"), dst.get_meta("embedding")
    if ours and theirs and not _same_model(ours, theirs):
        raise IsotopeError(f"{target} was made with another embedding model "
                           f"({ours.get('model_id')}); copy into an empty index")
    dst.set_meta("copy_of", origin)  # before any source: a resume knows its own copy
    infos = src.sources()
    with dst.bulk():  # (a resumed one makes what an interrupted bulk load left undone)
        for n, info in enumerate(infos, start=1):
            uri = info.source.uri
            if held.get(uri) == info.source.content_hash:
                report.skipped.append(uri)
                continue
            batch = src.export_source(uri)
            if batch is None:  # deleted meanwhile
                continue
            dst.add(batch)
            report.sources.append(uri)
            report.chunks += len(batch.chunks)
            report.atoms += len(batch.atoms)
            report.questions += len(batch.questions)
            if progress:
                progress(n, len(infos), uri)
    meta = src.meta_items()
    for key in COPIED_META:
        if key in meta:
            dst.set_meta(key, meta[key])
    dst.settle()
    return report
