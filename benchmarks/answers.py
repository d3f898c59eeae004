"""How good `ask`'s answers are (issue 25), with the offline model.

    .venv/bin/python benchmarks/answers.py [--passages 300] [--limit-queries 200]
        [--unseen 150] [--json]

Asks the questions of the first ``--passages`` passages of ../shared/eval/squad-dev
(``--limit-queries`` of them, spread over the passages) on the index benchmarks/quality.py
builds (run it first), plus the 30 questions of benchmarks/data/unanswerable.jsonl, written
by hand about those passages' topics and checked to have their answer in none of them.
Prints contains-gold, F1, declined, declined-with-gold, citation-is-gold, wrong, the share
of each answer kind, the unanswerable questions declined, and the latency (p50 of `ask`;
time to the first streamed piece after the results).

``--unseen N``: the same on N passages the project was not developed on (passages 600 to
600+N of squad-dev, indexed here with ``--questions later``: chunks and atoms, no
generated questions, so no question model runs), their questions spread the same way.

The answer model's replies are cached in benchmarks/cache/ (committed), so a re-run with
the same prompt costs nothing; a new prompt version is asked again (about 4-8 s per
question on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from isotope import Isotope, answer_eval, evaluation

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "eval" / "squad-dev"
OUT = ROOT / "benchmarks" / "out"
CACHE = ROOT / "benchmarks" / "cache"
UNANSWERABLE = ROOT / "benchmarks" / "data" / "unanswerable.jsonl"


def progress(done: int, total: int) -> None:
    if done % 10 == 0 or done == total:
        print(f"  {done}/{total} asked", file=sys.stderr, flush=True)


def run(index: Path, queries: list[dict[str, Any]], unanswerable: list[dict[str, Any]]
        ) -> answer_eval.AnswerScores:
    with Isotope.open(index, create=False, cache_dir=CACHE) as iso:
        return answer_eval.evaluate_answers(iso, queries, unanswerable=unanswerable,
                                            progress=progress)


def unseen_index(count: int) -> tuple[Path, list[dict[str, Any]]]:
    """An index of passages 600..600+count, with no generated questions."""
    rows = evaluation.read_jsonl(DATA / "passages.jsonl", ("pid", "text"))[600:600 + count]
    pids = {str(p["pid"]) for p in rows}
    queries = [q for q in evaluation.read_jsonl(DATA / "queries.jsonl", ("question",
                                                                          "gold_pid"))
               if str(q["gold_pid"]) in pids]
    index = OUT / f"answers-unseen-{count}"
    with Isotope.open(index, cache_dir=CACHE) as iso:
        if iso.status().counts["sources"] != len(rows):
            iso.ingest_chunks(evaluation.chunks_of(rows), questions="later")
    return index, queries


def table(title: str, scores: answer_eval.AnswerScores) -> None:
    print(f"\n{title}: {scores.questions} questions ({scores.gold_given} with their gold "
          f"passage among those given to the model), {scores.unanswerable} unanswerable")
    print("| contains gold % | F1 | declined % | declined with gold % | citation is gold % "
          "| wrong % | generated / quoted / declined % | unanswerable declined % | "
          "ask p50 s | first piece p50 s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    kinds = " / ".join(str(scores.kinds.get(k, 0.0)) for k in ("generated", "quoted",
                                                                 "declined"))
    print(f"| {scores.contains_gold} | {scores.f1} | {scores.declined} | "
          f"{scores.declined_with_gold} | {scores.citation_is_gold} | {scores.wrong} | "
          f"{kinds} | {scores.unanswerable_declined} | {scores.latency_p50_s} | "
          f"{scores.first_token_p50_s} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=300)
    parser.add_argument("--limit-queries", type=int, default=200)
    parser.add_argument("--unseen", type=int, default=0, metavar="N")
    parser.add_argument("--no-dev", action="store_true", help="only the unseen passages")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--examples", type=Path, help="write every answer here (JSON)")
    args = parser.parse_args()
    unanswerable = evaluation.read_jsonl(UNANSWERABLE, ("question",))
    results: dict[str, Any] = {}
    started = time.perf_counter()
    if not args.no_dev:
        _, queries = evaluation.load(DATA / "passages.jsonl", DATA / "queries.jsonl",
                                     args.passages)
        index = OUT / f"quality-{args.passages}-batched"
        if not (index / "isotope.db").exists():
            sys.exit(f"no index at {index}: run benchmarks/quality.py --passages "
                     f"{args.passages}")
        dev = run(index, answer_eval.pick(queries, args.limit_queries), unanswerable)
        results["dev"] = dev
        table(f"First {args.passages} passages of squad-dev", dev)
    if args.unseen:
        index, queries = unseen_index(args.unseen)
        unseen = run(index, answer_eval.pick(queries, args.limit_queries), [])
        results["unseen"] = unseen
        table(f"Passages 600-{600 + args.unseen} of squad-dev (unseen; no generated "
              "questions)", unseen)
    print(f"\n{time.perf_counter() - started:.0f} s", file=sys.stderr)
    if args.examples:
        args.examples.write_text(json.dumps({k: v.examples for k, v in results.items()},
                                            indent=1, ensure_ascii=False))
    if args.json:
        print(json.dumps({k: {n: v for n, v in asdict(s).items() if n != "examples"}
                          for k, s in results.items()}, indent=2))


if __name__ == "__main__":
    main()
