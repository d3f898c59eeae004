"""Settings: defaults, overridden by a saved index, then ``.env``, then ``ISOTOPE_*``
environment variables, then explicit arguments.

Index settings (models, chunking, question generation) are saved inside the index when it
is created, so an index describes itself; opening it later with other values for them in
the environment or arguments uses those values for new work, except the embedding model,
which must match (see :class:`isotope.errors.ModelMismatch`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from isotope.errors import SettingsError

DEFAULT_LLM = "local/qwen2.5-coder-1.5b"
DEFAULT_EMBEDDER = "local/all-minilm-l6-v2"


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "isotope"


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "isotope"


class Settings(BaseSettings):
    """All of isotope's settings. Environment variables use the ``ISOTOPE_`` prefix."""

    model_config = SettingsConfigDict(
        env_prefix="ISOTOPE_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    index: Path = Field(Path(".isotope"), description="Index directory used when none is given")
    cache_dir: Path = Field(
        default_factory=_default_cache_dir,
        description="Where the cache of model replies and embeddings lives",
    )
    cache: bool = Field(True, description="Reuse cached model replies and embeddings")
    model_dir: Path = Field(
        default_factory=lambda: _default_cache_dir() / "models",
        description="Where model files assembled from packages are kept",
    )

    embedding_model: str = Field(DEFAULT_EMBEDDER, description="Embedding model")
    embedding_dim: int | None = Field(
        None, description="Vector size of a remote embedding model (openai/...)"
    )
    question_model: str = Field(DEFAULT_LLM, description="Model that writes questions")
    answer_model: str = Field(DEFAULT_LLM, description="Model that writes answers")
    atomizer_model: str = Field(DEFAULT_LLM, description="Model of the llm atomizer")

    atomizer: Literal["sentence", "llm"] = Field("sentence", description="How chunks are split")
    min_atom_words: int = Field(3, ge=1, description="Shorter atoms get no questions")
    questions_per_atom: int = Field(5, ge=1, le=30, description="Questions asked per atom")
    generation: Literal["atom", "chunk", "batched"] = Field(
        "batched", description="One model call per atom, one per chunk, or batched decoding "
        "(local models; others use atom)"
    )
    max_repairs: int = Field(2, ge=0, description="Retries of a reply in the wrong format")
    min_question_similarity: float = Field(
        0.3, ge=-1, le=1, description="Drop questions less similar (cosine) to their atom"
    )
    dedup_threshold: float | None = Field(
        0.85, description="Drop questions this similar to a kept one of the chunk (None: off)"
    )

    chunk_size: int = Field(256, ge=16, description="Chunk size in tokens")
    chunk_overlap: int = Field(32, ge=0, description="Overlap between chunks in tokens")
    chunk_context: bool = Field(
        False, description="Contextual enrichment: the question model writes a short context "
        "situating each chunk in its document, searched with the chunk (one call per chunk)")
    context_chars: int = Field(
        6000, ge=200, description="Characters of the document shown to the model with each "
        "chunk (chunk_context; the document's beginning)")

    top_k: int = Field(5, ge=1, description="Chunks returned by a query")
    mode: str = Field("hybrid", description="Retrieval mode (isotope query --help)")
    alpha: float = Field(0.5, ge=0, le=1, description="Hybrid: weight of dense signals "
                         "(1 - alpha for keyword signals)")
    weights: dict[str, float] = Field(
        default_factory=dict, description="Hybrid: weight per signal, e.g. "
        '{"questions-bm25": 0.5}, over alpha and the defaults (0 leaves a signal out)')
    fusion: Literal["zscore", "rrf"] = Field("zscore", description="Hybrid fusion method")
    aggregate: Literal["max", "softsum"] = Field(
        "max", description="How several matches of one chunk make its score"
    )
    query_transform: bool = Field(
        False, description="Rewrite keyword queries into questions with the model first"
    )
    answer_k: int = Field(3, ge=1, description="Chunks given to the answer model")
    deliver_score: float | None = Field(
        None, ge=0, le=1, description="Top score from which a query's suggested action is "
        "'deliver' (default: calibrated per mode)")
    refine_score: float | None = Field(
        None, ge=0, le=1, description="Top score under which the suggested action is "
        "'refine_query' (default: calibrated per mode)")

    threads: int = Field(2, ge=1, description="CPU threads for the local models")
    llm_context: int = Field(4096, ge=512, description="Context window of the local model")
    temperature: float = Field(0.5, ge=0, description="Sampling temperature for questions")
    seed: int = Field(0, description="Sampling seed of the local model")

    openai_base_url: str | None = Field(
        None, description="Base URL of an OpenAI-compatible API (default: OpenAI's)"
    )
    openai_api_key: SecretStr | None = Field(
        default_factory=lambda: SecretStr(os.environ["OPENAI_API_KEY"])
        if os.environ.get("OPENAI_API_KEY") else None,
        description="API key for openai/ models (default: $OPENAI_API_KEY)",
    )
    llm_concurrency: int = Field(8, ge=1, description="Remote model calls in flight at once")
    requests_per_minute: float | None = Field(None, description="Remote request budget")
    tokens_per_minute: float | None = Field(None, description="Remote token budget")
    llm_timeout: float = Field(120.0, gt=0, description="Seconds before a remote call times out")
    llm_max_retries: int = Field(5, ge=0, description="Retries of a failed remote call")

    storage: Literal["content", "file-reference"] = Field(
        "content", description="content: chunk text is stored; file-reference: only "
        "offsets and a hash, text read from the file at query time")
    sync_strategy: Literal["source_aware", "none"] = Field(
        "source_aware", description="source_aware: skip unchanged files, replace changed "
        "ones reusing unchanged chunks, sync removes deleted files; none: re-index every "
        "file, remove nothing")
    max_file_mb: float = Field(64.0, gt=0, description="Larger files are reported, not read")
    lock_wait: float = Field(0.0, ge=0, description="Seconds to wait for another process "
                             "writing to the index (0: fail at once)")
    projects_dir: Path = Field(
        default_factory=lambda: _default_data_dir() / "projects",
        description="Where named indexes (projects) live")
    project: str | None = Field(None, description="Project used when no index is given")

    include: list[str] = Field(
        default_factory=list, description="Globs a file in a directory must match"
    )
    exclude: list[str] = Field(
        default_factory=lambda: [".*", "**/.*", "**/node_modules/**", "**/__pycache__/**"],
        description="Globs of files and folders skipped in a directory",
    )

    @field_validator("dedup_threshold", mode="before")
    @classmethod
    def _none_string(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in {"", "none", "off", "null"}:
            return None
        return value

    @model_validator(mode="after")
    def _overlap_below_size(self) -> Settings:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError(f"chunk_overlap ({self.chunk_overlap}) must be smaller than "
                             f"chunk_size ({self.chunk_size})")
        return self


INDEX_FIELDS: tuple[str, ...] = (
    "embedding_model",
    "embedding_dim",
    "question_model",
    "atomizer",
    "atomizer_model",
    "min_atom_words",
    "questions_per_atom",
    "generation",
    "min_question_similarity",
    "dedup_threshold",
    "chunk_size",
    "chunk_overlap",
    "chunk_context",
    "context_chars",
    "storage",
)
"""Settings saved inside an index when it is created."""

LOCAL_FIELDS: tuple[str, ...] = (
    "index", "project", "projects_dir", "cache_dir", "model_dir", "openai_api_key",
)
"""Settings of a machine or a call, never saved in an index."""


def env_origin(name: str) -> str | None:
    """Where a setting's value came from outside the code: ``env`` or ``.env``, else None."""
    key = f"ISOTOPE_{name.upper()}"
    if any(k.upper() == key for k in os.environ):
        return "env"
    env_file = Path(".env")
    if env_file.is_file():
        from dotenv import dotenv_values

        if any(k.upper() == key for k in dotenv_values(env_file)):
            return ".env"
    return None


def resolve(saved: dict[str, Any] | None, **overrides: Any) -> tuple[Settings, dict[str, str]]:
    """Settings for an index, and the origin of each value.

    Precedence, lowest first: defaults, ``saved`` (the index's own settings), ``.env``,
    environment, ``overrides`` (values that are None are ignored).
    """
    explicit = {k: v for k, v in overrides.items() if v is not None}
    try:
        return _resolve(saved, explicit)
    except ValidationError as exc:
        raise SettingsError(_describe(exc, explicit)) from None


def _describe(exc: ValidationError, explicit: dict[str, Any]) -> str:
    """One line per problem, naming the setting and where its value came from."""
    problems = []
    for error in exc.errors():
        name = ".".join(str(p) for p in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        if not name:
            problems.append(message)
            continue
        origin = ("argument" if name in explicit else
                  f"${'ISOTOPE_' + name.upper()}" if env_origin(name) == "env" else
                  env_origin(name) or "the index's saved settings")
        problems.append(f"{name} = {error.get('input')!r} (from {origin}): {message}")
    return "invalid setting: " + "; ".join(problems)


def _resolve(saved: dict[str, Any] | None, explicit: dict[str, Any]
             ) -> tuple[Settings, dict[str, str]]:
    base = Settings(**explicit)
    origins: dict[str, str] = {}
    values: dict[str, Any] = {}
    for name in Settings.model_fields:
        if name in explicit:
            origins[name] = "argument"
        elif origin := env_origin(name):
            origins[name] = origin
        elif saved and name in saved and name not in LOCAL_FIELDS:
            values[name] = saved[name]
            origins[name] = "index"
        else:
            origins[name] = "default"
    if values:
        base = Settings.model_validate({**base.model_dump(), **values})
    return base, origins


def project_settings(settings: Settings, names: Any) -> dict[str, Any]:
    """The settings among ``names`` that a project may save besides its index settings
    (retrieval mode, top_k, answer model...)."""
    dumped = settings.model_dump(mode="json")
    return {n: dumped[n] for n in names if n in dumped and n not in LOCAL_FIELDS}


def index_settings(settings: Settings) -> dict[str, Any]:
    """The part of ``settings`` saved inside an index."""
    dumped = settings.model_dump(mode="json")
    return {name: dumped[name] for name in INDEX_FIELDS}
