"""Calibrate the thresholds of ``suggested_action`` (retrieval.CONFIDENCE) per mode.

    .venv/bin/python benchmarks/calibrate.py [--passages 300] [--sizes 3,4,5,10,20,50,100,300]

Uses the index of the first ``--passages`` passages of ../shared/eval/squad-dev that
benchmarks/quality.py builds (run that first), and queries it with their questions and
with the questions of the next ``--passages`` passages, whose answers are not in the
index, so that ``refine_query`` is calibrated on questions the index cannot answer.
Prints, per mode, the thresholds this data suggests (``isotope.search.evaluation.calibrate``:
from ``deliver`` on, the first result is right for 90% of the questions; under
``refine``, the right passage is among the first five for fewer than half) and the share
of questions and recall at each action level under them, and which share of the
answerable and of the unanswerable questions gets each action.

``--sizes`` calibrates ``hybrid`` instead on the index cut to its first N passages
(retrieval.HYBRID_BY_SIZE): ``deliver`` as above; ``refine`` as above but no higher than
the score under which fall 5% of the right first results (``evaluation.REFINE_RIGHT``: on
a few chunks every answerable question finds its passage among the first five).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from isotope import Isotope
from isotope.search import evaluation
from isotope.search.retrieval import MODES, action

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "eval" / "squad-dev"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=300)
    parser.add_argument("--sizes", default="", help="calibrate hybrid's thresholds (and the "
                        "similarity of its best matched question) on the index cut to these "
                        "numbers of passages instead, e.g. 3,4,5,10,20,50,100,300")
    args = parser.parse_args()
    passages, answerable = evaluation.load(DATA / "passages.jsonl", DATA / "queries.jsonl",
                                           args.passages)
    _, both = evaluation.load(DATA / "passages.jsonl", DATA / "queries.jsonl",
                              2 * args.passages)
    indexed = {str(p["pid"]) for p in passages}
    unanswerable = [q for q in both if str(q["gold_pid"]) not in indexed]
    queries = answerable + unanswerable
    index = ROOT / "benchmarks" / "out" / f"quality-{args.passages}-batched"
    if not (index / "isotope.db").exists():
        sys.exit(f"no index at {index}: run benchmarks/quality.py --passages {args.passages}")
    print(f"{len(passages)} passages, {len(answerable)} answerable and {len(unanswerable)} "
          "unanswerable questions", flush=True)
    if args.sizes:
        by_size(index, passages, answerable, unanswerable,
                [int(n) for n in args.sizes.split(",")])
        return
    print("| mode | deliver/refine | action | share % | R@1 | R@5 | answerable % | "
          "unanswerable % |")
    print("|---|---|---|---|---|---|---|---|")
    with Isotope.open(index, create=False) as iso:
        search = evaluation.searcher(iso)
        for mode in [m for m in MODES if m != "graph"]:  # (graph: only on a graph index)
            tops, given, hit1, hit5 = [], [], [], []
            for q in queries:
                sources, top, suggested = search(q["question"], mode, 5)
                tops.append(top)
                given.append(suggested)
                hit1.append(str(q["gold_pid"]) in sources[:1])
                hit5.append(str(q["gold_pid"]) in sources[:5])
            deliver, refine = evaluation.calibrate(tops, hit1, hit5)
            _print(f"{mode} | {deliver:.3f}/{refine:.3f}",
                   [action(t, deliver, refine) for t in tops], hit1, hit5, len(answerable))
            if mode == "hybrid":  # its score combined with the best question's similarity
                _print("hybrid as `search` suggests | defaults", given, hit1, hit5,
                       len(answerable))


def by_size(index: Path, passages: list[dict[str, Any]], answerable: list[dict[str, Any]],
            unanswerable: list[dict[str, Any]], sizes: list[int]) -> None:
    """The same index cut down to its first N passages (copied, the rest deleted): hybrid's
    (deliver, refine) at each size (``refine`` bounded by :data:`evaluation.REFINE_RIGHT`
    of the right first results, and without that bound), which share of the right first
    results and of the unanswerable questions score under ``refine``; and the similarity
    of the first result's best matched question (a cosine: the same scale at every size)
    calibrated the same way."""
    import shutil

    from isotope.search.retrieval import CONFIDENCE, thresholds

    print("\n| passages | answerable | unanswerable | best question's similarity: deliver | "
          "refine | hybrid score: deliver | refine | right first results under it % | "
          "unanswerable under it % | refine without the 5% bound | right first results "
          "under it % | hybrid thresholds in effect at this size |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for size in sizes:
        kept = {str(p["pid"]) for p in passages[:size]}
        target = index.parent / f"calibrate-{size}"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(index, target)
        with Isotope.open(target, create=False) as iso:
            for info in iso.sources():
                if info.source.uri not in kept:
                    iso.delete(info.source.uri)
            asked = [q for q in answerable if str(q["gold_pid"]) in kept]
            outside = unanswerable[: len(asked)]
            similarity, score, hit1, hit5 = [], [], [], []
            for q in asked + outside:
                found = iso.search(q["question"], 5)
                first = found.results[0] if found.results else None
                similarity.append(max((m.score for m in first.matched_questions), default=0.0)
                                  if first else 0.0)
                score.append(found.top_score)
                ids = [evaluation.passage_id(r.chunk) for r in found.results]
                hit1.append(str(q["gold_pid"]) in ids[:1])
                hit5.append(str(q["gold_pid"]) in ids)
            deliver, refine = evaluation.calibrate(similarity, hit1, hit5)
            h_deliver, h_refine = evaluation.calibrate(score, hit1, hit5,
                                                       evaluation.REFINE_RIGHT)
            unbounded = evaluation.calibrate(score, hit1, hit5)[1]
            in_effect = thresholds("hybrid", chunks=iso.store.counts()["chunks"])
        shutil.rmtree(target, ignore_errors=True)
        right = [s for s, h in zip(score, hit1, strict=True) if h]

        def under(limit: float, scores: list[float]) -> float:
            return 100 * sum(s < limit for s in scores) / max(1, len(scores))

        print(f"| {size} | {len(asked)} | {len(outside)} | {deliver:.3f} | {refine:.3f} | "
              f"{h_deliver:.3f} | {h_refine:.3f} | {under(h_refine, right):.1f} | "
              f"{under(h_refine, score[len(asked):]):.1f} | {unbounded:.3f} | "
              f"{under(unbounded, right):.1f} | {in_effect[0]:.3f}/{in_effect[1]:.3f} |",
              flush=True)
    print(f"(the best question's similarity is judged by questions-dense's thresholds, "
          f"{CONFIDENCE['questions-dense']}, at every size)")


def _print(label: str, actions: list[str], hit1: list[bool], hit5: list[bool],
           split: int) -> None:
    levels = evaluation.action_levels(actions, hit1, hit5)
    for n, (name, level) in enumerate(levels.items()):
        shares = [100 * sum(a == name for a in part) / len(part)
                  for part in (actions[:split], actions[split:])]
        print(f"| {label if n == 0 else ' | '} | {name} | {level['share']} | {level['R@1']} | "
              f"{level['R@5']} | {shares[0]:.1f} | {shares[1]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
