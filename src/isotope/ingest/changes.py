"""Change detection and reuse, as pure functions: what a stored source's content depends
on (the pipeline fingerprint), whether a stored source is current, and which chunks of a
changed source keep what was stored for them."""

from __future__ import annotations

from collections.abc import Sequence

from isotope import prompts as prompt_specs
from isotope.models import Chunk, Source, content_hash, stable_id
from isotope.prompts import PromptSpec
from isotope.settings import IngestSettings, index_settings
from isotope.stores import StoredChunk

NOT_CONTENT = ("storage", "mail_sources")
"""Index settings that do not change what is generated from a source (left out of the
fingerprint; ``mail_sources`` changes which sources a mailbox makes, not what each
holds)."""
CONTEXT_SETTINGS = ("chunk_context", "context_chars")
"""Settings of contextual enrichment: part of the pipeline's fingerprint only when it is on
(so indexes made before it existed stay current)."""
GRAPH_SETTINGS = ("graph",)
"""The knowledge graph's setting: in the fingerprint only when on (as the context's)."""


def fingerprint(settings: IngestSettings, prompts: dict[str, PromptSpec], model_id: str) -> str:
    """What a source's stored content depends on: a source made under another fingerprint
    is generated again. Settings that do not change the content (how chunks are stored)
    stay out, so adding such a setting does not invalidate indexes."""
    left_out = NOT_CONTENT + (() if settings.chunk_context else CONTEXT_SETTINGS) + (
        () if settings.graph else GRAPH_SETTINGS)
    content = {k: v for k, v in index_settings(settings).items() if k not in left_out}
    # The prompts whose output is stored (as they were listed before the prompts moved to
    # one module, so existing fingerprints are unchanged).
    used = (("context",) if settings.chunk_context else ()) + prompt_specs.CONTENT + (
        ("atomizer",) if settings.atomizer == "llm" else ()) + (
        prompt_specs.GRAPH if settings.graph else ())
    return stable_id(sorted(content.items()), *prompt_specs.fingerprint(prompts, used),
                     model_id)


def is_current(existing: Source | None, digest: str, fingerprint: str, *, force: bool,
               strategy: str) -> bool:
    """The stored source is of this content, made by this pipeline, and complete."""
    return (
        existing is not None
        and not force
        and strategy == "source_aware"
        and existing.content_hash == digest
        and existing.metadata.get("pipeline") == fingerprint
        and not existing.metadata.get("incomplete_atoms")
        and not existing.metadata.get("incomplete_contexts")
    )


def may_reuse(existing: Source | None, fingerprint: str, *, force: bool,
              strategy: str) -> bool:
    """Whether the chunks of a changed source may keep what ``existing`` stored for them."""
    return (existing is not None and strategy == "source_aware" and not force
            and existing.metadata.get("pipeline") == fingerprint)


def reusable(chunks: Sequence[Chunk], stored: dict[str, StoredChunk],
             incomplete: Sequence[str] = ()) -> dict[int, StoredChunk]:
    """The chunks (by position) whose text the stored source already holds with its atoms,
    questions and vectors; chunks listed as ``incomplete`` (by content hash) are asked
    again."""
    stored = {digest: found for digest, found in stored.items() if digest not in incomplete}
    reused: dict[int, StoredChunk] = {}
    for i, chunk in enumerate(chunks):
        found = stored.get(content_hash(chunk.text))
        if found is not None and len(found.atoms):
            reused[i] = found
    return reused
