"""Chroma as a vector place (``vector_backend = chroma``, or a server's
``chroma+http://HOST:PORT/PREFIX``): what both engines' Chroma places share. The client,
the sends and the searches are :class:`isotope.stores.chroma_vectors.ChromaVectors`;
each engine's place (:mod:`isotope.stores.sqlite_chroma`,
:mod:`isotope.stores.postgres_chroma`) gives it that engine's rows (a
:class:`isotope.stores.chroma_vectors.Rows`) and sends under that engine's lock. The
place's settings are ``chroma_token``, ``chroma_tenant``, ``chroma_database`` and
``chroma_timeout``."""

from __future__ import annotations

import uuid
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from isotope.ann import Ids, Searchable
from isotope.embedders import Vectors
from isotope.models import Condition
from isotope.stores.chroma_vectors import ChromaPlace, ChromaVectors, Rows, place_of
from isotope.stores.records import Kind, VectorBackend
from isotope.stores.vector_place import Table, VectorPlace


class Chroma(VectorPlace):
    """An index's vectors in Chroma collections, the pending writes in the engine's
    ``vector_log`` (see :mod:`isotope.stores.chroma_vectors`)."""

    name = "chroma"

    def __init__(self, side: Any, made: Mapping[str, Any] | None,
                 options: Mapping[str, Any]) -> None:
        super().__init__(side, made, options)
        made = self.made
        place = ChromaPlace(made.get("url"), str(made["prefix"]), made.get("tenant"),
                            made.get("database"), made.get("owner"))
        self.vectors = ChromaVectors(place, self._folder(), self._rows(),
                                     token=self.options.get("chroma_token"),
                                     timeout=float(self.options.get("chroma_timeout") or 30.0))

    @abstractmethod
    def _rows(self) -> Rows:
        """The engine's rows as Chroma reads them."""

    def _folder(self) -> Path:
        """Where an embedded Chroma folder is (a server's place has none)."""
        return Path()

    @classmethod
    def new(cls, side: Any, backend: VectorBackend) -> dict[str, Any]:
        place = place_of(backend.name, default_prefix=f"isotope-{uuid.uuid4().hex[:12]}",
                         tenant=backend.options.get("chroma_tenant"),
                         database=backend.options.get("chroma_database"))
        return {"name": cls.name, "url": place.url, "prefix": place.prefix,
                "tenant": place.tenant, "database": place.database,
                "owner": uuid.uuid4().hex}

    def claim(self) -> None:
        self.vectors.claim()

    def pending(self, kind: Kind) -> int:
        return self.vectors.log_size(kind)

    def send(self) -> int:
        return self.vectors.send()

    def searchable(self, kind: Kind, filters: Sequence[Condition]) -> Searchable:
        return self.vectors.searching(kind, filters)

    def get(self, kind: Kind, rows: list[int]) -> dict[int, Vectors]:
        return self.vectors.get(kind, rows)

    def count(self, kind: Kind) -> int:
        return self.vectors.count(kind)

    def check(self, kind: Kind, table: Table) -> list[tuple[str, Ids]]:
        return self.vectors.check(kind, table)

    def rebuild(self, kind: Kind, table: Table,
                embed_rows: Callable[[Ids], Vectors] | None) -> int:
        return self.vectors.rebuild(kind, table, embed_rows)

    def close(self) -> None:
        self.vectors.close()

    def drop(self) -> None:
        self.vectors.drop()
