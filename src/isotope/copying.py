"""Copy an index between engines (embedded <-> PostgreSQL, or any two stores): every
source with its chunks, atoms, questions and vectors, and the index's own description
(settings, embedding model), without calling any model."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from isotope import stores
from isotope.errors import IsotopeError

log = logging.getLogger(__name__)

COPIED_META = ("settings", "embedding", "created_at", "isotope_version", "project")
"""What describes an index (the rest of its meta is each store's own bookkeeping)."""


@dataclass
class CopyReport:
    source: str
    target: str
    sources: list[str] = field(default_factory=list)
    chunks: int = 0
    atoms: int = 0
    questions: int = 0


def copy_index(source: str | Path, target: str | Path, *,
               progress: Callable[[int, int, str], None] | None = None) -> CopyReport:
    """Copy the index at ``source`` into ``target`` (a directory or a store URL), which
    must hold no sources yet (it is created if missing). Each source is one transaction
    in the target: an interrupted copy leaves whole sources, and running it again after
    emptying the target starts over."""
    src = stores.open(source, create=False)
    try:
        dst = stores.open(target, create=True)
        try:
            report = CopyReport(stores.describe(source), stores.describe(target))
            if dst.counts()["sources"]:
                raise IsotopeError(f"{report.target} already holds sources; copy into an "
                                   "empty index (a new directory, or a new ?schema=)")
            theirs, ours = src.get_meta("embedding"), dst.get_meta("embedding")
            if ours and theirs and ours != theirs:
                raise IsotopeError(f"{report.target} was made with another embedding model "
                                   f"({ours.get('model')}); copy into an empty index")
            meta = src.meta_items()
            for key in COPIED_META:
                if key in meta:
                    dst.set_meta(key, meta[key])
            uris = [info.source.uri for info in src.sources()]
            with dst.bulk():
                for n, uri in enumerate(uris, start=1):
                    batch = src.export_source(uri)
                    if batch is None:  # deleted meanwhile
                        continue
                    dst.add(batch)
                    report.sources.append(uri)
                    report.chunks += len(batch.chunks)
                    report.atoms += len(batch.atoms)
                    report.questions += len(batch.questions)
                    if progress:
                        progress(n, len(uris), uri)
            dst.settle()
            return report
        finally:
            dst.close()
    finally:
        src.close()
