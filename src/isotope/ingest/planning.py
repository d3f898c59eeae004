"""The dry run (``isotope ingest --dry-run``): the chunks, atoms and model calls an ingest
needs, how many calls the cache already answers, and the tokens the others will cost.
Nothing is generated or stored."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from isotope import loaders
from isotope.ingest import contextual
from isotope.ingest.atomizers import SentenceAtomizer
from isotope.ingest.reading import Loaded, Unchanged
from isotope.models import Chunk
from isotope.providers import Prompt
from isotope.reports import FileError, IngestPlan

if TYPE_CHECKING:
    from isotope.ingest.pipeline import Pipeline

COMPLETION_TOKENS_PER_QUESTION = 16
COMPLETION_TOKENS_PER_CONTEXT = 50
MESSAGE_OVERHEAD_TOKENS = 8


def plan_paths(pipeline: Pipeline, paths: Iterable[str | Path], *,
               include: Sequence[str] | None = None,
               exclude: Sequence[str] | None = None) -> IngestPlan:
    """Count the chunks, atoms and model calls an ingest of ``paths`` by ``pipeline``
    needs, and how many calls the cache already covers (files found as the ingest finds
    them)."""
    result = IngestPlan()
    files, result.skipped, result.errors = pipeline.discover(paths, include, exclude)
    return plan(pipeline, files, result)


def plan(pipeline: Pipeline, files: dict[Path, Path], plan: IngestPlan) -> IngestPlan:
    """Count into ``plan`` what ingesting ``files`` takes. With the ``llm`` atomizer, atoms
    are estimated by sentences and its calls are counted as one per chunk. The files are
    walked as the ingest walks them (:mod:`isotope.ingest.reading`): a container's
    members and an email's attachments count as the sources of their own they become."""
    reader = pipeline.reader()
    for path, root in files.items():
        for found in reader.sources(path, root):
            if isinstance(found, FileError):
                plan.errors.append(found)
            elif isinstance(found, Unchanged):
                plan.unchanged += 1
            elif isinstance(found, Loaded):
                _count_document(pipeline, plan, found.source.uri, found.document)
    return plan


def _count_document(pipeline: Pipeline, plan: IngestPlan, uri: str,
                    document: loaders.Document) -> None:
    settings = pipeline.settings
    counter = pipeline.counter()
    plan.sources += 1
    chunks = pipeline.chunk(document, uri, counter)
    plan.chunks += len(chunks)
    if settings.atomizer == "llm":
        plan.llm_calls += len(chunks)
    if settings.chunk_context and chunks:
        _contexts(pipeline, plan, document, chunks, counter)
    generator = pipeline.generator()
    estimate_atoms = SentenceAtomizer(min_words=settings.min_atom_words)
    for chunk, atoms in zip(chunks, estimate_atoms.atomize_batch(chunks), strict=True):
        plan.atoms += len(atoms)
        prompts, cached = generator.plan(chunk, atoms)
        _count(plan, prompts, cached, counter,
               len(atoms) * settings.questions_per_atom * COMPLETION_TOKENS_PER_QUESTION)


def _contexts(pipeline: Pipeline, plan: IngestPlan, document: loaders.Document,
              chunks: list[Chunk], counter: Callable[[str], int]) -> None:
    title = document.metadata.get("title")
    prompts = contextual.prompts(document.text, chunks, title=str(title) if title else None,
                                 spec=pipeline.prompts["context"],
                                 max_chars=pipeline.settings.context_chars)
    cached = sum(pipeline.llm().cached(prompts, max_tokens=contextual.MAX_TOKENS))
    _count(plan, prompts, cached, counter, len(prompts) * COMPLETION_TOKENS_PER_CONTEXT)


def _count(plan: IngestPlan, prompts: list[Prompt], cached: int,
           counter: Callable[[str], int], completion: int) -> None:
    """Calls and estimated tokens of ``prompts``, of which ``cached`` the cache answers."""
    plan.llm_calls += len(prompts)
    plan.cached_calls += cached
    share = (len(prompts) - cached) / max(1, len(prompts))
    plan.estimated_prompt_tokens += int(share * sum(
        counter(m["content"]) + MESSAGE_OVERHEAD_TOKENS for p in prompts for m in p))
    plan.estimated_completion_tokens += int(share * completion)
