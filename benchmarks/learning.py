"""What the index gains from its users (issue 29): learned questions, simulated use.

    .venv/bin/python benchmarks/learning.py [--passages 300] [--sample 300] [--json]

On the first ``--passages`` passages of SQuAD dev (the offline model's questions, its
replies read from benchmarks/cache), through the public path a user takes: a search with
the query log on, then ``feedback(query_id, gold chunk)`` when the gold passage is among
the 50 results.

1. **Held-out half**: each passage's questions split in two halves (alternately); one
   half is past traffic marked useful for its gold chunk (learned), every mode is scored
   on the other half with and without the learned questions; then the halves swap, and
   the two are averaged. With the easy/hard split (easy: chunk BM25 alone ranks the
   passage first).
2. **Reworded**: a sample of questions reworded by the offline model away from their
   passage's words (benchmarks/paraphrase.py); each original learned, its rewording asked.
3. **Repeated**: each learned query asked again (hybrid): how often its chunk is first.
4. **The log's cost**: hybrid and questions-dense p50 with the query log on and off, on
   the same index, interleaved.

Each experiment runs on a fresh copy of one index built (and kept) under
benchmarks/out/learning-N; nothing is written to the repository.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from isotope import Isotope
from isotope.search import evaluation, retrieval
from isotope.search.retrieval import MODES
from paraphrase import reworded

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "eval" / "squad-dev"
OUT = ROOT / "benchmarks" / "out"
CACHE = ROOT / "benchmarks" / "cache"
SEEN = 50
"""A user marks the gold passage when it is among this many results."""


def base_index(passages: list[dict[str, Any]]) -> Path:
    """The index of the passages (built once: the model's replies come from the cache)."""
    index = OUT / f"learning-{len(passages)}"
    if not (index / "done").exists():
        shutil.rmtree(index, ignore_errors=True)
        started = time.perf_counter()
        with Isotope.open(index, cache_dir=CACHE) as iso:
            iso.ingest_chunks(evaluation.chunks_of(passages))
        (index / "done").write_text("")
        print(f"built {index} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return index


def fresh(index: Path, name: str) -> Path:
    copy = OUT / f"{index.name}-{name}"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(index, copy)
    return copy


def teach(iso: Isotope, queries: list[dict[str, Any]], marked: list[dict[str, Any]] | None
          = None) -> dict[str, Any]:
    """Each query searched (hybrid, query log on) and its gold passage marked useful
    (those marked added to ``marked``); then, unless ``--no-fit``, the signal weights
    fitted on the marks (``fit``: what the fit found)."""
    counts: dict[str, Any] = {"marked": 0, "learned": 0, "duplicate": 0, "not_seen": 0}
    for q in queries:
        found = iso.search(q["question"], SEEN, mode="hybrid")
        gold = next((r.chunk.id for r in found.results
                     if evaluation.passage_id(r.chunk) == str(q["gold_pid"])), None)
        if gold is None or found.query_id is None:
            counts["not_seen"] += 1
            continue
        done = iso.feedback(found.query_id, gold)
        counts["marked"] += 1
        if marked is not None:
            marked.append(q)
        if done.learned in counts:
            counts[done.learned] += 1
    if FIT[0]:
        fit = iso.fit_weights(min_marks=1)
        counts["fit"] = {"weights": fit.weights, "adopted": fit.adopted,
                         "first_before": fit.first_before, "first_after": fit.first_after,
                         "seconds": fit.seconds}
    return counts


SCORED = [m for m in MODES if m != "graph"]  # (graph: only on a graph index)
"""The modes scored (``--modes``); chunks-bm25 is always among them (it splits easy and
hard)."""


def scores(iso: Isotope, queries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {s.mode: {"R@1": s.recall[1], "R@5": s.recall[5], "split": s.split}
            for s in evaluation.evaluate(evaluation.searcher(iso), queries, SCORED)}


SWEEP: list[tuple[float, float]] = []
"""(CONFIRMED_MATCH, CONFIRMED_GAIN) pairs also scored (hybrid) after learning
(``--sweep``)."""
FIT = [True]
"""Fit the signal weights on the marks after teaching (``--no-fit``: not)."""


def confirming(match: float, gain: float, run: Any) -> Any:
    """``run()`` with the confirmed-question raise at ``match`` and ``gain``."""
    saved = retrieval.CONFIRMED_MATCH, retrieval.CONFIRMED_GAIN
    retrieval.CONFIRMED_MATCH, retrieval.CONFIRMED_GAIN = match, gain
    try:
        return run()
    finally:
        retrieval.CONFIRMED_MATCH, retrieval.CONFIRMED_GAIN = saved


def held_out(index: Path, queries: list[dict[str, Any]]) -> dict[str, Any]:
    by_passage: dict[str, list[dict[str, Any]]] = {}
    for q in queries:
        by_passage.setdefault(str(q["gold_pid"]), []).append(q)
    halves: list[list[dict[str, Any]]] = [[], []]
    for own in by_passage.values():
        for i, q in enumerate(own):
            halves[i % 2].append(q)
    runs = []
    for learned, asked in ((0, 1), (1, 0)):
        with Isotope.open(fresh(index, "half"), cache_dir=CACHE, query_log=True) as iso:
            before = scores(iso, halves[asked])
            taught = teach(iso, halves[learned])
            wanted = halves[asked]
            swept = {f"{m}:{lead}": confirming(m, lead, lambda: scores(iso, wanted))  # noqa: B023
                     for m, lead in SWEEP}
            after = scores(iso, halves[asked])
        runs.append((before, after, taught, swept))
    out: dict[str, Any] = {"taught": [r[2] for r in runs], "modes": {}, "sweep": {
        key: round(statistics.mean(r[3][key]["hybrid"]["R@1"] for r in runs), 1)
        for key in runs[0][3]}}
    for mode in SCORED:
        row: dict[str, float] = {}
        for key in ("R@1", "R@5"):
            row[f"{key} before"] = statistics.mean(r[0][mode][key] for r in runs)
            row[f"{key} after"] = statistics.mean(r[1][mode][key] for r in runs)
        for part in ("easy", "hard"):
            row[f"{part} before"] = statistics.mean(r[0][mode]["split"][part]["R@1"]
                                                    for r in runs)
            row[f"{part} after"] = statistics.mean(r[1][mode]["split"][part]["R@1"]
                                                   for r in runs)
        out["modes"][mode] = {k: round(v, 1) for k, v in row.items()}
    return out


def reworded_set(index: Path, passages: list[dict[str, Any]], queries: list[dict[str, Any]],
                 sample: int) -> dict[str, Any]:
    text_of = {str(p["pid"]): p["text"] for p in passages}
    step = max(1, len(queries) // sample)
    with Isotope.open(fresh(index, "reworded"), cache_dir=CACHE, query_log=True) as iso:
        originals, rewordings, _, _ = reworded(iso, text_of, queries[::step][:sample])
        before = scores(iso, rewordings)
        marked: list[dict[str, Any]] = []
        taught = teach(iso, originals, marked)
        swept = {f"{m}:{lead}": round(confirming(
            m, lead, lambda: scores(iso, rewordings))["hybrid"]["R@1"], 1)
            for m, lead in SWEEP}
        after = scores(iso, rewordings)
        again = scores(iso, marked)
    return {"pairs": len(rewordings), "taught": taught,
            "modes": {m: {"R@1 before": round(before[m]["R@1"], 1),
                          "R@1 after": round(after[m]["R@1"], 1)} for m in SCORED},
            "repeated_first": round(again["hybrid"]["R@1"], 1), "sweep": swept}


def log_cost(index: Path, queries: list[dict[str, Any]]) -> dict[str, Any]:
    found: dict[str, dict[bool, list[float]]] = {}
    path = fresh(index, "log")
    with Isotope.open(path, cache_dir=CACHE) as iso:
        for mode in ("hybrid", "questions-dense"):
            times: dict[bool, list[float]] = {False: [], True: []}
            for q in queries[:300]:
                for on in (False, True):  # interleaved, so both see the same box
                    iso.query_log = on
                    started = time.perf_counter()
                    iso.search(q["question"], 10, mode=mode)
                    times[on].append(1000 * (time.perf_counter() - started))
            found[mode] = times
    return {mode: {"off_p50_ms": round(statistics.median(t[False]), 2),
                   "on_p50_ms": round(statistics.median(t[True]), 2),
                   "added_ms": round(statistics.median(t[True]) - statistics.median(t[False]),
                                     2)} for mode, t in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=300)
    parser.add_argument("--sample", type=int, default=300)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--modes", nargs="+", default=list(SCORED), help="modes to score")
    parser.add_argument("--confirmed", type=float, default=retrieval.CONFIRMED_MATCH,
                        help="retrieval.CONFIRMED_MATCH for this run")
    parser.add_argument("--skip-log", action="store_true", help="leave out the log's cost")
    parser.add_argument("--sweep", nargs="*", default=[], metavar="MATCH:GAIN",
                        help="also score hybrid after learning with these raise settings")
    parser.add_argument("--no-fit", action="store_true",
                        help="do not fit the signal weights on the marks")
    parser.add_argument("--unseen", type=int, default=0, metavar="N",
                        help="also the held-out half on passages 600..600+N (never tuned "
                        "on; the index benchmarks/answers.py builds)")
    args = parser.parse_args()
    SCORED[:] = sorted({*args.modes, "chunks-bm25", "hybrid"}, key=list(MODES).index)
    retrieval.CONFIRMED_MATCH = args.confirmed
    SWEEP[:] = [(float(x.split(":")[0]), float(x.split(":")[1])) for x in args.sweep]
    FIT[0] = not args.no_fit
    passages, queries = evaluation.load(DATA / "passages.jsonl", DATA / "queries.jsonl",
                                        args.passages)
    OUT.mkdir(exist_ok=True)
    index = base_index(passages)
    result = {"passages": len(passages), "queries": len(queries),
              "held_out": held_out(index, queries),
              "reworded": reworded_set(index, passages, queries, args.sample),
              "confirmed_match": args.confirmed,
              "fit": FIT[0],
              "log": {} if args.skip_log else log_cost(index, queries)}
    if args.unseen:
        from answers import unseen_index

        index, unseen_queries = unseen_index(args.unseen)
        result["unseen"] = held_out(index, unseen_queries)
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"\nLearned questions, first {len(passages)} passages of squad-dev "
          f"({len(queries)} questions)\n")
    print("Held-out half (mean of both halves): | mode | R@1 before | R@1 after | gain | "
          "R@5 before / after | easy R@1 | hard R@1 |")
    print("|---|---|---|---|---|---|---|")
    for mode, row in result["held_out"]["modes"].items():
        print(f"| {mode} | {row['R@1 before']} | {row['R@1 after']} | "
              f"{row['R@1 after'] - row['R@1 before']:+.1f} | {row['R@5 before']} / "
              f"{row['R@5 after']} | {row['easy before']} -> {row['easy after']} | "
              f"{row['hard before']} -> {row['hard after']} |")
    print(f"taught: {result['held_out']['taught']}")
    rw = result["reworded"]
    print(f"\nReworded ({rw['pairs']} pairs; originals learned): | mode | R@1 before | after |")
    for mode, row in rw["modes"].items():
        print(f"| {mode} | {row['R@1 before']} | {row['R@1 after']} |")
    print(f"taught: {rw['taught']}; a learned query asked again is first "
          f"{rw['repeated_first']}% of the time (hybrid)")
    print("\nThe query log's cost (p50, 300 queries, interleaved):")
    for mode, row in result["log"].items():
        print(f"| {mode} | off {row['off_p50_ms']} ms | on {row['on_p50_ms']} ms | "
              f"added {row['added_ms']} ms |")


if __name__ == "__main__":
    main()
