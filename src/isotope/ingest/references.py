"""File references (``storage = "file-reference"``): the index keeps, per chunk, its
offsets in the loaded text of its file and the sha256 of its text, not the text itself.
At query time the text is read back from the file; a chunk whose text is no longer there
(the file changed or is gone) is marked ``stale`` with empty text, never replaced by other
text. Only files inside the path they were ingested from (their root) are read, as the
paths they were reached by (see :mod:`isotope.files`), and only regular files.

For keyword search a referenced chunk is stored as its sorted words: BM25 needs only the
words and their counts, not their order, so chunk keyword search works unchanged.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from isotope import loaders
from isotope.errors import LoaderError
from isotope.files import read_file
from isotope.models import Chunk, Source, content_hash

log = logging.getLogger(__name__)
HASH_KEY = "sha256"
"""Metadata key of a referenced chunk's text hash."""


def strip(chunks: list[Chunk]) -> tuple[list[Chunk], list[str]]:
    """Chunks as a file-reference index stores them (sorted words instead of the text,
    the hash of the text in metadata), and their text hashes."""
    hashes = [content_hash(c.text) for c in chunks]
    stored = [
        c.model_copy(update={"text": " ".join(sorted(re.findall(r"\w+", c.text))),
                             "metadata": {**c.metadata, HASH_KEY: h}})
        for c, h in zip(chunks, hashes, strict=True)
    ]
    return stored, hashes


def inside(path: str, root: str | None) -> bool:
    """``path`` is ``root`` or below it, as the paths read (a source is the path it was
    reached by, see :mod:`isotope.files`; a tampered path with ``..`` is refused)."""
    if not root or not os.path.isabs(path) or os.path.normpath(path) != path:
        return False
    top = os.path.normpath(root)
    return path == top or path.startswith(top.rstrip(os.sep) + os.sep)


def read_back(chunks: list[Chunk], sources: dict[str, Source | None],
              max_bytes: int) -> list[Chunk]:
    """The chunks with their text read from their files, or marked stale."""
    texts: dict[str, str | None] = {}
    out: list[Chunk] = []
    for chunk in chunks:
        digest = chunk.metadata.get(HASH_KEY)
        source = sources.get(chunk.source)
        if digest is None or source is None or source.loader == "chunks":
            out.append(chunk)  # content stored in the index
            continue
        if chunk.source not in texts:
            texts[chunk.source] = _load(source, max_bytes)
        text = texts[chunk.source]
        piece = text[chunk.start : chunk.end] if text is not None else None
        if piece is not None and content_hash(piece) == digest:
            out.append(chunk.model_copy(update={"text": piece}))
        else:
            out.append(chunk.model_copy(update={"text": "", "stale": True}))
    return out


def _load(source: Source, max_bytes: int) -> str | None:
    if not inside(source.uri, source.root):
        log.warning("not reading %s: outside the ingested root %s", source.uri, source.root)
        return None
    try:
        _, data = read_file(source.uri, max_bytes)
        document, _ = loaders.load(Path(source.uri), data)
    except LoaderError:
        return None
    return document.text
