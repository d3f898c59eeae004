"""Questions as enrichment on SQuAD dev (issue 17): time to the first search, quality
while questions are missing, after enrichment, and with half the passages enriched.

    .venv/bin/python benchmarks/enrichment.py [--passages 300]

1. Ingests the first ``--passages`` passages (each one chunk) with ``questions="later"``,
   the cache off: the time until the first search answers (chunks and atoms embedded and
   stored; no language model call).
2. Scores hybrid (and every mode) then: the chunks and atoms only.
3. Enriches half the passages (their questions answered by benchmarks/cache, the cached
   generations of quality.py), and scores hybrid on the queries of each half against the
   same index fully enriched and not enriched at all: a fusion fair to waiting chunks
   scores the waiting half as the unenriched index does, the enriched half as the fully
   enriched one does.
4. Enriches the rest and scores every mode: the final quality, to compare with quality.py.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from isotope import Isotope
from isotope.search import evaluation
from isotope.search.retrieval import MODES

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "eval" / "squad-dev"
OUT = ROOT / "benchmarks" / "out"
CACHE = ROOT / "benchmarks" / "cache"


def hybrid_r1(iso: Isotope, queries: list[dict]) -> float:
    scores = evaluation.evaluate(evaluation.searcher(iso), queries, ["hybrid"])
    return round(scores[0].recall[1], 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=300)
    args = parser.parse_args()
    passages, queries = evaluation.load(DATA / "passages.jsonl", DATA / "queries.jsonl",
                                        args.passages)
    index = OUT / f"enrichment-{args.passages}"
    shutil.rmtree(index, ignore_errors=True)
    started = time.perf_counter()
    with Isotope.open(index, cache=False) as iso:
        report = iso.ingest_chunks(evaluation.chunks_of(passages), questions="later")
        first = iso.search(queries[0]["question"], k=5)
        first_search_s = time.perf_counter() - started
        print(f"stage 1: {len(report.added)} passages, {report.atoms} atoms, "
              f"{report.llm_calls} model calls; first search answered after "
              f"{first_search_s:.1f} s ({len(first.results)} results)", file=sys.stderr)
    sources = [str(p["pid"]) for p in passages]
    half = set(sources[: len(sources) // 2])
    gold_in = {q["question"]: str(q["gold_pid"]) in half for q in queries}
    enriched_q = [q for q in queries if gold_in[q["question"]]]
    waiting_q = [q for q in queries if not gold_in[q["question"]]]
    rows = []
    with Isotope.open(index, cache_dir=CACHE) as iso:
        before = evaluation.evaluate(evaluation.searcher(iso), queries, MODES)
        none = {"enriched half": hybrid_r1(iso, enriched_q),
                "waiting half": hybrid_r1(iso, waiting_q)}
        t = time.perf_counter()
        iso.enrich(sources=sorted(half))
        half_s = time.perf_counter() - t
        mixed = {"enriched half": hybrid_r1(iso, enriched_q),
                 "waiting half": hybrid_r1(iso, waiting_q)}
        t = time.perf_counter()
        done = iso.enrich()
        rest_s = time.perf_counter() - t
        full = {"enriched half": hybrid_r1(iso, enriched_q),
                "waiting half": hybrid_r1(iso, waiting_q)}
        after = evaluation.evaluate(evaluation.searcher(iso), queries, MODES)
    for name in ("enriched half", "waiting half"):
        rows.append((name, none[name], mixed[name], full[name]))
    print(f"\nEnrichment, first {len(passages)} passages of squad-dev, {len(queries)} "
          f"questions; time to the first search {first_search_s:.1f} s (2 cores, no "
          f"model call); enrichment from the cache (benchmarks/cache): {half_s:.1f} s for "
          f"the first half, {rest_s:.1f} s for the rest ({done.questions} questions)")
    print("\nhybrid R@1 by where the gold passage is, with half the passages enriched")
    print("| queries about the | no questions anywhere | half enriched | all enriched |")
    print("|---|---|---|---|")
    for name, a, b, c in rows:
        print(f"| {name} ({len(enriched_q) if 'enriched' in name else len(waiting_q)}) | "
              f"{a} | {b} | {c} |")
    print("\nevery mode before and after enrichment (R@1 / R@5 / MRR@10)")
    print("| mode | before | after |")
    print("|---|---|---|")
    for b, a in zip(before, after, strict=True):
        print(f"| {b.mode} | {b.recall[1]:.1f} / {b.recall[5]:.1f} / {b.mrr:.1f} | "
              f"{a.recall[1]:.1f} / {a.recall[5]:.1f} / {a.mrr:.1f} |")


if __name__ == "__main__":
    main()
