"""isotope: a question-indexed retrieval database ("reverse RAG").

Each chunk of your documents is split into atomic statements, a language model writes the
questions each statement answers, and those questions are indexed. A query is matched
against the questions (question to question) and returns the source chunks.
"""

from __future__ import annotations

import logging

from isotope._version import __version__
from isotope.client import Client
from isotope.errors import (
    FixedSetting,
    IndexDamaged,
    IndexLocked,
    InvalidArgument,
    InvalidIndex,
    IsotopeError,
    LoaderError,
    MissingDependency,
    ModelMismatch,
    SettingsError,
    SourceNotFound,
    StoreError,
    SyncRefused,
    UnsupportedFile,
)
from isotope.index import Isotope
from isotope.ingest.pipeline import IngestReport, Progress
from isotope.knowledge.facts import GraphEntity, GraphRelation, Neighbourhood
from isotope.models import (
    Atom,
    Chunk,
    MatchedQuestion,
    QueryResponse,
    Question,
    SearchResult,
    Source,
)
from isotope.reports import IndexStatus
from isotope.settings import Settings

logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "Atom",
    "Chunk",
    "Client",
    "FixedSetting",
    "GraphEntity",
    "GraphRelation",
    "IndexDamaged",
    "IndexLocked",
    "IndexStatus",
    "IngestReport",
    "InvalidArgument",
    "InvalidIndex",
    "Isotope",
    "IsotopeError",
    "LoaderError",
    "MatchedQuestion",
    "MissingDependency",
    "ModelMismatch",
    "Neighbourhood",
    "Progress",
    "QueryResponse",
    "Question",
    "SearchResult",
    "Settings",
    "SettingsError",
    "Source",
    "SourceNotFound",
    "StoreError",
    "SyncRefused",
    "UnsupportedFile",
    "__version__",
]
