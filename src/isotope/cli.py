"""The ``isotope`` command: a thin shell over :class:`isotope.Isotope`."""

from __future__ import annotations

import json
import logging
import sys
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.segment import Segment
from rich.table import Column, Table
from rich.text import Text

from isotope._version import __version__
from isotope.errors import IsotopeError
from isotope.retrieval import MODES, thresholds

app = typer.Typer(
    name="isotope",
    help="A question-indexed retrieval database: ingest documents, then ask questions.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def visible(text: str) -> str:
    """``text`` with control and format characters (terminal escape sequences,
    bidirectional overrides) written out as ``\\x1b``-style escapes, so that a file name
    or a document cannot clear the screen, retitle the window or reorder what is shown."""
    if text.isprintable():
        return text
    return "".join(c if c == "\n" or c.isprintable() or unicodedata.category(c) == "Zs"
                   else ascii(c)[1:-1] for c in text)


class _Console(Console):
    """A console that never interprets markup in what it is given (a file named
    ``[red]x.txt`` is shown as such) and shows control characters of the text it prints
    visibly (:func:`visible`); its own styles and the progress bar's cursor moves pass."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(highlight=False, markup=False, emoji=False, soft_wrap=True,
                         **kwargs)

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            s if s.control else Segment(visible(s.text), s.style) for s in buffer)


out = _Console()
err = _Console(stderr=True)


class _VisibleFormatter(logging.Formatter):
    """Log lines with control characters shown as escapes (they carry file names)."""

    def format(self, record: logging.LogRecord) -> str:
        return visible(super().format(record))


def _labelled(label: str, style: str, message: str) -> Text:
    """``label`` in ``style``, then ``message`` as it is."""
    return Text.assemble((label, style), " ", message)

IndexOpt = Annotated[
    str | None,
    typer.Option("--index", "-i", help="Index directory, or a store URL (default: the "
                 "ISOTOPE_INDEX setting, else ./.isotope).", show_default=False),
]
ProjectOpt = Annotated[
    str | None,
    typer.Option("--project", "-p", help="A named index (isotope project list); default: "
                 "the ISOTOPE_PROJECT setting, else the default project.", show_default=False),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
WaitOpt = Annotated[float | None, typer.Option(
    "--wait", help="Seconds to wait if another process is writing to the index "
    "(default: the lock_wait setting, 0: fail at once).", show_default=False)]
IncludeOpt = Annotated[list[str] | None, typer.Option(
    "--include", help="Only files matching this glob (repeatable).")]
ExcludeOpt = Annotated[list[str] | None, typer.Option(
    "--exclude", help="Skip files matching this glob (repeatable).")]
ContextOpt = Annotated[bool | None, typer.Option(
    "--chunk-context/--no-chunk-context", help="Contextual enrichment: the model situates "
    "each chunk in its document, and the chunk is searched with that context (one model "
    "call per chunk; saved in a new index's settings).")]
PlainOpt = Annotated[bool, typer.Option(
    "--plain", help="Print one line per file instead of a progress bar.")]


def _fail(message: str, code: int = 1) -> NoReturn:
    err.print(_labelled("error:", "red", message))
    raise typer.Exit(code)


@contextmanager
def _errors() -> Iterator[None]:
    try:
        yield
    except IsotopeError as exc:
        _fail(str(exc))


def _open(index: str | Path | None, project: str | None = None, *, create: bool = False,
          **settings: Any) -> Any:
    from isotope import stores
    from isotope.index import Isotope

    if project is not None:
        if index is not None:
            _fail("give --index or --project, not both")
        from isotope import projects
        from isotope.settings import resolve

        projects.require(project, resolve(None)[0])
        return Isotope.open(create=False, project=project, **settings)
    if index is not None and stores.scheme(index) is None:
        index = Path(index)  # --index NAME is the folder ./NAME, never a project
    return Isotope.open(index, create=create, **settings)


def _describe(location: str) -> str:
    from isotope import stores

    return stores.describe(location)


def _display(uri: str) -> str:
    """A source as a user would type it: relative to the working directory when inside it."""
    try:
        return str(Path(uri).relative_to(Path.cwd()))
    except ValueError:
        return uri


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str, ensure_ascii=False) + "\n")


def _print_version(value: bool) -> None:
    if value:
        out.print(f"isotope {__version__}")
        raise typer.Exit()


_verbose = False


@app.callback()
def _main(
    verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Log what happens, and show the traceback of an unexpected "
        "error.")] = False,
    version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print isotope's version and exit.")] = False,
) -> None:
    global _verbose
    _verbose = verbose
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    for handler in logging.getLogger().handlers:  # log lines name files too
        handler.setFormatter(_VisibleFormatter("%(levelname)s %(name)s: %(message)s"))


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Files and directories to ingest.")],
    index: IndexOpt = None,
    project: ProjectOpt = None,
    include: IncludeOpt = None,
    exclude: ExcludeOpt = None,
    questions_per_atom: Annotated[int | None, typer.Option(
        "--questions", "-n", help="Questions per atom.")] = None,
    generation: Annotated[str | None, typer.Option(
        "--generation", help="atom (one model call per atom), chunk (one per chunk) or "
        "batched (local model, parallel sequences).")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Only count chunks, atoms and model calls (and cache hits).")] = False,
    chunk_context: ContextOpt = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Ingest unchanged files again too, reusing nothing stored (cached "
        "model replies still answer).")] = False,
    plain: PlainOpt = False,
    wait: WaitOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Ingest files and directories: chunk, atomize, generate questions, embed, store.
    Unchanged files are skipped; a changed file is replaced, keeping its unchanged chunks."""
    from dataclasses import asdict

    with _errors():
        iso = _open(index, project, create=True, questions_per_atom=questions_per_atom,
                    generation=generation, lock_wait=wait, chunk_context=chunk_context)
        with iso:
            if dry_run:
                plan = iso.plan(paths, include=include, exclude=exclude)
                if as_json:
                    _print_json(asdict(plan))
                else:
                    _print_plan(plan)
                return
            report = _ingest_with_progress(partial(iso.ingest, force=force), paths, include,
                                           exclude, plain, as_json)
    _finish_ingest(report, as_json)


@app.command()
def sync(
    paths: Annotated[list[Path], typer.Argument(help="Directories (or files) to mirror.")],
    index: IndexOpt = None,
    project: ProjectOpt = None,
    include: IncludeOpt = None,
    exclude: ExcludeOpt = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Remove the sources of deleted files even when that is all or most "
        "of a folder's sources (refused otherwise: an unmounted folder looks like that).")
    ] = False,
    plain: PlainOpt = False,
    wait: WaitOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Make the index match these paths: ingest new and changed files, and remove the
    sources whose files were deleted (with sync_strategy=source_aware, the default).
    A sync that would remove all or most of a folder's sources refuses without --force."""
    with _errors(), _open(index, project, create=True, lock_wait=wait) as iso:
        report = _ingest_with_progress(partial(iso.sync, force=force), paths, include,
                                       exclude, plain, as_json)
    _finish_ingest(report, as_json)


def _ingest_with_progress(run: Callable[..., Any], paths: list[Path], include: Any,
                          exclude: Any, plain: bool, as_json: bool) -> Any:
    from isotope.ingest import Progress

    if plain and not as_json:
        def progress_cb(p: Progress) -> None:
            if p.stage in ("load", "store") and p.source:
                err.print(f"[{p.sources_done}/{p.sources_total}] {p.stage} {p.source} "
                          f"chunks={p.chunks} atoms={p.atoms} questions={p.questions}")
        return run(paths, include=include, exclude=exclude, progress=progress_cb)
    if as_json or not err.is_terminal:
        return run(paths, include=include, exclude=exclude)
    return _with_bar(lambda update: run(paths, include=include, exclude=exclude,
                                        progress=update))


def _finish_ingest(report: Any, as_json: bool) -> None:
    from dataclasses import asdict

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
        TextColumn("{task.description}", style="bold", markup=False), BarColumn(),
        MofNCompleteColumn(), TextColumn("{task.fields[counts]}", markup=False),
        TimeElapsedColumn(), console=err, transient=True,
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
        err.print(_labelled("error:", "red", f"{problem.path}: {problem.message}"))
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
        err.print(_labelled("error:", "red", f"{problem.path}: {problem.message}"))
    for skipped in report.skipped:
        err.print(_labelled("skipped:", "yellow", f"{skipped.path}: {skipped.message}"))
    total = sum(report.timings.values())
    removed = f", {len(report.removed)} removed" if report.removed else ""
    out.print(
        f"ingested {len(report.added)} new, {len(report.replaced)} changed, "
        f"{len(report.unchanged)} unchanged source(s){removed}; {len(report.errors)} "
        f"error(s), {len(report.skipped)} skipped"
    )
    reused = (f"; {report.reused_chunks} unchanged chunks of changed files kept their "
              "questions" if report.reused_chunks else "")
    out.print(
        f"{report.chunks} chunks, {report.atoms} atoms, {report.questions} questions stored "
        f"({report.questions_dropped} dropped by the filters) in {total:.1f} s{reused}"
    )
    out.print(
        f"model: {report.llm_calls} calls, {report.llm_cache_hits} answered by the cache, "
        f"{report.prompt_tokens} prompt + {report.completion_tokens} completion tokens; "
        f"embeddings: {report.embedded} computed, {report.embedding_cache_hits} from the cache"
    )
    if report.contexts or report.failed_contexts:
        out.print(f"{report.contexts} chunk context(s) written")
    for failed in report.failed_contexts[:10]:
        err.print(_labelled("no context:", "yellow", f"{failed.path}: {failed.message}"))
    for failed in report.failed_atoms[:10]:
        err.print(_labelled("no questions:", "yellow", f"{failed.path}: {failed.message}"))
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
    where: Annotated[list[str] | None, typer.Option(
        "--where", "-w", help="Only chunks whose metadata match: key=value, key!=value, "
        "key>=value, key<value...; source=GLOB, type=pdf (repeatable; all must hold).")] = None,
    project: ProjectOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer a question from the index, citing the chunks it used."""
    from isotope.filters import parse_where

    with _errors():
        filters = parse_where(where or [])
        with _open(index, project) as iso:
            response = iso.search(text, k, mode=mode, transform=transform, filters=filters
                                  ) if raw else iso.ask(text, k, mode=mode, transform=transform,
                                                        filters=filters)
    if as_json:
        _print_json(response.model_dump(mode="json"))
        return
    if response.rewrites:
        out.print("searched also: " + " | ".join(response.rewrites), )
    if response.answer is not None:
        out.print(response.answer)
        out.print()
    if not response.results:
        out.print("no results")
    for r in response.results:
        place = _display(r.chunk.source)
        if "page" in r.chunk.metadata:
            place += f" (page {r.chunk.metadata['page']})"
        elif r.chunk.metadata.get("headings"):
            place += " > " + " > ".join(r.chunk.metadata["headings"])
        out.print(Text.assemble(
            (f"[{r.rank}]", "bold"), f" {r.score:.3f}  {place}",
            ("  (stale: the file changed; run isotope sync)" if r.chunk.stale else "",
             "yellow")))
        if r.matched_questions:
            out.print(f"    matched: {r.matched_questions[0].text}")
        if raw or response.answer is None:
            if r.chunk.context:
                out.print(f"    context: {r.chunk.context}", style="dim")
            snippet = " ".join(r.chunk.text.split())
            out.print(f"    {snippet[:300]}{'…' if len(snippet) > 300 else ''}")
    if response.results:
        out.print(f"suggested action: {response.suggested_action} (top score "
                  f"{response.top_score:.3f}, lead {response.score_spread:.3f})")


@app.command("list")
def list_sources(index: IndexOpt = None, project: ProjectOpt = None,
                 as_json: JsonOpt = False) -> None:
    """List the ingested sources: status (current, changed on disk, missing, incomplete)
    and chunk, atom and question counts."""
    with _errors(), _open(index, project) as iso:
        infos = iso.sources()
    if as_json:
        _print_json([
            {**i.source.model_dump(mode="json"), "state": i.state, "chunks": i.chunks,
             "atoms": i.atoms, "questions": i.questions} for i in infos
        ])
        return
    if not infos:
        out.print("the index has no sources")
        return
    stale = sum(i.state in ("changed", "missing") for i in infos)
    table = Table("status", "type", "chunks", "questions", "ingested")
    table.columns.insert(0, Column("source", overflow="fold"))
    labels = {"changed": Text("changed on disk", "yellow"), "missing": Text("missing", "red"),
              "incomplete": Text("incomplete", "yellow")}
    for i in infos:
        table.add_row(_display(i.source.uri), labels.get(i.state, i.state or "-"),
                      i.source.loader, str(i.chunks),
                      str(i.questions),
                      i.source.ingested_at.strftime("%Y-%m-%d") if i.source.ingested_at
                      else "")
    out.print(table)
    if stale:
        out.print(f"{stale} source(s) differ from their files; `isotope sync DIR` updates them")


@app.command()
def delete(
    source: Annotated[str, typer.Argument(help="The source's path or identifier.")],
    index: IndexOpt = None,
    project: ProjectOpt = None,
    wait: WaitOpt = None,
) -> None:
    """Delete a source and its chunks, atoms and questions."""
    with _errors(), _open(index, project, lock_wait=wait) as iso:
        iso.delete(source)
    out.print(f"deleted {source}")


@app.command()
def status(index: IndexOpt = None, project: ProjectOpt = None,
           as_json: JsonOpt = False) -> None:
    """Counts, disk size, models and settings of an index."""
    with _errors(), _open(index, project) as iso:
        info = iso.status()
    if as_json:
        _print_json(info.model_dump(mode="json"))
        return
    table = Table(show_header=False, box=None)
    table.add_column()
    table.add_column(overflow="fold")
    table.add_row("index", info.index + (f" (project {info.project})" if info.project else ""))
    table.add_row("schema", f"{info.schema_version} (created by isotope {info.isotope_version}"
                  f" on {info.created_at})")
    for name, count in info.counts.items():
        table.add_row(name, str(count))
    if info.disk_bytes is not None:
        table.add_row("disk", f"{info.disk_bytes / 1e6:.1f} MB")
    for role, model in info.models.items():
        table.add_row(f"{role} model", model)
    table.add_row("embedding", f"{info.embedding.get('model_id')} ({info.embedding.get('dim')}-d)")
    table.add_row("prompts", ", ".join(f"{name} {version}"
                                       for name, version in info.prompt_versions.items()))
    for name in ("chunk_size", "chunk_overlap", "questions_per_atom", "dedup_threshold"):
        table.add_row(name, str(info.settings[name]))
    out.print(table)


@app.command()
def config(index: IndexOpt = None, project: ProjectOpt = None,
           as_json: JsonOpt = False) -> None:
    """Show the resolved settings and where each value came from."""
    from isotope import projects, stores
    from isotope import prompts as prompt_specs
    from isotope.settings import Settings, resolve

    with _errors():
        base, origins = resolve(None, index=index, project=project)
        path = projects.index_path(base, origins)
        saved = None
        if stores.exists(path):
            store = stores.open(path, create=False)
            saved = store.get_meta("settings")
            store.close()
        settings, origins = resolve(saved, index=path, project=project)
        overridden = {name: str(spec.source) for name, spec in
                      prompt_specs.load(settings.prompts_dir).items() if spec.source}
    values = settings.model_dump(mode="json")
    if as_json:
        _print_json({**{name: {"value": values[name], "from": origins[name]}
                        for name in values}, "overridden_prompts": overridden})
        return
    table = Table("setting (env ISOTOPE_<NAME>)", Column("value", overflow="fold"), "from")
    for name in Settings.model_fields:
        table.add_row(name, json.dumps(values[name]), origins[name])
    out.print(table)
    for name, file in overridden.items():
        out.print(f"prompt {name}: overridden by {file}")


@app.command()
def check(
    index: IndexOpt = None,
    project: ProjectOpt = None,
    repair: Annotated[bool, typer.Option(
        "--repair", help="Repair first: rebuild the keyword indexes and the vector cache, "
        "ingest again the sources that lost rows, remove those that cannot be (each "
        "named).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Check the index's integrity: every question has its atom, chunk and vector, every
    chunk its source, each source holds what it stored, keyword and vector indexes agree
    with the tables. Problems name the sources involved. Exit code 1 if a problem is
    left."""
    from dataclasses import asdict

    with _errors(), _open(index, project) as iso:
        done = iso.repair() if repair else None
        problems = done.problems if done else iso.check()
        try:
            counts = iso.store.counts()
        except IsotopeError:  # a damaged database: the problems above say so
            counts = {}
    if as_json:
        _print_json({"ok": not problems, "problems": problems, "counts": counts,
                     **({"repair": asdict(done)} if done else {})})
        if problems:
            raise typer.Exit(1)
        return
    if done:
        for uri in done.reingested:
            out.print(f"ingested again: {_display(uri)}")
        for uri in done.removed:
            err.print(_labelled("removed:", "yellow", f"{_display(uri)} (damaged, and it "
                                "cannot be ingested again from here: ingest it yourself)"))
        for uri in done.kept:
            err.print(_labelled("kept:", "yellow", f"{_display(uri)} (damaged, but the folder "
                                "it was ingested from is gone: mount it and repair again, "
                                "or delete it)"))
        for failed in done.errors:
            err.print(_labelled("error:", "red", f"{failed.path}: {failed.message}"))
    if problems:
        for problem in problems:
            err.print(_labelled("problem:", "red", problem))
        if not done:
            err.print("`isotope check --repair` rebuilds the keyword and vector indexes and "
                      "ingests the sources named again (or removes those whose files are "
                      "gone)")
        raise typer.Exit(1)
    out.print("ok: " + ", ".join(f"{n} {name}" for name, n in counts.items()))


project_app = typer.Typer(help="Named indexes, each with its own settings.",
                          no_args_is_help=True)
app.add_typer(project_app, name="project")


@project_app.command("create")
def project_create(
    name: Annotated[str, typer.Argument(help="Letters, digits, '.', '_' and '-'.")],
    setting: Annotated[list[str] | None, typer.Option(
        "--set", help="A setting saved in the project, KEY=VALUE (repeatable), e.g. "
        "--set chunk_size=512 --set mode=questions-dense.")] = None,
    use: Annotated[bool, typer.Option("--use", help="Make it the default project.")] = False,
    location: Annotated[str | None, typer.Option(
        "--index", "-i", help="Keep the project's index there (a store URL, or a directory "
        "elsewhere) instead of in the projects folder.")] = None,
) -> None:
    """Create a project (an empty index in the projects folder, or at --index)."""
    from isotope import projects

    values: dict[str, Any] = {}
    for item in setting or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            _fail(f"--set {item!r}: write KEY=VALUE")
        values[key.strip()] = _setting_value(value.strip())
    with _errors():
        path = projects.create(name, location=location, **values)
        if use:
            projects.set_default(name)
    where = path if location is None else _describe(location)
    out.print(f"created project {name} at {where}" + (" (default)" if use else ""))


def _setting_value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


@project_app.command("list")
def project_list(as_json: JsonOpt = False) -> None:
    """List the projects with their counts; * marks the default."""
    from dataclasses import asdict

    from isotope import projects

    with _errors():
        found = projects.listing()
    if as_json:
        _print_json([asdict(p) for p in found])
        return
    if not found:
        out.print("no projects; create one with `isotope project create NAME`")
        return
    table = Table("", "project", "sources", "chunks", "questions", Column("path", overflow="fold"))
    for p in found:
        table.add_row("*" if p.is_default else "", p.name, str(p.counts["sources"]),
                      str(p.counts["chunks"]), str(p.counts["questions"]), str(p.path))
    out.print(table)


@project_app.command("show")
def project_show(name: Annotated[str, typer.Argument()], as_json: JsonOpt = False) -> None:
    """A project's path, counts and saved settings."""
    from dataclasses import asdict

    from isotope import projects

    with _errors():
        found = projects.info(name)
    if as_json:
        _print_json(asdict(found))
        return
    table = Table(show_header=False, box=None)
    table.add_row("project", found.name + (" (default)" if found.is_default else ""))
    table.add_row("path", str(found.path))
    if found.location != str(found.path):
        table.add_row("index", found.location)
    for key, count in found.counts.items():
        table.add_row(key, str(count))
    for key, value in found.settings.items():
        table.add_row(key, json.dumps(value))
    out.print(table)


@project_app.command("use")
def project_use(name: Annotated[str, typer.Argument()]) -> None:
    """Make a project the default: commands given no --index or --project use it."""
    from isotope import projects

    with _errors():
        projects.set_default(name)
    out.print(f"default project: {name}")


@project_app.command("delete")
def project_delete(
    name: Annotated[str, typer.Argument()],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete a project and its index (asks first)."""
    from isotope import projects

    with _errors():
        found = projects.info(name)
        if not yes:
            if not sys.stdin.isatty():
                _fail(f"deleting project {name} needs confirmation: pass --yes")
            typer.confirm(f"delete project {name} ({found.counts['sources']} sources, "
                          f"{found.path})?", abort=True)
        deleted = projects.delete(name)
    out.print(deleted.message())


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
    documents: Annotated[str | None, typer.Option(
        "--documents", metavar="FIELD", help="Passages with the same value of this field "
        "(e.g. title) form one document, each passage one of its chunks (default: each "
        "passage its own document).")] = None,
    chunk_context: ContextOpt = None,
    project: ProjectOpt = None,
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
        iso = _open(None if project else index or Path(".isotope-eval"), project,
                    create=True, chunk_context=chunk_context)
        with iso:
            err.print(f"indexing {len(pairs[0])} passages (cached work is reused)...")
            chunks = evaluation.chunks_of(pairs[0], documents)
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


def _paragraphs(doc: str) -> str:
    """A docstring as help text: each paragraph on one line (Rich would otherwise keep
    the docstring's line breaks and break sentences in the middle)."""
    import inspect

    return "\n\n".join(" ".join(part.split()) for part in inspect.cleandoc(doc).split("\n\n"))


for _command in (*app.registered_commands, *project_app.registered_commands):
    if _command.help is None and _command.callback is not None and _command.callback.__doc__:
        _command.help = _paragraphs(_command.callback.__doc__)


def main() -> None:
    """The ``isotope`` command. Its last line of defence: an unexpected exception is one
    line naming it, plus how to see the traceback (``-v`` shows it)."""
    try:
        app()
    except Exception as exc:  # the last line of defence
        if _verbose:
            raise
        err.print(_labelled("error:", "red", f"{type(exc).__name__}: {exc}"))
        err.print("this is a bug in isotope or an unexpected condition; run the command "
                  "again with -v (isotope -v ...) for the traceback")
        sys.exit(1)


if __name__ == "__main__":
    main()
