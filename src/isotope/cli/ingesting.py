"""``isotope ingest``, ``isotope sync`` and ``isotope enrich``, with their progress and
reports, and ``isotope sample`` (a folder of sample documents to ingest)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from isotope.cli.console import err, errors, fail, labelled, out, print_json
from isotope.cli.shell import (
    AllowOpt,
    ContextOpt,
    ExcludeOpt,
    IncludeOpt,
    IndexOpt,
    JsonOpt,
    PlainOpt,
    ProjectOpt,
    QuestionsOpt,
    WaitOpt,
    app,
    open_index,
)


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Files and directories to ingest.")],
    index: IndexOpt = None,
    project: ProjectOpt = None,
    include: IncludeOpt = None,
    exclude: ExcludeOpt = None,
    questions: QuestionsOpt = "now",
    questions_per_atom: Annotated[int | None, typer.Option(
        "--questions-per-atom", "-n", min=1, max=30, help="Questions per atom (1 to 30).")
    ] = None,
    generation: Annotated[str | None, typer.Option(
        "--generation", help="atom (one model call per atom), chunk (one per chunk) or "
        "batched (local model, parallel sequences).")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Only count chunks, atoms and model calls (and cache hits).")] = False,
    chunk_context: ContextOpt = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Ingest unchanged files again too, reusing nothing stored (cached "
        "model replies still answer); a graph or questions-per-atom setting other than the "
        "index's becomes the index's.")] = False,
    allow: AllowOpt = None,
    plain: PlainOpt = False,
    wait: WaitOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Ingest files and directories: chunk, atomize, embed and store each (searchable at
    once), then generate questions as enrichment (--questions later: `isotope enrich`).
    Unchanged files are skipped; a changed file is replaced, keeping its unchanged chunks.
    Ends with a summary: model calls, cache hits and tokens, and where the time went
    (`time: the model 17.3 s, embedding 23.9 s, storing 0.1 s`; with a remote model, its
    part is the wait for it). Exit code 1 if any file failed."""
    from dataclasses import asdict

    with errors():
        when, per_atom = _questions(questions)
        questions_per_atom = questions_per_atom or per_atom
        _some_exist(paths)
        iso = open_index(index, project, create=True, questions_per_atom=questions_per_atom,
                         generation=generation, lock_wait=wait, chunk_context=chunk_context,
                         remake=force)
        with iso:
            if dry_run:
                plan = iso.plan(paths, include=include, exclude=exclude)
                if as_json:
                    print_json(asdict(plan))
                else:
                    print_plan(plan)
                return
            report = _ingest_with_progress(partial(iso.ingest, force=force, questions=when,
                                                   allow=allow),
                                           paths, include, exclude, plain, as_json)
    _finish_ingest(report, as_json)


def _some_exist(paths: list[Path]) -> None:
    """Refuse an ingest none of whose paths exists before an index is made for it (a
    mistyped path made an empty index)."""
    if paths and not any(p.exists() or p.is_symlink() for p in paths):
        names = ", ".join(str(p) for p in paths)
        fail(f"{names}: no such file or directory; nothing was ingested and no index was "
             "made (`isotope sample` writes a folder of sample documents to try)")


@app.command()
def sample(
    folder: Annotated[Path, typer.Argument(help="Where to write them (a new or empty "
                                                "folder).")] = Path("isotope-sample"),
) -> None:
    """Write a folder of sample documents for a first try (a handbook, release notes, a
    FAQ page, a PDF, and an email, a mailbox, LaTeX and Word files): `isotope sample`,
    then `isotope ingest isotope-sample` and `isotope ask "How many vacation days do new
    employees get?"`."""
    from isotope.ingest.samples import write_sample

    with errors():
        written = write_sample(folder)
    out.print(f"wrote {len(written)} sample documents to {folder}; next: isotope ingest "
              f"{folder}")


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
    questions: QuestionsOpt = "now",
    allow: AllowOpt = None,
    plain: PlainOpt = False,
    wait: WaitOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Make the index match these paths: ingest new and changed files, and remove the
    sources whose files were deleted (with sync_strategy=source_aware, the default).
    A sync that would remove all or most of a folder's sources refuses without --force."""
    with errors():
        when, _ = _questions(questions)
        with open_index(index, project, create=True, lock_wait=wait) as iso:
            report = _ingest_with_progress(partial(iso.sync, force=force, questions=when,
                                                   allow=allow),
                                           paths, include, exclude, plain, as_json)
    _finish_ingest(report, as_json)


@app.command()
def enrich(
    index: IndexOpt = None,
    project: ProjectOpt = None,
    plain: PlainOpt = False,
    wait: WaitOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Generate the questions of the chunks still waiting for them (ingested with
    --questions later, or whose model calls failed). Interrupt it at any time: the next
    run goes on from the chunks still waiting, and the cache answers what was generated."""
    with errors(), open_index(index, project, lock_wait=wait) as iso:
        report = _with_progress(lambda progress: iso.enrich(progress=progress), plain,
                                as_json)
    _finish_ingest(report, as_json)


QuestionsWhen = ("now", "later")


def _questions(value: str) -> tuple[Any, int | None]:
    """``--questions``: when (now, later), or a number (questions per atom, as before)."""
    if value.isdigit():
        return "now", int(value)
    if value not in QuestionsWhen:
        from isotope.errors import InvalidArgument

        raise InvalidArgument(f"--questions {value!r}: use now (generate them in this run) "
                              "or later (isotope enrich)")
    return value, None


def _ingest_with_progress(run: Callable[..., Any], paths: list[Path], include: Any,
                          exclude: Any, plain: bool, as_json: bool) -> Any:
    return _with_progress(
        lambda progress: run(paths, include=include, exclude=exclude, progress=progress),
        plain, as_json)


def _with_progress(run: Callable[[Any], Any], plain: bool, as_json: bool) -> Any:
    """``run(progress callback or None)``: a bar on a terminal, lines with --plain."""
    from isotope.ingest.pipeline import Progress

    if plain and not as_json:
        def progress_cb(p: Progress) -> None:
            if p.stage == "wait":
                err.print(f"[{_of(p)} chunks] waiting for the model server (questions of "
                          f"{p.source})")
            elif p.stage in ("load", "store", "generate") and p.source:
                unit = "chunks" if p.stage == "generate" else "files"
                err.print(f"[{_of(p)} {unit}] {p.stage} {p.source} "
                          f"chunks={p.chunks} atoms={p.atoms} questions={p.questions}")
        return run(progress_cb)
    if as_json:
        return run(None)
    if not err.is_terminal:
        return _with_lines(run)
    return with_bar(run)


def _of(p: Any) -> str:
    """``done/total`` of a progress event (``?`` while the total is not known)."""
    return f"{p.sources_done}/{p.sources_total or '?'}"


EVERY = 15.0
"""Seconds between two progress lines of an ingest whose output is not a terminal."""


def _with_lines(run: Callable[[Any], Any]) -> Any:
    """``run(progress callback)`` printing a line on stderr when the phase changes (the
    documents stored, their questions written) and every :data:`EVERY` seconds meanwhile
    (a pipe or a log file: a bar would not show, and a model phase of many minutes would
    print nothing)."""
    import threading
    import time

    last: list[Any] = []
    shown: list[Any] = [None]  # (the event the last line said)
    stop = threading.Event()
    started = time.monotonic()

    def phase(p: Any) -> str:
        return "questions" if p.stage in ("generate", "wait") else "documents"

    def line(p: Any) -> None:
        shown[0] = p
        unit = "chunks" if phase(p) == "questions" else "files"
        err.print(f"[{time.monotonic() - started:5.0f} s] {phase(p)}: {_of(p)} {unit} done, "
                  f"{p.chunks} chunks, {p.atoms} atoms, {p.questions} questions"
                  + p.model_work())

    def beat() -> None:
        while not stop.wait(EVERY):
            if last:
                line(last[-1])

    def progress_cb(p: Any) -> None:
        if not last or phase(last[-1]) != phase(p):
            if last and shown[0] is not last[-1]:
                line(last[-1])  # where the phase ended, before the next one's first line
            line(p)
        last[:] = [p]

    beating = threading.Thread(target=beat, daemon=True)
    beating.start()
    try:
        return run(progress_cb)
    finally:
        stop.set()
        beating.join()
        if last:
            line(last[-1])  # where it ended: the counts a log reader looks for


def _finish_ingest(report: Any, as_json: bool) -> None:
    from dataclasses import asdict

    if as_json:
        print_json({**asdict(report), "ok": report.ok})
    else:
        print_report(report)
    if not report.ok:
        raise typer.Exit(1)


def with_bar(run: Callable[[Callable[[Any], None]], Any]) -> Any:
    """``run(progress_callback)`` with a progress bar on stderr."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from isotope.ingest.pipeline import Progress as Event

    with Progress(
        TextColumn("{task.description}", style="bold", markup=False), BarColumn(),
        MofNCompleteColumn(), TextColumn("{task.fields[counts]}", markup=False),
        TimeElapsedColumn(), console=err, transient=True,
    ) as bar:
        task = bar.add_task("ingesting", total=None, counts="")

        def update(p: Event) -> None:
            name = Path(p.source).name if p.source else ""
            bar.update(
                task, total=p.sources_total or None, completed=p.sources_done,  # (0: not
                # known yet: the bar moves without an end)
                description=("waiting for the model" if p.stage == "wait"
                             else f"{p.stage} {name}")[:40],
                counts=f"chunks {p.chunks} · atoms {p.atoms} · questions {p.questions}"
                + p.model_work().replace(", ", " · "),
            )

        return run(update)


def print_plan(plan: Any) -> None:
    for problem in plan.errors:
        err.print(labelled("error:", "red", f"{problem.path}: {problem.message}"))
    out.print(
        f"would ingest {plan.sources} source(s) ({plan.unchanged} unchanged): {plan.chunks} "
        f"chunks, {plan.atoms} atoms"
    )
    out.print(
        f"model calls: {plan.llm_calls} needed, {plan.cached_calls} already in the cache; "
        f"about {plan.estimated_prompt_tokens} prompt + {plan.estimated_completion_tokens} "
        "completion tokens for the rest"
    )


def print_report(report: Any) -> None:
    for problem in report.errors:
        err.print(labelled("error:", "red", f"{problem.path}: {problem.message}"))
    for skipped in report.skipped:
        err.print(labelled("skipped:", "yellow", f"{skipped.path}: {skipped.message}"))
    for warning in getattr(report, "warnings", []):
        err.print(labelled("warning:", "yellow", f"{warning.path}: {warning.message}"))
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
    spent = [f"{label} {report.timings[stage]:.1f} s" for stage, label in (
        ("generate", "the model"), ("embed", "embedding"), ("store", "storing"),
        ("load", "reading")) if report.timings.get(stage, 0.0) >= 0.05]
    if spent:  # where the time went (with a remote model: the wait for it)
        out.print("time: " + ", ".join(spent))
    if report.contexts or report.failed_contexts:
        out.print(f"{report.contexts} chunk context(s) written")
    for failed in report.failed_contexts[:10]:
        err.print(labelled("no context:", "yellow", f"{failed.path}: {failed.message}"))
    for failed in report.failed_atoms[:10]:
        err.print(labelled("no questions:", "yellow", f"{failed.path}: {failed.message}"))
    if report.enriched_chunks or report.waiting_chunks:
        out.print(f"questions: {report.enriched_chunks} chunk(s) enriched, "
                  f"{report.waiting_chunks} waiting"
                  + (" (`isotope enrich` generates them; searches use the chunks and atoms "
                     "meanwhile)" if report.waiting_chunks else ""))
    if report.failed_atoms:
        err.print(f"{len(report.failed_atoms)} atom(s) got no questions; `isotope enrich` "
                  "(or the same ingest) retries only those")
