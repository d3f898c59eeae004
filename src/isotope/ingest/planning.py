"""The dry run (``isotope ingest --dry-run``): the chunks, atoms and model calls an ingest
needs, how many calls the cache already answers, and the tokens the others will cost.
Nothing is generated or stored."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from isotope import loaders
from isotope.errors import LoaderError
from isotope.ingest import contextual
from isotope.ingest.atomizers import SentenceAtomizer
from isotope.models import Chunk, content_hash
from isotope.providers import Prompt
from isotope.reports import FileError, IngestPlan

if TYPE_CHECKING:
    from isotope.ingest.pipeline import Pipeline

COMPLETION_TOKENS_PER_QUESTION = 16
COMPLETION_TOKENS_PER_CONTEXT = 50
MESSAGE_OVERHEAD_TOKENS = 8


def plan(pipeline: Pipeline, files: dict[Path, Path], plan: IngestPlan) -> IngestPlan:
    """Count into ``plan`` what ingesting ``files`` takes. With the ``llm`` atomizer, atoms
    are estimated by sentences and its calls are counted as one per chunk. A container (a
    mailbox) counts each member, and an email each attachment, as the ingest stores
    them: as sources of their own."""
    for path, root in files.items():
        for uri, loaded in _documents(pipeline, path, root):
            if isinstance(loaded, FileError):
                plan.errors.append(loaded)
            elif loaded is None:
                plan.unchanged += 1
            else:
                _count_document(pipeline, plan, uri, loaded)
    return plan


def _documents(pipeline: Pipeline, path: Path, root: Path
               ) -> Iterator[tuple[str, loaders.Document | FileError | None]]:
    """Each source ``path`` makes, as the ingest makes them (a mailbox's messages, an
    email's attachments), with its document, an error, or None when it is unchanged."""
    loader = loaders.loader_for(path)
    try:
        if loader is not None and loader.members is not None:
            members = loader.members(path, pipeline.max_bytes,
                                     grouping=pipeline.settings.mail_sources)
            for member in members:
                yield from _member(pipeline, str(path), member)
            return
        _, data = pipeline.read(path)
        if pipeline.is_current(pipeline.store.get_source(str(path)), content_hash(data)):
            yield str(path), None
            return
        document, _ = loaders.load(path, data, root=root, max_chars=pipeline.max_chars)
    except OSError as exc:
        yield str(path), FileError(str(path), f"cannot read: {exc.strerror or exc}")
        return
    except LoaderError as exc:
        yield str(path), FileError(exc.path, exc.reason)
        return
    yield str(path), document
    for member in document.members:
        yield from _member(pipeline, str(path), member)


def _member(pipeline: Pipeline, owner: str, member: loaders.Member
            ) -> Iterator[tuple[str, loaders.Document | FileError | None]]:
    uri = f"{owner}#{member.name}"
    if not member.data:
        yield uri, FileError(uri, "a member over the max_file_mb limit of "
                             f"{pipeline.max_bytes / 1e6:.0f} MB: left out")
        return
    if pipeline.is_current(pipeline.store.get_source(uri), content_hash(member.data)):
        yield uri, None
        return
    try:
        document = loaders.load_member(member.loader, Path(uri), member.data,
                                       max_chars=pipeline.max_chars)
    except LoaderError as exc:
        yield uri, FileError(exc.path, exc.reason)
        return
    yield uri, document
    for inner in document.members:
        yield from _member(pipeline, uri, inner)


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
