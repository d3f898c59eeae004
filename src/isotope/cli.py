"""The ``isotope`` command: a thin shell over :class:`isotope.Isotope`."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Column, Table

from isotope.errors import IsotopeError
from isotope.retrieval import MODES, thresholds

app = typer.Typer(
    name="isotope",
    help="A question-indexed retrieval database: ingest documents, then ask questions.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

IndexOpt = Annotated[
    Path | None,
    typer.Option("--index", "-i", help="Index directory (default: the ISOTOPE_INDEX setting, "
                 "else ./.isotope).", show_default=False),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def _fail(message: str, code: int = 1) -> NoReturn:
    err.print(f"[red]error:[/red] {message}", markup=True, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def _errors() -> Iterator[None]:
    try:
        yield
    except IsotopeError as exc:
        _fail(str(exc))


def _open(index: Path | None, *, create: bool = False, **settings: Any) -> Any:
    from isotope.index import Isotope

    return Isotope.open(index, create=create, **settings)


def _display(uri: str) -> str:
    """A source as a user would type it: relative to the working directory when inside it."""
    try:
        return str(Path(uri).relative_to(Path.cwd()))
    except ValueError:
        return uri


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str, ensure_ascii=False) + "\n")


@app.callback()
def _main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log what happens.")] = False,
) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Files and directories to ingest.")],
    index: IndexOpt = None,
    include: Annotated[list[str] | None, typer.Option(
        "--include", help="Only files matching this glob (repeatable).")] = None,
    exclude: Annotated[list[str] | None, typer.Option(
        "--exclude", help="Skip files matching this glob (repeatable).")] = None,
    questions_per_atom: Annotated[int | None, typer.Option(
        "--questions", "-n", help="Questions per atom.")] = None,
    generation: Annotated[str | None, typer.Option(
        "--generation", help="atom (one model call per atom), chunk (one per chunk) or "
        "batched (local model, parallel sequences).")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Only count chunks, atoms and model calls (and cache hits).")] = False,
    plain: Annotated[bool, typer.Option(
        "--plain", help="Print one line per file instead of a progress bar.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Ingest files and directories: chunk, atomize, generate questions, embed, store."""
    from dataclasses import asdict

    from isotope.ingest import Progress

    with _errors():
        iso = _open(index, create=True, questions_per_atom=questions_per_atom,
                    generation=generation)
        with iso:
            if dry_run:
                plan = iso.plan(paths, include=include, exclude=exclude)
                if as_json:
                    _print_json(asdict(plan))
                else:
                    _print_plan(plan)
                return
            progress_cb: Callable[[Progress], None] | None = None
            if plain and not as_json:
                def progress_cb(p: Progress) -> None:
                    if p.stage in ("load", "store") and p.source:
                        err.print(f"[{p.sources_done}/{p.sources_total}] {p.stage} {p.source} "
                                  f"chunks={p.chunks} atoms={p.atoms} questions={p.questions}")
                report = iso.ingest(paths, include=include, exclude=exclude, progress=progress_cb)
            elif as_json or not err.is_terminal:
                report = iso.ingest(paths, include=include, exclude=exclude)
            else:
                report = _with_bar(lambda update: iso.ingest(
                    paths, include=include, exclude=exclude, progress=update))
    if as_json:
        _print_json({**asdict(report), "ok": report.ok})
    else:
        _print_report(report)
    if not report.ok:
        raise typer.Exit(1)


def _with_bar(run: Callable[[Callable[[Any], None]], Any]) -> Any:
    """``run(progress_callback)`` with a progress bar on stderr."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from isotope.ingest import Progress as Event

    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[counts]}"), TimeElapsedColumn(), console=err, transient=True,
    ) as bar:
        task = bar.add_task("ingesting", total=None, counts="")

        def update(p: Event) -> None:
            name = Path(p.source).name if p.source else ""
            bar.update(
                task, total=p.sources_total or None, completed=p.sources_done,
                description=f"{p.stage} {name}"[:40],
                counts=f"chunks {p.chunks} · atoms {p.atoms} · questions {p.questions}",
            )

        return run(update)


def _print_plan(plan: Any) -> None:
    for problem in plan.errors:
        err.print(f"[red]error:[/red] {problem.path}: {problem.message}", soft_wrap=True)
    out.print(
        f"would ingest {plan.sources} source(s) ({plan.unchanged} unchanged): {plan.chunks} "
        f"chunks, {plan.atoms} atoms"
    )
    out.print(
        f"model calls: {plan.llm_calls} needed, {plan.cached_calls} already in the cache; "
        f"about {plan.estimated_prompt_tokens} prompt + {plan.estimated_completion_tokens} "
        "completion tokens for the rest"
    )


def _print_report(report: Any) -> None:
    for problem in report.errors:
        err.print(f"[red]error:[/red] {problem.path}: {problem.message}", soft_wrap=True)
    for skipped in report.skipped:
        err.print(f"[yellow]skipped:[/yellow] {skipped.path}: {skipped.message}", soft_wrap=True)
    total = sum(report.timings.values())
    out.print(
        f"ingested {len(report.added)} new, {len(report.replaced)} changed, "
        f"{len(report.unchanged)} unchanged source(s); {len(report.errors)} error(s), "
        f"{len(report.skipped)} skipped"
    )
    out.print(
        f"{report.chunks} chunks, {report.atoms} atoms, {report.questions} questions stored "
        f"({report.questions_dropped} dropped by the filters) in {total:.1f} s"
    )
    out.print(
        f"model: {report.llm_calls} calls, {report.llm_cache_hits} answered by the cache, "
        f"{report.prompt_tokens} prompt + {report.completion_tokens} completion tokens; "
        f"embeddings: {report.embedded} computed, {report.embedding_cache_hits} from the cache"
    )
    for failed in report.failed_atoms[:10]:
        err.print(f"[yellow]no questions:[/yellow] {failed.path}: {failed.message}",
                  soft_wrap=True)
    if report.failed_atoms:
        err.print(f"{len(report.failed_atoms)} atom(s) got no questions; run the same ingest "
                  "again to retry only those")


@app.command()
def query(
    text: Annotated[str, typer.Argument(help="Your question.")],
    index: IndexOpt = None,
    k: Annotated[int | None, typer.Option("-k", help="Number of chunks to return.")] = None,
    raw: Annotated[bool, typer.Option(
        "--raw", help="Only the chunks found; no synthesised answer.")] = False,
    mode: Annotated[str | None, typer.Option(
        "--mode", "-m", help="Retrieval mode: " + ", ".join(MODES) + " (default: the mode "
        "setting).")] = None,
    transform: Annotated[bool | None, typer.Option(
        "--transform/--no-transform",
        help="Rewrite a keyword query into questions first (default: the query_transform "
        "setting).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer a question from the index, citing the chunks it used."""
    with _errors(), _open(index) as iso:
        response = iso.search(text, k, mode=mode, transform=transform) if raw else iso.ask(
            text, k, mode=mode, transform=transform)
    if as_json:
        _print_json(response.model_dump(mode="json"))
        return
    if response.rewrites:
        out.print("searched also: " + " | ".join(response.rewrites), soft_wrap=True)
    if response.answer is not None:
        out.print(response.answer, soft_wrap=True)
        out.print()
    if not response.results:
        out.print("no results")
    for r in response.results:
        where = _display(r.chunk.source)
        if "page" in r.chunk.metadata:
            where += f" (page {r.chunk.metadata['page']})"
        elif r.chunk.metadata.get("headings"):
            where += " > " + " > ".join(r.chunk.metadata["headings"])
        out.print(f"[bold][{r.rank}][/bold] {r.score:.3f}  {where}", soft_wrap=True)
        if r.matched_questions:
            out.print(f"    matched: {r.matched_questions[0].text}", soft_wrap=True)
        if raw or response.answer is None:
            snippet = " ".join(r.chunk.text.split())
            out.print(f"    {snippet[:300]}{'…' if len(snippet) > 300 else ''}", soft_wrap=True)
    if response.results:
        out.print(f"suggested action: {response.suggested_action} (top score "
                  f"{response.top_score:.3f}, lead {response.score_spread:.3f})")


@app.command("list")
def list_sources(index: IndexOpt = None, as_json: JsonOpt = False) -> None:
    """List the ingested sources with their chunk, atom and question counts."""
    with _errors(), _open(index) as iso:
        infos = iso.sources()
    if as_json:
        _print_json([
            {**i.source.model_dump(mode="json"), "chunks": i.chunks, "atoms": i.atoms,
             "questions": i.questions} for i in infos
        ])
        return
    if not infos:
        out.print("the index has no sources")
        return
    table = Table("type", "chunks", "atoms", "questions", "ingested")
    table.columns.insert(0, Column("source", overflow="fold"))
    for i in infos:
        table.add_row(_display(i.source.uri), i.source.loader, str(i.chunks), str(i.atoms),
                      str(i.questions),
                      i.source.ingested_at.strftime("%Y-%m-%d %H:%M") if i.source.ingested_at
                      else "")
    out.print(table)


@app.command()
def delete(
    source: Annotated[str, typer.Argument(help="The source's path or identifier.")],
    index: IndexOpt = None,
) -> None:
    """Delete a source and its chunks, atoms and questions."""
    with _errors(), _open(index) as iso:
        iso.delete(source)
    out.print(f"deleted {source}")


@app.command()
def status(index: IndexOpt = None, as_json: JsonOpt = False) -> None:
    """Counts, disk size, models and settings of an index."""
    with _errors(), _open(index) as iso:
        info = iso.status()
    if as_json:
        _print_json(info.model_dump(mode="json"))
        return
    table = Table(show_header=False, box=None)
    table.add_row("index", info.index)
    table.add_row("schema", f"{info.schema_version} (created by isotope {info.isotope_version}"
                  f" on {info.created_at})")
    for name, count in info.counts.items():
        table.add_row(name, str(count))
    if info.disk_bytes is not None:
        table.add_row("disk", f"{info.disk_bytes / 1e6:.1f} MB")
    for role, model in info.models.items():
        table.add_row(f"{role} model", model)
    table.add_row("embedding", f"{info.embedding.get('model_id')} ({info.embedding.get('dim')}-d)")
    for name in ("chunk_size", "chunk_overlap", "questions_per_atom", "dedup_threshold"):
        table.add_row(name, str(info.settings[name]))
    out.print(table)


@app.command()
def config(index: IndexOpt = None, as_json: JsonOpt = False) -> None:
    """Show the resolved settings and where each value came from."""
    from isotope.settings import Settings, resolve
    from isotope.stores.sqlite import DB_NAME, SQLiteStore

    with _errors():
        base, _ = resolve(None, index=index)
        saved = None
        if (base.index / DB_NAME).exists():
            store = SQLiteStore(base.index, create=False)
            saved = store.get_meta("settings")
            store.close()
        settings, origins = resolve(saved, index=index)
    values = settings.model_dump(mode="json")
    if as_json:
        _print_json({name: {"value": values[name], "from": origins[name]} for name in values})
        return
    table = Table("setting (env ISOTOPE_<NAME>)", Column("value", overflow="fold"), "from")
    for name in Settings.model_fields:
        table.add_row(name, json.dumps(values[name]), origins[name])
    out.print(table)


@app.command("eval")
def eval_(
    passages: Annotated[Path, typer.Argument(help="Passages, JSON lines: pid, text.")],
    queries: Annotated[Path, typer.Argument(
        help="Questions, JSON lines: question, gold_pid.")],
    index: IndexOpt = None,
    limit_passages: Annotated[int | None, typer.Option(
        "--limit-passages", help="Only the first N passages and their questions.")] = None,
    mode: Annotated[list[str] | None, typer.Option(
        "--mode", "-m", help="Modes to score (repeatable; default: all).")] = None,
    chart: Annotated[Path | None, typer.Option(
        "--chart", help="Write a PNG bar chart here.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Score every retrieval mode on question/passage pairs: Recall@1/2/5 and MRR@10.

    Each passage is ingested as one chunk (into --index, default .isotope-eval; an index
    built before is reused, and the cache makes regeneration free)."""
    from dataclasses import asdict

    from isotope import evaluation

    modes = mode or list(MODES)
    with _errors():
        for name in modes:
            if name not in MODES:
                _fail(f"unknown mode {name!r}; choose from: {', '.join(MODES)}")
        pairs = evaluation.load(passages, queries, limit_passages)
        iso = _open(index or Path(".isotope-eval"), create=True)
        with iso:
            err.print(f"indexing {len(pairs[0])} passages (cached work is reused)...")
            chunks = evaluation.chunks_of(pairs[0])
            if err.is_terminal and not as_json:
                report = _with_bar(lambda update: iso.ingest_chunks(chunks, progress=update))
            else:
                report = iso.ingest_chunks(chunks)
            if report.failed_atoms:
                err.print(f"{len(report.failed_atoms)} atoms got no questions")

            result = evaluation.EvalResult(len(pairs[0]), len(pairs[1]))
            result.modes = evaluation.evaluate(
                evaluation.searcher(iso), pairs[1], modes, thresholds=lambda m: thresholds(
                    m, iso.settings.deliver_score, iso.settings.refine_score))
            result.ingest = {"added": len(report.added), "llm_calls": report.llm_calls,
                             "llm_cache_hits": report.llm_cache_hits,
                             "seconds": sum(report.timings.values())}
            if chart is not None:
                evaluation.chart(result, chart)
    if as_json:
        _print_json(asdict(result))
        return
    for title, rows in (
        (f"{result.passages} passages, {result.queries} questions", result.table()),
        ("suggested actions: thresholds in effect (deliver/refine), and those this data "
         "suggests", result.confidence_table()),
    ):
        table = Table(*rows[0].keys(), title=title)
        for row in rows:
            table.add_row(*(str(v) for v in row.values()))
        out.print(table)
    if chart is not None:
        out.print(f"chart: {chart}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
