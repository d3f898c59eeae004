"""Learning from use, and questions by hand: ``isotope feedback``, ``isotope log``,
``isotope questions review`` and ``isotope questions orphaned`` (see
:mod:`isotope.search.learning`), ``isotope questions add``, ``edit``, ``disable`` and
``enable``, ``isotope weights`` (see :mod:`isotope.search.weights`), ``isotope adapter``
(see :mod:`isotope.search.adapter`)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from isotope.cli.console import err, errors, fail, out, print_json
from isotope.cli.questions_view import questions_app
from isotope.cli.shell import (
    AsOpt,
    IndexOpt,
    JsonOpt,
    ProjectOpt,
    ShowByDefault,
    WaitOpt,
    app,
    open_index,
)


@app.command("feedback")
def feedback_command(
    query_id: Annotated[str, typer.Argument(
        help="The search's query_id (isotope query --json, /search).")],
    chunk_id: Annotated[str, typer.Argument(help="One of the chunks that search returned.")],
    not_useful: Annotated[bool, typer.Option(
        "--not-useful", help="The result did not help: it is not ranked first again for "
        "this query or a very close one.")] = False,
    as_principal: AsOpt = None,
    index: IndexOpt = None,
    project: ProjectOpt = None,
    wait: WaitOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Mark a result of a logged search useful (the default) or not. A useful mark teaches
    the chunk the query as a question (the learn setting: auto, review, or off); only who
    searched may mark it (--as)."""
    with errors(), open_index(index, project, lock_wait=wait) as iso:
        done = iso.feedback(query_id, chunk_id, not not_useful, principal=as_principal)
    if as_json:
        print_json(done.model_dump())
        return
    said = {"learned": f"learned: the query is now a question of the chunk ({done.question_id})",
            "pending": "the query waits for review (isotope questions review)",
            "waiting": "the chunk waits for its questions (isotope enrich): the query is "
                       "learned when they come",
            "duplicate": "the chunk already has that question"}
    out.print(("useful" if done.useful else "not useful") + (
        f"; {said[done.learned]}" if done.learned in said else ""))


@app.command("log")
def log_command(
    days: Annotated[float | None, typer.Option(
        "--days", min=0, max=36_500, help="Only the last DAYS (default: all the log "
        "keeps).")] = None,
    top: Annotated[int, typer.Option("--top", min=1, help="Queries per list.")] = 10,
    index: IndexOpt = None,
    project: ProjectOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What the query log says (the query_log setting; on under isotope serve): the most
    frequent queries, those probably not found (suggested action refine_query) or marked
    not useful, feedback per source, latency percentiles."""
    with errors(), open_index(index, project) as iso:
        said = iso.log_summary(days, top)
    if as_json:
        print_json(said.model_dump())
        return
    if not said.searches:
        out.print("the query log is empty (searches are logged with the query_log setting, "
                  "on under isotope serve and isotope query)")
        return
    out.print(Text(f"{said.searches} searches", "bold") + Text(
        "; latency " + ", ".join(f"{k} {v:.1f} ms" for k, v in said.latency_ms.items())
        if said.latency_ms else ""))
    for title, rows in (("most frequent", said.frequent),
                        ("probably not found (refine_query)", said.refine),
                        ("marked not useful", said.not_useful)):
        if rows:
            out.print(Text(f"\n{title}", "bold"))
            for text, count in rows:
                out.print(f"  {count:>5}  {text}")
    if said.feedback_by_source:
        out.print(Text("\nfeedback by source", "bold"))
        for row in said.feedback_by_source:
            out.print(f"  {row['useful']:>4} useful {row['not_useful']:>4} not  "
                      f"{row['source']}")


@questions_app.command("review")
def review_command(
    approve: Annotated[list[str] | None, typer.Option(
        "--approve", metavar="QUERY_ID:CHUNK_ID", help="Learn this query as a question of "
        "its chunk (repeatable).")] = None,
    reject: Annotated[list[str] | None, typer.Option(
        "--reject", metavar="QUERY_ID:CHUNK_ID", help="Do not learn it (repeatable).")] = None,
    approve_all: Annotated[bool, typer.Option(
        "--approve-all", help="Learn every query waiting.")] = False,
    index: IndexOpt = None,
    project: ProjectOpt = None,
    wait: WaitOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Queries users marked useful for a chunk, waiting to be learned as its questions
    (the learn setting review; the default with access control on): list them, or
    --approve / --reject them."""
    if approve_all and approve:
        fail("give --approve-all or --approve, not both")
    with errors(), open_index(index, project, lock_wait=wait) as iso:
        waiting = iso.pending_questions()
        names = [f"{m.query_id}:{m.chunk_id}" for m in waiting] if approve_all else approve
        done = [*iso.review_questions(names or [], approve=True),
                *iso.review_questions(reject or [], approve=False)]
        left = iso.pending_questions() if done else waiting
    if as_json:
        print_json({"done": [d.model_dump() for d in done],
                    "waiting": [{"id": f"{m.query_id}:{m.chunk_id}", "query": m.query,
                                 "chunk_id": m.chunk_id, "source": m.source,
                                 "principal": m.principal, "at": m.at} for m in left]})
        return
    for d in done:
        out.print(f"{d.query_id}:{d.chunk_id}: {d.learned}")
    if not left:
        out.print("no learned questions wait for review")
    for m in left:
        out.print(Text(f"{m.query_id}:{m.chunk_id}", "bold") + f"  {m.query}")
        out.print(f"    for {m.source or ''}, marked by {m.principal} at {m.at}",
                  style="dim")


@questions_app.command("orphaned")
def orphaned_command(
    index: IndexOpt = None,
    project: ProjectOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Manual and learned questions whose chunk changed and no new chunk covers its text:
    kept (never searched), with the chunk text they were for."""
    with errors(), open_index(index, project) as iso:
        found = iso.orphaned_questions()
    if as_json:
        print_json(found)
        return
    if not found:
        out.print("no orphaned questions")
    for q in found:
        out.print(Text(q["text"], "bold") + f"  ({q['origin']}, {q['source']})")
        text = " ".join(q["chunk_text"].split())
        out.print(f"    was for: {text[:200]}{'…' if len(text) > 200 else ''}", style="dim")


@questions_app.command("add")
def add_command(
    source: Annotated[str, typer.Argument(help="The source's path or identifier.")],
    text: Annotated[str, typer.Argument(help="The question, on one line.")],
    chunk: Annotated[int, typer.Option("--chunk", min=0, help="The chunk's number (0 is "
                                       "the first; isotope questions SOURCE shows them).")
                     ] = 0,
    index: IndexOpt = None,
    project: ProjectOpt = None,
    wait: WaitOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add a question by hand to a chunk: searchable at once, kept through re-ingest,
    enrich, copy and changes of the chunk (origin manual)."""
    with errors(), open_index(index, project, lock_wait=wait) as iso:
        question_id = iso.add_question(source, text, chunk=chunk)
    _done(as_json, question_id, "added")


@questions_app.command("edit")
def edit_command(
    question_id: Annotated[str, typer.Argument(help="The question's id (--json shows it).")],
    text: Annotated[str, typer.Argument(help="Its new text, on one line.")],
    index: IndexOpt = None,
    project: ProjectOpt = None,
    wait: WaitOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Change a question's text; it becomes a manual question (kept like one added)."""
    with errors(), open_index(index, project, lock_wait=wait) as iso:
        new_id = iso.edit_question(question_id, text)
    _done(as_json, new_id, "edited")


QuestionIdArg = Annotated[str, typer.Argument(
    metavar="QUESTION_ID", help="The question's id (isotope questions SOURCE --json shows it).")]


def _switch(name: str, doc: str) -> None:
    """``isotope questions disable|enable QUESTION_ID``: the same options, one call."""

    def command(
        question_id: QuestionIdArg,
        index: IndexOpt = None,
        project: ProjectOpt = None,
        wait: WaitOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        with errors(), open_index(index, project, lock_wait=wait) as iso:
            getattr(iso, f"{name}_question")(question_id)
        _done(as_json, question_id, f"{name}d")

    command.__doc__ = doc
    questions_app.command(name)(command)


_switch("disable", "Take a question out of every search (it stays listed, dropped: "
        "disabled by hand).")
_switch("enable", "Search a question disabled by hand again.")


def _done(as_json: bool, question_id: str, what: str) -> None:
    if as_json:
        print_json({"id": question_id, "done": what})
    else:
        out.print(f"{what} question {question_id}")


weights_app = typer.Typer(
    cls=ShowByDefault,
    help="The signal weights hybrid fuses with: `isotope weights` shows them, `isotope "
    "weights fit` fits them on the results users marked useful, `isotope weights reset` "
    "goes back to the defaults.")
app.add_typer(weights_app, name="weights")


def _weights_table(rows: dict[str, dict[str, float | None]]) -> None:
    columns = list(next(iter(rows.values())))
    out.print("  " + "".join(f"{c:>10}" for c in columns))
    for signal, row in rows.items():
        out.print(f"  {signal:<16}" + "".join(
            f"{'-' if v is None else f'{v:g}':>10}" for v in row.values()))


@weights_app.command("show")
def weights_show_command(
    index: IndexOpt = None,
    project: ProjectOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The weight of each hybrid signal in use, where it comes from (the weights setting,
    a fit on users' marks, or the defaults), and the last fit."""
    from isotope.search import retrieval

    with errors(), open_index(index, project) as iso:
        done = iso.fitted_weights()
        fitted = done.weights if done is not None and done.adopted else {}
        used = retrieval.weights_in_use(iso.settings, fitted)
        origin = {name: "setting" if name in iso.settings.weights else
                  "fitted" if name in fitted else "default" for name in used}
    if as_json:
        print_json({"weights": used, "from": origin,
                    "fit": None if done is None else done.model_dump()})
        return
    out.print(Text("signal weights (hybrid)", "bold"))
    for name, weight in used.items():
        out.print(f"  {name:<16}{weight:>6g}  {origin[name]}")
    if done is not None:
        out.print(f"\nfitted on {done.marks} useful marks at {done.at}: the marked chunk "
                  f"first {100 * done.first_before:.1f}% -> {100 * done.first_after:.1f}%")


@weights_app.command("fit")
def weights_fit_command(
    min_marks: Annotated[int, typer.Option(
        "--min-marks", min=1, help="Refuse with fewer useful marks than this.")] = 50,
    allow_zero: Annotated[bool, typer.Option(
        "--allow-zero", help="Let the fit set a signal's weight to 0 (switching it off "
        "for every search); without it, the lowest is 0.25.")] = False,
    index: IndexOpt = None,
    project: ProjectOpt = None,
    wait: WaitOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Fit hybrid's signal weights on the results users marked useful (isotope feedback),
    so that the marked chunks come first for their queries; they are kept when they place
    at least 1% of the marks better than the weights in use. The weights setting still
    wins, signal by signal. One search per mark (the newest 5,000) of those learned or
    approved by review (pending, rejected and never learned marks are left out, and no
    user gives more than a quarter of them)."""
    def progress(done: int, total: int) -> None:
        if not as_json and (done == total or done % 200 == 0):
            err.print(f"{done}/{total} marked queries searched")

    with errors(), open_index(index, project, lock_wait=wait) as iso:
        done = iso.fit_weights(min_marks=min_marks, allow_zero=allow_zero,
                               progress=progress)
    if as_json:
        print_json(done.model_dump())
        return
    _weights_table({name: {"before": done.before.get(name), "fitted": weight}
                    for name, weight in done.weights.items()})
    out.print(f"on {done.marks} marks ({done.left_out} left out: pending, rejected, never "
              "learned, or past one user's share), the marked chunk first "
              f"{100 * done.first_before:.1f}% "
              f"-> {100 * done.first_after:.1f}% ({done.seconds:.0f} s): " + (
                  "kept; hybrid searches use them" if done.adopted else
                  "not kept (they place fewer than 1% of the marks better)"))


@weights_app.command("reset")
def weights_reset_command(
    index: IndexOpt = None,
    project: ProjectOpt = None,
    wait: WaitOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Forget the fitted weights: hybrid goes back to the defaults (and the weights
    setting)."""
    with errors(), open_index(index, project, lock_wait=wait) as iso:
        done = iso.reset_weights()
    if as_json:
        print_json({"reset": done})
        return
    out.print("the fitted weights are forgotten" if done else "no fitted weights to forget")


adapter_app = typer.Typer(
    cls=ShowByDefault,
    help="The query adapter (setting query_adapter): a map of the query's embedding "
    "fitted on the index's own questions, for the statements' and chunks' dense signals. "
    "`isotope adapter` shows it, `isotope adapter fit` fits it.")
app.add_typer(adapter_app, name="adapter")


@adapter_app.command("show")
def adapter_show_command(
    index: IndexOpt = None,
    project: ProjectOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The query adapter: the setting, whether searches apply it, and its last fit
    (when, on how many questions, and the R@1 of the questions held out of it without
    and with it)."""
    from isotope.search import adapter

    with errors(), open_index(index, project) as iso:
        said = adapter.status(iso.settings.query_adapter, iso.adapter_fit())
    if as_json:
        print_json(said)
        return
    out.print(f"query adapter: {adapter.summary(said)}")


@adapter_app.command("fit")
def adapter_fit_command(
    min_questions: Annotated[int, typer.Option(
        "--min-questions", min=1, help="Refuse with fewer kept questions than this.")] = 200,
    index: IndexOpt = None,
    project: ProjectOpt = None,
    wait: WaitOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Fit the query adapter on the index's kept questions (at most 50,000, drawn at
    random) and the queries users confirmed (learned or approved marks, no user's beyond
    a quarter), a tenth of the chunks held out with their questions, and keep it. No
    model is called. Searches apply it (with the setting query_adapter on) only when
    more held-out questions find their chunk first with it than without it."""
    with errors(), open_index(index, project, lock_wait=wait) as iso:
        done = iso.fit_adapter(min_questions=min_questions)
        setting = iso.settings.query_adapter
    if as_json:
        print_json(done.model_dump())
        return
    out.print(f"fitted on {done.pairs:,} pairs ({done.confirmed:,} confirmed queries, "
              f"{done.left_out:,} marks left out) in {done.seconds:g} s; R@1 of the "
              f"{done.held_out:,} held-out questions {100 * done.r1_identity:.1f}% without "
              f"it, {100 * done.r1:.1f}% with it: " + (
                  ("used" if setting != "off" else "kept; the setting query_adapter is off "
                   "(ISOTOPE_QUERY_ADAPTER=linear applies it)") if done.used else
                  "not used (it does not beat none)"))
