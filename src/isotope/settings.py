"""Settings: defaults, overridden by a saved index, then ``.env``, then ``ISOTOPE_*``
environment variables, then explicit arguments.

Index settings (models, chunking, question generation) are saved inside the index when it
is created, so an index describes itself; opening it later with other values for them in
the environment or arguments uses those values for new work, except the embedding model,
which must match (see :class:`isotope.errors.ModelMismatch`), and the settings the index
fixed (:data:`FIXED`), another value of which is refused
(:class:`isotope.errors.FixedSetting`).

``.env`` (in the working directory) is read by :func:`read_dotenv` only: once per version
of the file, as UTF-8, its python-dotenv warnings shown once per process. Every float
setting refuses ``inf`` and ``nan``. List settings (``include``, ``exclude``) take a JSON
list or globs separated by commas; ``weights`` takes a JSON object.

Longer than the other modules on purpose: it is the one table of settings (each a field
with its default, bounds and documentation) with the code that reads them in order;
``isotope config``, the docs' settings page and the error messages are built from it.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import stat
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings import SettingsError as SourceError

from isotope.errors import SettingsError

DEFAULT_LLM = "local/qwen2.5-coder-1.5b"
DEFAULT_EMBEDDER = "local/all-minilm-l6-v2"


def data_dir() -> Path:
    """isotope's data folder: ``$XDG_DATA_HOME/isotope`` (``~/.local/share/isotope``)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "isotope"



def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "isotope"


DOTENV = Path(".env")
"""The ``.env`` file read, relative to the working directory."""


class _OncePerProcess(logging.Filter):
    """Drops a record whose message was already let through, and names the file being
    parsed in python-dotenv's warnings (they only give a line number)."""

    isotope_once = True

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        parsing = getattr(_parsing, "path", None)
        if parsing is not None and "could not parse" in message:
            message = f"{message} of {parsing} (the line is ignored)"
            record.msg, record.args = message, ()
        with self._lock:
            if message in self._seen:
                return False
            self._seen.add(message)
        return True


_parsing = threading.local()
_dotenv_logger = logging.getLogger("dotenv.main")
if not any(getattr(f, "isotope_once", False) for f in _dotenv_logger.filters):
    _dotenv_logger.addFilter(_OncePerProcess())

_dotenv_cache: dict[str, tuple[tuple[int, int, int], dict[str, str]]] = {}


def read_dotenv(path: Path = DOTENV) -> Mapping[str, str]:
    """The variables set in ``path`` (``.env`` in the working directory), names upper-cased,
    ``{}`` when there is no such file. Variables without a value (a line ``NAME`` without
    ``=``) are left out, as pydantic-settings does.

    The file is parsed once per version (path, modification time, size, inode), so the
    settings and :func:`env_origin` see one reading, and a line python-dotenv cannot parse
    is warned about once. A file that cannot be read or is not UTF-8 text (a UTF-8 byte
    order mark is fine) is a :class:`SettingsError`.
    """
    try:
        info = path.stat()
    except OSError:
        return {}
    if not stat.S_ISREG(info.st_mode):
        return {}
    key = str(path.absolute())
    version = (info.st_mtime_ns, info.st_size, info.st_ino)
    cached = _dotenv_cache.get(key)
    if cached is not None and cached[0] == version:
        return cached[1]
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SettingsError(f"{path} cannot be read ({exc.strerror or exc}): make it readable "
                            "or remove it") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        utf16 = raw[:2] in (b"\xff\xfe", b"\xfe\xff")
        what = "it looks like UTF-16" if utf16 else (
            f"byte 0x{raw[exc.start]:02x} at position {exc.start} of {path.absolute()}")
        raise SettingsError(f"{path} is not UTF-8 text ({what}): save it as UTF-8") from None
    from dotenv import dotenv_values

    _parsing.path = path.absolute()
    try:
        parsed = dotenv_values(stream=io.StringIO(text))
    finally:
        _parsing.path = None
    values = {name.upper(): value for name, value in parsed.items() if value is not None}
    _dotenv_cache[key] = (version, values)
    return values


class _DotEnvSource(PydanticBaseSettingsSource):
    """The ``ISOTOPE_*`` variables of ``.env``, from :func:`read_dotenv` (instead of
    pydantic-settings' own reading: it would parse the file again for every Settings and
    fail with a traceback on a file that is not UTF-8)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        key = f"ISOTOPE_{field_name.upper()}"
        return read_dotenv().get(key), key, False

    def __call__(self) -> dict[str, Any]:
        values = read_dotenv()
        return {name: values[key] for name in self.settings_cls.model_fields
                if (key := f"ISOTOPE_{name.upper()}") in values}


def _globs(value: Any) -> Any:
    """A list setting from text: a JSON list, or globs separated by commas."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        try:
            return json.loads(text)
        except ValueError as exc:
            raise ValueError(f"not a JSON list ({exc}); write a JSON list of globs, "
                             'e.g. ["*.pdf", "build/**"], or globs separated by commas') from None
    return [glob.strip() for glob in text.split(",") if glob.strip()]


Globs = Annotated[list[str], NoDecode]
"""A list of globs; from text, a JSON list or globs separated by commas (see
:func:`_globs`)."""
Weight = Annotated[float, Field(ge=0, le=1000)]

Fusion = Literal["zscore", "rrf"]
"""How ``hybrid`` fuses its signals (:data:`isotope.search.retrieval.FUSIONS`)."""
Aggregate = Literal["max", "softsum"]
"""How several matches of one chunk make its score."""
QueryAdapter = Literal["off", "linear"]
"""The index's query adapter (:mod:`isotope.search.adapter`), or none."""
AnswerStrictness = Literal["lenient", "balanced", "strict"]
"""How much a passage must say of the question around an answer (:mod:`isotope.search.answer`)."""
VectorIndex = Literal["auto", "exact", "hnsw"]
KeywordIndex = Literal["auto", "fts5", "postings"]
"""What each kind's vectors and keywords are searched with (the embedded store)."""


class StorageSettings(BaseModel):
    """Settings group ``storage``: where the index is and how it is kept."""

    model_config = ConfigDict(allow_inf_nan=False)

    index: str = Field(".isotope", description="Index used when none is given: a directory, "
                       "or the URL of a store backend")
    storage: Literal["content", "file-reference"] = Field(
        "content", description="content: chunk text is stored; file-reference: only "
        "offsets and a hash, text read from the file at query time")
    vector_index: VectorIndex = Field(
        "auto", description="Vector index of each kind of item: auto (exact below 20,000 "
        "items, HNSW over int8 vectors from there), exact, or hnsw; applied when the "
        "vectors are next compacted (isotope compact)")
    vector_backend: str = Field(
        "usearch", description="Where a new index keeps its vectors: usearch (its own "
        "files; pgvector in PostgreSQL), chroma (a Chroma folder inside an embedded index), "
        "or a Chroma server as chroma+http://HOST:PORT/PREFIX (PREFIX names its "
        "collections; embedded or PostgreSQL); an index keeps the backend it was made with")
    chroma_token: SecretStr | None = Field(
        None, description="Token of the Chroma server (sent as a bearer token; never shown)")
    chroma_tenant: str | None = Field(None, description="Tenant on the Chroma server "
                                      "(default: Chroma's)")
    chroma_database: str | None = Field(None, description="Database on the Chroma server "
                                        "(default: Chroma's)")
    chroma_timeout: float = Field(30.0, gt=0, le=3600, description="Seconds a call to the "
                                  "Chroma server may take before it fails with a message")
    keyword_index: KeywordIndex = Field(
        "auto", description="What keyword (BM25) search reads: auto (FTS5, and for atoms "
        "and chunks from 20,000 rows saved postings that rank as FTS5 does, several times "
        "faster), fts5, or postings (every kind); applied when the vectors are next "
        "compacted (isotope compact)")
    sync_strategy: Literal["source_aware", "none"] = Field(
        "source_aware", description="source_aware: skip unchanged files, replace changed "
        "ones reusing unchanged chunks, sync removes deleted files; none: re-index every "
        "file, remove nothing")
    access_control: bool = Field(
        False, description="Sources without an access list are seen by administrators "
        "only (fail closed); on by itself for `isotope serve` when a key names a user. "
        "Off: they are seen by everyone, and a list, where set, still restricts its source")
    audit_log: bool = Field(
        False, description="Log every search in the index: when, who (the principal), the "
        "query, the mode and the chunks returned (isotope audit shows it)")
    audit_days: float = Field(90.0, gt=0, le=36_500, description="Days the query log "
                              "(and audit log) keeps a search and its feedback")
    query_log: bool | None = Field(
        None, description="Log every search with an id (query_id) for feedback: who, the "
        "query, mode, filters, results with scores, suggested action, latency (isotope "
        "log). Default: on under isotope serve, isotope mcp and isotope query (when the index "
        "can be written), off for the library and other commands")
    learn: Literal["auto", "review", "off"] | None = Field(
        None, description="What a result marked useful teaches: auto (the query becomes a "
        "question of the chunk at once), review (held for isotope questions review), off. "
        "Default: review with access control on, else auto")
    show_learned: bool = Field(
        False, description="Show learned questions (users' queries) as matched questions "
        "in search results")
    email_access: bool = Field(
        False, description="An email without another access list (--allow, the "
        ".isotope-access rules file) gets its sender and recipients (user:ADDRESS)")
    lock_wait: float = Field(0.0, ge=0, description="Seconds to wait for another process "
                             "writing to the index (0: fail at once)")
    projects_dir: Path = Field(
        default_factory=lambda: data_dir() / "projects",
        description="Where named indexes (projects) live")
    project: str | None = Field(None, description="Project used when no index is given")
    read_replicas: Globs = Field(
        default_factory=list, description="Read replicas (streaming standbys) of the "
        "index's PostgreSQL server, as postgresql:// URLs in a JSON list or separated by "
        "commas: searches are spread across the healthy ones, writes go to the primary")
    replica_max_lag: float = Field(
        5.0, gt=0, le=86_400, description="Seconds a read replica may lag behind the "
        "primary before searches skip it")
    replica_wait: float = Field(
        1.0, ge=0, le=60, description="Seconds a search waits for a read replica to replay "
        "this process's last write (read your writes) before it reads the primary")
    pg_vector_index: Literal["hnsw", "diskann"] = Field(
        "hnsw", description="PostgreSQL: what a new index's question vectors are indexed "
        "with: hnsw (pgvector, over halfvec) or diskann (pgvectorscale's StreamingDiskANN, "
        "over vector); fixed when the index first holds vectors (isotope copy into a new "
        "schema changes it). Atoms and chunks always use HNSW")
    hnsw_build_memory: str = Field(
        "auto", pattern=r"^(auto|[1-9][0-9]{0,5}MB|[1-9][0-9]{0,2}GB)$",
        description="PostgreSQL: memory for building an HNSW index at the end of a bulk "
        "load (isotope copy), as maintenance_work_mem, in MB or GB, e.g. 4GB; auto: the "
        "graph's size estimated from the rows (about 1.2 KB per 384-dimension vector), "
        "from 64MB up to 8GB")
    hnsw_build_workers: int = Field(
        0, ge=0, le=64, description="PostgreSQL: parallel workers for that HNSW build "
        "(max_parallel_maintenance_workers; the server's max_worker_processes bounds "
        "them); 0: the server's own setting")

    @field_validator("index", mode="before")
    @classmethod
    def _location(cls, value: Any) -> Any:
        return str(value) if isinstance(value, Path) else value

    @field_validator("read_replicas", mode="before")
    @classmethod
    def _replica_urls(cls, value: Any) -> Any:
        return _globs(value)

    @field_validator("vector_backend")
    @classmethod
    def _backend(cls, value: str) -> str:
        if not is_vector_backend(value):
            raise ValueError("use usearch, chroma, or a Chroma server as "
                             "chroma+http://HOST:PORT/PREFIX")
        return value


CHROMA_SCHEMES = ("chroma+http", "chroma+https")
"""The URL schemes of a Chroma server in the ``vector_backend`` setting."""


def is_vector_backend(value: str) -> bool:
    """Whether ``value`` names a vector backend: ``usearch``, ``chroma`` or a Chroma
    server's URL."""
    head = value.partition("://")[0].lower() if "://" in value else ""
    return value in ("usearch", "chroma") or head in CHROMA_SCHEMES


class ModelSettings(BaseModel):
    """Settings group ``models``: the models, where their files and cached replies
    live, and how remote ones are called."""

    model_config = ConfigDict(allow_inf_nan=False)

    embedding_model: str = Field(
        DEFAULT_EMBEDDER, description="Embedding model: local/all-minilm-l6-v2, "
        "local/multilingual-e5-small (extra e5; about 100 languages) or openai/NAME[@URL]; "
        "chosen when an index is made")
    embedding_dim: int | None = Field(
        None, description="Vector size of a remote embedding model (openai/...)"
    )
    question_model: str = Field(DEFAULT_LLM, description="Model that writes questions")
    answer_model: str = Field(DEFAULT_LLM, description="Model that writes answers")
    atomizer_model: str = Field(DEFAULT_LLM, description="Model of the llm atomizer")
    cache_dir: Path = Field(
        default_factory=_default_cache_dir,
        description="Where the cache of model replies and embeddings lives",
    )
    cache: bool = Field(True, description="Reuse cached model replies and embeddings")
    model_dir: Path = Field(
        default_factory=lambda: _default_cache_dir() / "models",
        description="Where model files assembled from packages are kept",
    )
    threads: int = Field(2, ge=1, le=1024, description="CPU threads for the local models")
    llm_context: int = Field(4096, ge=512, le=1_048_576,
                             description="Context window of the local model")
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
    llm_concurrency: int = Field(8, ge=1, le=1024,
                                 description="Remote model calls in flight at once")
    requests_per_minute: float | None = Field(
        None, ge=0, description="Remote request budget (None or 0: none)")
    tokens_per_minute: float | None = Field(
        None, ge=0, description="Remote token budget (None or 0: none)")
    llm_timeout: float = Field(120.0, gt=0, le=86_400,
                               description="Seconds before a remote call times out")
    llm_max_retries: int = Field(5, ge=0, le=100, description="Retries of a failed remote call")


class ChunkingSettings(BaseModel):
    """Settings group ``chunking``: which files are read and how their text is cut into chunks."""

    model_config = ConfigDict(allow_inf_nan=False)

    include: Globs = Field(
        default_factory=list, description="Globs a file in a directory must match (a JSON "
        "list, or globs separated by commas)"
    )
    exclude: Globs = Field(
        default_factory=lambda: [".*", "**/.*", "**/node_modules/**", "**/__pycache__/**"],
        description="Globs of files and folders skipped in a directory (a JSON list, or "
        "globs separated by commas)",
    )
    max_file_mb: float = Field(64.0, gt=0, le=1_000_000,
                               description="Larger files are reported, not read")
    max_text_mb: float = Field(
        32.0, gt=0, le=1_000_000, description="Most text one file may make (an email's "
        "attachment, a .docx that inflates, a .tex with its inputs); a file making more "
        "is reported, not ingested")
    mail_sources: Literal["message", "thread"] = Field(
        "message", description="A mailbox (.mbox) as one source per message, or per thread "
        "(its messages together, in order)")
    chunk_size: int = Field(256, ge=16, le=100_000, description="Chunk size in tokens")
    chunk_overlap: int = Field(32, ge=0, description="Overlap between chunks in tokens")
    chunk_context: bool = Field(
        False, description="Contextual enrichment: the question model writes a short context "
        "situating each chunk in its document, searched with the chunk (one call per chunk)")
    context_chars: int = Field(
        6000, ge=200, description="Characters of the document shown to the model with each "
        "chunk (chunk_context; a longer document: its beginning and a window around the "
        "chunk)")

    @field_validator("include", "exclude", mode="before")
    @classmethod
    def _file_globs(cls, value: Any) -> Any:
        return _globs(value)

    @model_validator(mode="after")
    def _overlap_below_size(self) -> Self:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError(f"chunk_overlap ({self.chunk_overlap}) must be smaller than "
                             f"chunk_size ({self.chunk_size})")
        return self


class QuestionSettings(BaseModel):
    """Settings group ``questions``: how chunks become atoms and atoms questions."""

    model_config = ConfigDict(allow_inf_nan=False)

    atomizer: Literal["sentence", "llm"] = Field("sentence", description="How chunks are split")
    min_atom_words: int = Field(3, ge=1, description="Shorter atoms get no questions")
    questions_per_atom: int = Field(5, ge=1, le=30, description="Questions asked per atom")
    generation: Literal["atom", "chunk", "batched"] = Field(
        "batched", description="One model call per atom, one per chunk, or batched decoding "
        "(local models; others use atom)"
    )
    max_repairs: int = Field(2, ge=0, le=20, description="Retries of a reply in the wrong format")
    graph: bool = Field(
        False, description="A knowledge graph: the question model also names each chunk's "
        "entities and relations (one more prompt per chunk, decoded with its questions)")
    min_question_similarity: float = Field(
        0.3, ge=-1, le=1, description="Drop questions less similar (cosine) to their atom"
    )
    dedup_threshold: float | None = Field(
        0.85, ge=-1, le=1,
        description="Drop questions this similar (cosine) to a kept one of the chunk (None: off)"
    )
    prompts_dir: Path | None = Field(
        None, description="A folder of NAME.txt files overriding prompts by name (isotope "
        "status lists the names); only the work an overridden prompt does is redone")

    @field_validator("dedup_threshold", mode="before")
    @classmethod
    def _none_string(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in {"", "none", "off", "null"}:
            return None
        return value


class RetrievalSettings(BaseModel):
    """Settings group ``retrieval``: how a query is searched and answered."""

    model_config = ConfigDict(allow_inf_nan=False)

    top_k: int = Field(5, ge=1, le=10_000, description="Chunks returned by a query")
    mode: str = Field("hybrid", description="Retrieval mode (isotope query --help)")
    alpha: float = Field(0.5, ge=0, le=1, description="Hybrid: weight of dense signals "
                         "(1 - alpha for keyword signals)")
    weights: Annotated[dict[str, Weight], NoDecode] = Field(
        default_factory=dict, description="Hybrid: weight per signal (0 to 1000), e.g. "
        '{"questions-bm25": 0.5}, over alpha and the defaults (0 leaves a signal out)')
    fusion: Fusion = Field("zscore", description="Hybrid fusion method")
    aggregate: Aggregate = Field(
        "max", description="How several matches of one chunk make its score"
    )
    query_transform: bool = Field(
        False, description="Rewrite keyword queries into questions with the model first"
    )
    query_adapter: QueryAdapter = Field(
        "off", description="A map of the query's embedding fitted on the index's own "
        "questions, for the statements' and chunks' dense signals: linear (fitted by "
        "`isotope adapter fit`, and again after an ingest, enrich or compact once the "
        "questions grew by a quarter; used only where it beats none on the questions held "
        "out of its fit); off: none")
    answer_k: int = Field(3, ge=1, le=100, description="Chunks given to the answer model")
    answer_bridges: int = Field(
        2, ge=0, le=20, description="With a knowledge graph (setting graph): passages given "
        "to the answer model after the answer_k chunks by a hybrid search for an answer "
        "(its graph signal at answer_graph_weight: a two-hop question's second passage); "
        "none past the 20 passages an answer reads; 0: none")
    answer_graph_weight: float = Field(
        1.0, ge=0.0, le=10.0, description="With a knowledge graph: the graph signal's weight "
        "in a hybrid search an answer is made from (a search's own weights, or the weights "
        "setting naming graph, come first; weights fitted from users' marks come after); "
        "0: the graph signal is left out")
    answer_strictness: AnswerStrictness = Field(
        "balanced", description="The answer_confidence an answer needs before `ask` shows "
        "it as generated (checked), and how much a passage must say of the question around "
        "it: lenient shows more answers and more wrong ones; balanced keeps generated "
        "answers right about 9 times in 10 on the development set; strict more still, "
        "quoting or declining the rest (the reliability table is in the retrieval guide)")
    deliver_score: float | None = Field(
        None, ge=0, le=1, description="Top score from which a query's suggested action is "
        "'deliver' (default: calibrated per mode)")
    refine_score: float | None = Field(
        None, ge=0, le=1, description="Top score under which the suggested action is "
        "'refine_query' (default: calibrated per mode)")

    @field_validator("weights", mode="before")
    @classmethod
    def _weights_json(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError as exc:
                raise ValueError(f"not a JSON object ({exc}); write e.g. "
                                 '{"questions-bm25": 0.5}') from None
        return value


class ServerSettings(BaseModel):
    """Settings group ``server``: what `isotope serve` accepts and from whom."""

    model_config = ConfigDict(allow_inf_nan=False)

    api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list, description="API keys of `isotope serve`: KEY (read and "
        "write) or KEY:read, as a JSON list or separated by commas")
    api_keys_file: Path | None = Field(
        None, description="A file of API keys for `isotope serve`, one per line: KEY, or "
        "KEY read")
    serve_roots: Globs = Field(
        default_factory=list, description="Folders whose files `isotope serve` may ingest "
        "by path (POST /sync, the MCP ingest tool; links out of them are not followed), as "
        "a JSON list or separated by commas; none: ingest by path is off over HTTP, and "
        "`isotope mcp` (stdio, run by the user) reads any path")
    max_upload_mb: float = Field(32.0, gt=0, le=100_000,
                                 description="Largest request body `isotope serve` accepts")
    allowed_hosts: Globs = Field(
        default_factory=list, description="Host names `isotope serve` answers to besides "
        "the loopback names and the address it listens on (* for any); other Host "
        "headers are refused (DNS rebinding)")
    allowed_origins: Globs = Field(
        default_factory=list, description="Web origins (https://app.example.com) whose "
        "pages may call `isotope serve` from a browser, besides the server's own page")
    body_timeout: float = Field(30.0, gt=0, le=3600, description="Seconds `isotope serve` "
                                "waits for more of a request's body before answering 408")

    @field_validator("api_keys", mode="before")
    @classmethod
    def _keys(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    return json.loads(text)
                except ValueError as exc:
                    raise ValueError(f"not a JSON list ({exc}); write e.g. "
                                     '["KEY", "OTHER:read"]') from None
            return [k.strip() for k in text.split(",") if k.strip()]
        return value

    @field_validator("serve_roots", "allowed_hosts", "allowed_origins", mode="before")
    @classmethod
    def _server_globs(cls, value: Any) -> Any:
        return _globs(value)


class IngestSettings(QuestionSettings, ChunkingSettings, ModelSettings, StorageSettings):
    """The groups an ingest reads (``storage``, ``models``, ``chunking``, ``questions``;
    the bases in reverse, so that fields list in that order)."""


class Settings(BaseSettings, ServerSettings, RetrievalSettings, IngestSettings):
    """All of isotope's settings, in groups (:data:`GROUPS`); each consumer takes its
    group's class. Environment variables use the ``ISOTOPE_`` prefix and the setting's
    name (no group)."""

    model_config = SettingsConfigDict(
        # env_file=None: .env is read by _DotEnvSource (see settings_customise_sources)
        env_prefix="ISOTOPE_", env_file=None, extra="ignore", allow_inf_nan=False,
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings, _DotEnvSource(settings_cls), file_secret_settings


GROUPS: dict[str, type[BaseModel]] = {
    "storage": StorageSettings, "models": ModelSettings, "chunking": ChunkingSettings,
    "questions": QuestionSettings, "retrieval": RetrievalSettings, "server": ServerSettings,
}
"""The settings groups by name, each a class whose fields are its settings."""


def group_of(name: str) -> str:
    """The group a setting belongs to."""
    return next(group for group, cls in GROUPS.items() if name in cls.model_fields)


INDEX_FIELDS: tuple[str, ...] = (
    "embedding_model",
    "embedding_dim",
    "question_model",
    "atomizer",
    "atomizer_model",
    "min_atom_words",
    "questions_per_atom",
    "generation",
    "graph",
    "min_question_similarity",
    "dedup_threshold",
    "chunk_size",
    "chunk_overlap",
    "chunk_context",
    "context_chars",
    "mail_sources",
    "storage",
)
"""Settings saved inside an index when it is created."""

REMADE = ("make a new index, or make this one's sources again with it: `isotope ingest "
          "--force PATHS` (in Python, Isotope.open(..., remake=True), then "
          "ingest(..., force=True))")
FIXED: dict[str, str] = {
    "graph": REMADE,
    "questions_per_atom": REMADE,
    "vector_backend": "`isotope copy` the index into a new one with the setting set",
    "pg_vector_index": "`isotope copy` the index into a new schema with the setting set",
}
"""The settings an index fixes when it is made (besides its embedding model, whose
mismatch is :class:`isotope.errors.ModelMismatch`), each with how to change it. Opening
the index takes its value; one given explicitly (an argument, the environment, ``.env``)
with another value is refused (:func:`isotope.opening.meta.keep_fixed`). ``graph`` and
``questions_per_atom`` are saved with the index's settings when it is made;
``vector_backend`` is fixed once it holds a source, ``pg_vector_index`` once it holds
vectors (what the store says: :meth:`isotope.stores.Store.fixed_settings`)."""
REMAKE = ("graph", "questions_per_atom")
"""The fixed settings that making the index's sources again changes (``remake``)."""
EXPLICIT = ("argument", "env", ".env")
"""The origins of a value given explicitly (:func:`resolve`'s)."""

LOCAL_FIELDS: tuple[str, ...] = (
    "index", "project", "projects_dir", "cache_dir", "model_dir", "openai_api_key",
    "api_keys", "api_keys_file", "serve_roots", "max_upload_mb", "allowed_hosts",
    "allowed_origins", "body_timeout", "chroma_token", "chroma_timeout",
)
"""Settings of a machine or a call, never saved in an index."""


def env_origin(name: str) -> str | None:
    """Where a setting's value came from outside the code: ``env`` or ``.env``, else None."""
    key = f"ISOTOPE_{name.upper()}"
    if any(k.upper() == key for k in os.environ):
        return "env"
    return ".env" if key in read_dotenv() else None


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
    except SourceError as exc:  # pydantic-settings could not decode a variable
        raise SettingsError(_describe_source(exc)) from None


def _origin(name: str, explicit: dict[str, Any]) -> str:
    origin = env_origin(name)
    return ("argument" if name in explicit else
            f"$ISOTOPE_{name.upper()}" if origin == "env" else
            origin or "the index's saved settings")


def _describe_source(exc: SourceError) -> str:
    """One line for pydantic-settings' own errors (they name the field, not the variable,
    and carry the cause apart)."""
    found = re.search(r'field "([^"]+)"', str(exc))
    reason = " ".join(str(exc.__cause__ or exc).split())
    if not found:
        return f"invalid setting: {' '.join(str(exc).split())}"
    name = found.group(1)
    origin = env_origin(name)
    where = (f"$ISOTOPE_{name.upper()}" if origin == "env" else
             f"ISOTOPE_{name.upper()} in .env" if origin == ".env" else
             f"ISOTOPE_{name.upper()}")
    return f"invalid setting: {name} (from {where}): {reason}"


def _describe(exc: ValidationError, explicit: dict[str, Any]) -> str:
    """One line per problem, naming the setting and where its value came from."""
    problems = []
    for error in exc.errors():
        name = ".".join(str(p) for p in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        if not name:
            problems.append(message)
            continue
        origin = _origin(str(error["loc"][0]), explicit)
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


def shown(settings: Settings) -> dict[str, Any]:
    """The settings as they may be shown (``isotope config``, ``isotope status``, ``GET
    /status``): secrets masked, and the password of every URL among them."""
    from isotope.redaction import mask_location

    def masked(value: Any) -> Any:
        if isinstance(value, str):
            return mask_location(value)
        if isinstance(value, list):
            return [masked(v) for v in value]
        return value

    # every URL (the index, openai_base_url, a proxy...) without its password
    return {name: masked(value) for name, value in settings.model_dump(mode="json").items()}


def index_settings(settings: IngestSettings) -> dict[str, Any]:
    """The part of ``settings`` saved inside an index."""
    dumped = settings.model_dump(mode="json")
    return {name: dumped[name] for name in INDEX_FIELDS}
