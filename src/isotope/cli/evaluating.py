"""``isotope eval``: every retrieval mode (and, with ``--answers``, the answers) scored
on question/passage pairs, or, with ``--from-log``, the index on its users' useful marks.
The command reads its options and prints; the steps are helpers here (:func:`_scored`
ingests and scores, :func:`_answered` asks, :func:`_show` prints the tables) over the
library's :mod:`isotope.search.evaluation` and :mod:`isotope.search.answer_eval`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from isotope.cli.console import err, errors, fail, out, print_json
from isotope.cli.ingesting import with_bar
from isotope.cli.shell import ContextOpt, IndexOpt, JsonOpt, ProjectOpt, app, open_index
from isotope.files import write_atomically
from isotope.search.retrieval import MODES, thresholds

if TYPE_CHECKING:
    from isotope.index import Isotope
    from isotope.reports import IngestReport
    from isotope.search.answer_eval import AnswerScores
    from isotope.search.evaluation import EvalResult


FromLogOpt = Annotated[bool, typer.Option(
    "--from-log", help="Score the index itself (--index) on its users' traffic: each "
    "query marked useful for a chunk (isotope feedback) is a question whose gold "
    "passage is that chunk. No PASSAGES or QUERIES.")]
DocumentsOpt = Annotated[str | None, typer.Option(
    "--documents", metavar="FIELD", help="Passages with the same value of this field "
    "(e.g. title) form one document, each passage one of its chunks (default: each "
    "passage its own document).")]
AnswersOpt = Annotated[bool, typer.Option(
    "--answers", help="Also ask every question (or --limit-queries of them) and score "
    "the answers against the queries' gold `answers` (SQuAD-normalised): contains "
    "gold, F1, the share of generated answers that are right, generated / quoted / "
    "declined, declined with the gold passage given, citations of the gold passage, "
    "wrong, latency, and how often an answer of each answer_confidence was right. Runs "
    "the answer model once per question.")]
UnanswerableOpt = Annotated[Path | None, typer.Option(
    "--unanswerable", help="With --answers: JSON lines of questions whose answer is in "
    "no passage ({\"question\": ...}); the share declined is reported.")]


@app.command("eval")
def eval_(
    passages: Annotated[Path | None, typer.Argument(
        help="Passages, JSON lines: pid, text.")] = None,
    queries: Annotated[Path | None, typer.Argument(
        help="Questions, JSON lines: question, gold_pid.")] = None,
    index: IndexOpt = None,
    from_log: FromLogOpt = False,
    write: Annotated[Path | None, typer.Option(
        "--write", metavar="DIR", help="With --from-log: also write the set as "
        "DIR/passages.jsonl and DIR/queries.jsonl (for isotope eval on other settings).")
    ] = None,
    limit_passages: Annotated[int | None, typer.Option(
        "--limit-passages", help="Only the first N passages and their questions.")] = None,
    mode: Annotated[list[str] | None, typer.Option(
        "--mode", "-m", help="Modes to score (repeatable; default: all).")] = None,
    chart: Annotated[Path | None, typer.Option(
        "--chart", help="Write a PNG bar chart here.")] = None,
    documents: DocumentsOpt = None,
    chunk_context: ContextOpt = None,
    answers: AnswersOpt = False,
    limit_queries: Annotated[int | None, typer.Option(
        "--limit-queries", min=1, help="With --answers: ask only N questions, spread "
        "evenly over the passages.")] = None,
    unanswerable: UnanswerableOpt = None,
    project: ProjectOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Score every retrieval mode on question/passage pairs: Recall@1/2/5, MRR@10 and
    latency; with --answers, the answers of `ask` too. `hybrid-no-questions` is scored
    beside them, with the ingest time the questions took: what generating them buys on
    your data (the passages are stored and scored before their questions are made; in
    an index built before, it is hybrid with the question signals left out, the
    questions' words still in the chunks' keyword text). R@1 is split into the questions
    chunk BM25 alone answers first (easy) and the others (hard).

    Each passage is ingested as one chunk (into --index, default .isotope-eval; an index
    built before is reused, and the cache makes regeneration free)."""
    from dataclasses import asdict

    from isotope.search import evaluation

    with errors():
        modes = _modes(mode)
        if from_log:
            if passages is not None or queries is not None or answers:
                fail("--from-log scores the index itself: give no PASSAGES, QUERIES or "
                     "--answers")
            _from_log(index, project, modes, write, as_json)
            return
        if passages is None or queries is None:
            fail("give PASSAGES and QUERIES (JSON lines), or --from-log")
        pairs = evaluation.load(passages, queries, limit_passages)
        iso = open_index(None if project else index or Path(".isotope-eval"), project,
                         create=True, chunk_context=chunk_context)
        with iso:
            result = _scored(iso, pairs, modes, documents, bar=err.is_terminal and not as_json)
            if chart is not None:
                evaluation.chart(result, chart)
            answered = _answered(iso, pairs[1], limit_queries, unanswerable,
                                 quiet=as_json) if answers else None
    if as_json:
        print_json({**asdict(result), **({"answers": {
            k: v for k, v in asdict(answered).items() if k != "examples"}}
            if answered else {})})
        return
    _show(result, answered, chart)


def _modes(asked: list[str] | None) -> list[str]:
    """The modes to score: ``asked``, each checked, else every mode (the graph's only
    where the graph is made: setting graph) and ``hybrid-no-questions``."""
    from isotope.search import evaluation
    from isotope.settings import resolve

    modes = asked or [*(m for m in MODES if m != "graph" or resolve(None)[0].graph),
                      evaluation.WITHOUT_QUESTIONS]
    for name in modes:
        if name not in (*MODES, evaluation.WITHOUT_QUESTIONS):
            fail(f"unknown mode {name!r}; choose from: {', '.join(MODES)}, "
                 f"{evaluation.WITHOUT_QUESTIONS}")
    return modes


def _scored(iso: Isotope, pairs: tuple[list[dict[str, Any]], list[dict[str, Any]]],
            modes: list[str], documents: str | None, *, bar: bool) -> EvalResult:
    """The passages of ``pairs`` ingested into ``iso`` (each one chunk; ``documents``:
    the field that groups them) and every mode scored on its questions; with
    ``hybrid-no-questions``, the passages stored before their questions and scored so
    (what the index gives with none generated), then their questions made."""
    from isotope.search import evaluation

    err.print(f"indexing {len(pairs[0])} passages (cached work is reused)...")
    chunks = evaluation.chunks_of(pairs[0], documents)
    staged = evaluation.WITHOUT_QUESTIONS in modes
    search = evaluation.searcher(iso)

    def in_effect(m: str) -> tuple[float, float]:
        return thresholds(m, iso.settings.deliver_score, iso.settings.refine_score)

    reports = [_with_progress(lambda update: iso.ingest_chunks(
        chunks, progress=update, questions="later" if staged else "now"), bar)]
    before: list[evaluation.ModeScores] = []
    easy = None
    if staged and iso.counts()["questions"] == 0:
        easy = evaluation.answered_first(search, pairs[1], "chunks-bm25")
        before = evaluation.evaluate(search, pairs[1], [evaluation.WITHOUT_QUESTIONS],
                                     thresholds=in_effect, easy=easy)
        modes = [m for m in modes if m != evaluation.WITHOUT_QUESTIONS]
    if staged:
        err.print("generating the questions...")
        reports.append(_with_progress(lambda update: iso.enrich(progress=update), bar))
    failed = sum(len(r.failed_atoms) for r in reports)
    if failed:
        err.print(f"{failed} atoms got no questions")
    result = evaluation.EvalResult(len(pairs[0]), len(pairs[1]))
    result.modes = evaluation.evaluate(search, pairs[1], modes, thresholds=in_effect,
                                       easy=easy) + before
    result.ingest = {"added": len(reports[0].added),
                     "llm_calls": sum(r.llm_calls for r in reports),
                     "llm_cache_hits": sum(r.llm_cache_hits for r in reports),
                     "seconds": sum(sum(r.timings.values()) for r in reports),
                     "question_seconds": sum(r.timings.get("generate", 0.0)
                                             for r in reports)}
    if staged:
        result.ingest["without_questions"] = (
            "the index before its questions" if before else
            "the question signals left out (an index built before)")
    return result


def _answered(iso: Isotope, queries: list[dict[str, Any]], limit: int | None,
              unanswerable: Path | None, *, quiet: bool) -> AnswerScores:
    """``--answers``: ``limit`` of ``queries`` (all: None) and the ``unanswerable`` ones
    asked of ``iso`` and scored."""
    from isotope.search import answer_eval, evaluation

    asked = answer_eval.pick(queries, limit)
    impossible = (evaluation.read_jsonl(unanswerable, ("question",), ("question",))
                  if unanswerable is not None else [])
    err.print(f"asking {len(asked) + len(impossible)} questions...")

    def said(done: int, total: int) -> None:
        if not quiet and done % 25 == 0:
            err.print(f"  {done}/{total}")

    return answer_eval.evaluate_answers(iso, asked, unanswerable=impossible, progress=said)


def _show(result: EvalResult, answered: AnswerScores | None, chart: Path | None) -> None:
    """An evaluation's tables, as ``isotope eval`` prints them."""
    from isotope.search import evaluation

    for title, rows in (
        (f"{result.passages} passages, {result.queries} questions", result.table()),
        ("suggested actions: thresholds in effect (deliver/refine), and those this data "
         "suggests", result.confidence_table()),
    ):
        table = Table(*rows[0].keys(), title=title)
        for row in rows:
            table.add_row(*(str(v) for v in row.values()))
        out.print(table)
    scored = {m.mode: m for m in result.modes}
    if "hybrid" in scored and evaluation.WITHOUT_QUESTIONS in scored:
        with_q, without = scored["hybrid"], scored[evaluation.WITHOUT_QUESTIONS]
        out.print(
            f"what the questions buy here: hybrid R@1 {with_q.recall[1]:.1f} with them, "
            f"{without.recall[1]:.1f} without; R@5 {with_q.recall[5]:.1f} and "
            f"{without.recall[5]:.1f}. Generating them took "
            f"{result.ingest['question_seconds']:.0f} s of this ingest's "
            f"{result.ingest['seconds']:.0f} s ({result.ingest['llm_calls']} model calls, "
            f"{result.ingest['llm_cache_hits']} answered by the cache); without them: "
            f"{result.ingest['without_questions']}")
    if chart is not None:
        out.print(f"chart: {chart}")
    if answered is not None:
        _show_answers(answered)


def _show_answers(answered: AnswerScores) -> None:
    table = Table("contains gold %", "F1", "generated right %",
                  "generated / quoted / declined %", "declined with gold %",
                  "citation is gold %", "wrong %", "unanswerable declined %",
                  "ask p50 s", title=f"answers: {answered.questions} questions "
                  f"({answered.gold_given} with their gold passage given to the model), "
                  f"{answered.unanswerable} unanswerable")
    table.add_row(*(str(v) for v in (
        answered.contains_gold, answered.f1, answered.generated_precision,
        f"{answered.generated_share} / {answered.quoted_share} / "
        f"{answered.declined_share}", answered.declined_with_gold,
        answered.citation_is_gold, answered.wrong, answered.unanswerable_declined,
        answered.latency_p50_s)))
    out.print(table)
    reliability = Table("answer_confidence", "answers", "right %",
                        title="how often an answer of each confidence was right")
    for row in answered.reliability:
        reliability.add_row(row["bin"], str(row["answers"]), str(row["right"]))
    out.print(reliability)


def _with_progress(run: Callable[[Callable[[Any], None] | None], IngestReport],
                   bar: bool) -> IngestReport:
    """``run(progress)``: with a progress bar on a terminal, else quietly."""
    report: IngestReport = with_bar(run) if bar else run(None)
    return report


def _from_log(index: str | None, project: str | None, modes: list[str], write: Path | None,
              as_json: bool) -> None:
    """``isotope eval --from-log``: the index scored on its users' useful marks."""
    from dataclasses import asdict

    from isotope.search import evaluation

    with open_index(index, project) as iso:
        found_passages, found_queries = evaluation.from_log(iso)
        if not found_queries:
            fail("no query in the log was marked useful (isotope feedback QUERY_ID "
                 "CHUNK_ID); searches are logged with the query_log setting")
        if write is not None:
            write.mkdir(parents=True, exist_ok=True)
            for name, rows in (("passages", found_passages), ("queries", found_queries)):
                write_atomically(write / f"{name}.jsonl", "".join(
                    json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
        result = evaluation.EvalResult(len(found_passages), len(found_queries))
        result.modes = evaluation.evaluate(
            evaluation.searcher(iso, lambda chunk: chunk.id), found_queries, modes,
            thresholds=lambda m: thresholds(m, iso.settings.deliver_score,
                                            iso.settings.refine_score))
    if as_json:
        print_json(asdict(result))
        return
    rows = result.table()
    table = Table(*rows[0].keys(), title=f"the index on its users' traffic: {result.queries} "
                  f"queries marked useful, {result.passages} chunks")
    for row in rows:
        table.add_row(*(str(v) for v in row.values()))
    out.print(table)
    if write is not None:
        out.print(f"written: {write / 'passages.jsonl'}, {write / 'queries.jsonl'}")

