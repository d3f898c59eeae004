"""Retrieval quality of every mode, side by side, on SQuAD dev (issue 4's targets).

    .venv/bin/python benchmarks/quality.py [--passages 300] [--generation batched]
        [--transform-queries N] [--graph] [--graph-weights 0.5,1]
        [--embedder local/multilingual-e5-small] [--cache DIR] [--unseen 150]
        [--questions-per-atom 15] [--adapter]

Indexes the first ``--passages`` passages of ../shared/eval/squad-dev (each passage one
chunk) with the default offline models, then scores every retrieval mode on all their
questions (Recall@1/2/5, MRR@10, latency), and the question modes again on a keyword
variant of the questions (question words and stopwords dropped). Generated questions are
cached in benchmarks/cache/ (committed), so a re-run takes minutes, not hours. Ratios are
against ``chunks-dense``, the baseline measured in the same run.

``--graph`` builds the index with the knowledge graph (setting ``graph``; its own folder,
the cached questions reused, only the entities and relations generated) and adds the
``graph`` mode and ``hybrid`` with the graph signal at each of ``--graph-weights``: what
the signal costs single-hop questions.

``--unseen N`` takes passages 600 to 600+N instead (never tuned on; their questions are
in the committed cache, from benchmarks/answers.py). ``--embedder`` indexes with another
embedding model (its own folder; the cached questions
reused); ``--cache`` keeps the model cache elsewhere (a copy of benchmarks/cache, so that
another model's vectors do not grow the committed file). ``--questions-per-atom`` asks the
model for that many questions per statement instead of the default 5 (its own folder; a
count never asked before generates every question again, so give ``--cache`` a copy).

``--adapter`` (issue 66) fits the index's query adapter on its own questions (kept in the
index; no model call) and adds, from the same run, the dense modes and ``hybrid`` with it
applied (rows ``... +adapter``), and ``hybrid`` with the weights fitted on 1,000 of the
index's own questions (``weights fit --from-questions``, not kept), without and with the
adapter. The fit's report (held-out R@1, seconds) is printed first.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from isotope import Isotope
from isotope.ingest.pipeline import Progress
from isotope.search import adapter as query_adapter
from isotope.search import evaluation
from isotope.search import weights as weight_fit
from isotope.search.retrieval import MODES, keyword_query

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "eval" / "squad-dev"
OUT = ROOT / "benchmarks" / "out"
CACHE = ROOT / "benchmarks" / "cache"
NO_QUESTIONS_INDEX = "hybrid, index without questions"
"""The row of ``hybrid`` on the same passages stored without questions (``--questions
later``, never enriched): what the index gives if no question is generated. (The pseudo-
mode ``hybrid-no-questions`` leaves the question signals out of the fusion, but the
chunks' keyword text still holds the questions' words.)"""
UNSEEN = 600
"""The first passage of those the project was never tuned on (``--unseen``)."""
ADAPTED = " +adapter"
"""The suffix of a mode searched with the index's query adapter (``--adapter``)."""
WEIGHTED = " +question weights"
"""... and of ``hybrid`` with the weights fitted on the index's own questions."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=300)
    parser.add_argument("--generation", default="batched")
    parser.add_argument("--keyword-modes", default="questions-dense,chunks-bm25,hybrid")
    parser.add_argument("--reuse-index", action="store_true",
                        help="search the index a previous run built, without ingesting "
                        "(built first where there is none)")
    parser.add_argument("--transform-queries", type=int, default=0, metavar="N",
                        help="also score the first N keyword queries with query "
                        "transformation (one model call each; cached)")
    parser.add_argument("--graph", action="store_true",
                        help="with the knowledge graph: adds the graph mode and hybrid with it")
    parser.add_argument("--graph-weights", default="0.5,1",
                        help="the graph signal's weights in hybrid (with --graph)")
    parser.add_argument("--embedder", default=None,
                        help="the embedding model (default: the bundled MiniLM)")
    parser.add_argument("--cache", type=Path, default=CACHE,
                        help="the model cache's folder (default: benchmarks/cache)")
    parser.add_argument("--unseen", type=int, default=0, metavar="N",
                        help="passages 600 to 600+N instead of the first --passages")
    parser.add_argument("--questions-per-atom", type=int, default=None, metavar="N",
                        help="questions asked per statement (default: the setting's, 5)")
    parser.add_argument("--adapter", action="store_true",
                        help="fit the query adapter and add the modes searched with it")
    parser.add_argument("--json", action="store_true",
                        help="print the figures as one JSON object (the tables go to stderr)")
    args = parser.parse_args()
    printed = sys.stdout
    if args.json:
        sys.stdout = sys.stderr
    passages, queries = evaluation.load(DATA / "passages.jsonl", DATA / "queries.jsonl",
                                        args.unseen or args.passages,
                                        start=UNSEEN if args.unseen else 0)
    which = f"unseen-{args.unseen}" if args.unseen else str(args.passages)
    index = OUT / (f"quality-{which}-{args.generation}{'-graph' if args.graph else ''}"
                   + (f"-{args.embedder.rsplit('/', 1)[-1]}" if args.embedder else "")
                   + (f"-q{args.questions_per_atom}" if args.questions_per_atom else ""))
    models: dict[str, Any] = {"embedding_model": args.embedder} if args.embedder else {}
    if args.questions_per_atom:
        models["questions_per_atom"] = args.questions_per_atom
    modes = [m for m in MODES if m != "graph" or args.graph]  # graph: only on a graph index
    modes.append(evaluation.WITHOUT_QUESTIONS)  # (what the questions add to hybrid)
    if args.graph:
        modes += [f"{evaluation.WITH_GRAPH}{w}" for w in args.graph_weights.split(",")]
    started = time.perf_counter()
    progress = passages_done(10)
    with Isotope.open(index, cache_dir=args.cache, generation=args.generation,
                      graph=args.graph, **models) as iso:
        counts = iso.status().counts
        if args.reuse_index and counts["chunks"]:
            print(f"reusing {index}: {counts}", file=sys.stderr)
        else:  # (--reuse-index with no index there yet builds it)
            report = iso.ingest_chunks(evaluation.chunks_of(passages), progress=progress)
            print(f"ingest: {len(report.added)} added, {report.llm_calls} model calls, "
                  f"{report.llm_cache_hits} cache hits, {time.perf_counter() - started:.0f} s",
                  file=sys.stderr)
        search = evaluation.searcher(iso)
        if args.adapter:
            search, extra = adapted(iso, search)
            modes += extra
        result = evaluation.EvalResult(len(passages), len(queries))
        result.modes = evaluation.evaluate(search, queries, modes)
        keywords = [{**q, "question": keyword_query(q["question"])} for q in queries]
        keyword_scores = evaluation.evaluate(search, keywords, args.keyword_modes.split(","))
        transformed: list[tuple[str, list[evaluation.ModeScores]]] = []
        if args.transform_queries:
            subset = keywords[: args.transform_queries]
            for label, how in (("keywords", False), ("keywords rewritten into questions",
                                                     True)):
                scores = evaluation.evaluate(evaluation.searcher(iso, transform=how), subset,
                                             ["questions-dense", "hybrid"])
                transformed.append((label, scores))
    # what the index gives with no question generated at all: the same passages stored
    # before their questions (the chunks' keyword text without them), hybrid over the
    # chunks' and statements' signals
    bare_index = OUT / f"{index.name}-no-questions"
    with Isotope.open(bare_index, cache_dir=args.cache, generation=args.generation,
                      **models) as bare:
        if not (args.reuse_index and bare.status().counts["chunks"]):
            bare.ingest_chunks(evaluation.chunks_of(passages), questions="later")
        assert bare.status().counts["questions"] == 0
        without = evaluation.evaluate(evaluation.searcher(bare), queries, ["hybrid"])[0]
    without.mode = NO_QUESTIONS_INDEX
    result.modes.append(without)
    base = next(m for m in result.modes if m.mode == "chunks-dense")
    print(f"\nRetrieval on {'unseen' if args.unseen else 'the first'} {len(passages)} "
          f"passages of squad-dev, "
          f"{len(queries)} questions (generation={args.generation}, "
          f"embedder={args.embedder or 'default'}, "
          f"questions per atom={args.questions_per_atom or 'default'})")
    _table(result.modes, base)
    print("\nThe same questions as keyword queries (question words and stopwords dropped)")
    _table(keyword_scores, base)
    for label, scores in transformed:
        print(f"\nQuery transformation, first {args.transform_queries} keyword queries: "
              f"{label} (p50 includes the model call)")
        _table(scores, base)
    print("\nSuggested actions (thresholds in effect; those this data suggests)")
    rows = result.confidence_table()
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + "|".join("---" for _ in rows[0]) + "|")
    for row in rows:
        print("| " + " | ".join(str(v) for v in row.values()) + " |")
    said = json.dumps({"modes": [m.__dict__ for m in result.modes],
                       "keyword": [m.__dict__ for m in keyword_scores]}, indent=1, default=str)
    (OUT / f"{index.name}.json").write_text(said)
    if args.json:
        print(said, file=printed)


def adapted(iso: Isotope, search: evaluation.Search
            ) -> tuple[evaluation.Search, list[str]]:
    """``search`` knowing the modes ``MODE +adapter`` (the index's query adapter, fitted
    here, applied) and ``hybrid +question weights`` (with the weights fitted on the
    index's own questions, without and with the adapter), and those modes."""
    started = time.perf_counter()
    done = iso.fit_adapter()
    print(f"query adapter: {json.dumps(done.model_dump())} "
          f"({time.perf_counter() - started:.1f} s)", file=sys.stderr)
    fitted: dict[bool, dict[str, float]] = {}
    for on in (False, True):
        weights = weight_fit.fit(iso.store, iso.embedder, iso.settings, min_marks=1,
                                 adapter=query_adapter.load(iso.store) if on else None,
                                 questions=weight_fit.QUESTIONS)
        fitted[on] = weights.weights
        print(f"weights from questions{ADAPTED if on else ''}: "
              f"{json.dumps(weights.model_dump())}", file=sys.stderr)

    def run(query: str, mode: str, k: int) -> tuple[list[str], float, str]:
        on = mode.endswith(ADAPTED)
        mode = mode.removesuffix(ADAPTED)
        iso.settings.query_adapter = "linear" if on else "off"
        try:
            if mode.endswith(WEIGHTED):
                response = iso.search(query, k, mode="hybrid", weights=fitted[on])
                return ([evaluation.passage_id(r.chunk) for r in response.results],
                        response.top_score, response.suggested_action)
            return search(query, mode, k)
        finally:
            iso.settings.query_adapter = "off"

    extra = [f"{m}{ADAPTED}" for m in ("atoms-dense", "chunks-dense", "hybrid",
                                       evaluation.WITHOUT_QUESTIONS)]
    return run, [*extra, f"hybrid{WEIGHTED}", f"hybrid{WEIGHTED}{ADAPTED}"]


def passages_done(every: int) -> Callable[[Progress], None]:
    """An ingest's progress, printed every ``every`` passages (one source each)."""
    started = time.perf_counter()

    def progress(p: Progress) -> None:
        if p.stage == "store" and p.sources_done % every == 0:
            print(f"{p.sources_done}/{p.sources_total} passages, {p.questions} questions, "
                  f"{time.perf_counter() - started:.0f} s", file=sys.stderr)

    return progress


def _table(scores: list[evaluation.ModeScores], base: evaluation.ModeScores) -> None:
    print("| mode | R@1 | R@2 | R@5 | MRR@10 | p50 ms | R@1 vs chunks-dense |")
    print("|---|---|---|---|---|---|---|")
    for m in scores:
        print(f"| {m.mode} | {m.recall[1]:.1f} | {m.recall[2]:.1f} | {m.recall[5]:.1f} | "
              f"{m.mrr:.1f} | {m.latency_p50_ms:.2f} | {m.recall[1] - base.recall[1]:+.1f} |")


if __name__ == "__main__":
    main()
