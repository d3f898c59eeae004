"""Contextual chunk enrichment (``chunk_context``), measured on multi-passage documents.

    .venv/bin/python benchmarks/contextual.py [--passages 300]

The first ``--passages`` passages of ../shared/eval/squad-dev are grouped into documents by
article (``title``), each passage one chunk of its article. Two indexes are built with the
default offline models, the same in everything but ``chunk_context``; every retrieval mode
is scored on all the passages' questions in both, side by side. The baseline is the index
without contexts, measured in the same run. Model replies are cached in benchmarks/cache/,
so the index without contexts and a re-run cost only what the cache does not hold.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from isotope import Isotope
from isotope.ingest.pipeline import IngestReport
from isotope.search import evaluation
from isotope.search.retrieval import MODES, keyword_query
from quality import CACHE, DATA, OUT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=300)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--first-pages", action="store_true",
                        help="show the model only each document's beginning (isotope before "
                        "the windows), to compare with the windows")
    args = parser.parse_args()
    if args.first_pages:
        from isotope.ingest import contextual

        whole = contextual.excerpt
        contextual.excerpt = lambda document, max_chars, start=None, end=None: whole(
            document, max_chars)
    passages, queries = evaluation.load(DATA / "passages.jsonl", DATA / "queries.jsonl",
                                        args.passages)
    chunks = evaluation.chunks_of(passages, "title")
    documents = len({c.source for c in chunks})
    modes = args.modes.split(",")
    keywords = [{**q, "question": keyword_query(q["question"])} for q in queries]
    rows: dict[bool, tuple[list[evaluation.ModeScores], list[evaluation.ModeScores]]] = {}
    costs: dict[bool, IngestReport] = {}
    sample = ""
    for enriched in (False, True):
        index = OUT / (f"contextual-{args.passages}-{'on' if enriched else 'off'}"
                       + ("-first" if args.first_pages and enriched else ""))
        started = time.perf_counter()
        with Isotope.open(index, cache_dir=CACHE, chunk_context=enriched) as iso:
            report = iso.ingest_chunks(
                chunks, progress=lambda p: print(
                    f"  {p.stage} {p.source} {p.sources_done}/{p.sources_total}",
                    file=sys.stderr) if p.stage == "store" else None)
            print(f"chunk_context={enriched}: {len(report.added)} documents ingested, "
                  f"{report.llm_calls} model calls ({report.llm_cache_hits} cached), "
                  f"{report.contexts} contexts, {time.perf_counter() - started:.0f} s",
                  file=sys.stderr)
            costs[enriched] = report
            search = evaluation.searcher(iso)
            rows[enriched] = (evaluation.evaluate(search, queries, modes),
                              evaluation.evaluate(search, keywords, modes))
            if enriched:
                first = iso.search(queries[0]["question"], 1).results[0].chunk
                sample = f"{first.metadata['pid']}: {first.context}"
    print(f"\nContextual chunk enrichment: the first {len(passages)} passages of squad-dev as "
          f"{documents} documents (one per article), {len(queries)} questions")
    for label, at in (("questions", 0), ("the same questions as keyword queries", 1)):
        print(f"\n{label.capitalize()}: Recall@1/@5 and MRR@10 without -> with chunk_context")
        print("| mode | R@1 off | R@1 on | Δ R@1 | R@5 off | R@5 on | MRR off | MRR on | "
              "p50 ms on |")
        print("|---|---|---|---|---|---|---|---|---|")
        for off, on in zip(rows[False][at], rows[True][at], strict=True):
            print(f"| {on.mode} | {off.recall[1]:.1f} | {on.recall[1]:.1f} | "
                  f"{on.recall[1] - off.recall[1]:+.1f} | {off.recall[5]:.1f} | "
                  f"{on.recall[5]:.1f} | {off.mrr:.1f} | {on.mrr:.1f} | "
                  f"{on.latency_p50_ms:.2f} |")
    on = costs[True]
    seconds = on.timings.get("context", 0.0)
    print(f"\nCost of the contexts: {on.contexts} model calls in {seconds:.0f} s "
          f"({seconds / max(1, on.contexts):.1f} s per chunk; the index without them: "
          f"{sum(costs[False].timings.values()):.0f} s of ingest, mostly cached)")
    print(f"A context written: {sample}")
    suffix = "-first" if args.first_pages else ""
    (OUT / f"contextual-{args.passages}{suffix}.json").write_text(json.dumps(
        {enriched: {"questions": [m.__dict__ for m in r[0]],
                    "keywords": [m.__dict__ for m in r[1]]} for enriched, r in rows.items()},
        indent=1, default=str))


if __name__ == "__main__":
    main()
