"""Calibrate the thresholds of ``suggested_action`` (retrieval.CONFIDENCE) per mode.

    .venv/bin/python benchmarks/calibrate.py [--passages 300]

Uses the index of the first ``--passages`` passages of ../shared/eval/squad-dev that
benchmarks/quality.py builds (run that first), and queries it with their questions and
with the questions of the next ``--passages`` passages, whose answers are not in the
index, so that ``refine_query`` is calibrated on questions the index cannot answer.
Prints, per mode, the thresholds this data suggests (``isotope.evaluation.calibrate``:
from ``deliver`` on, the first result is right for 90% of the questions; under
``refine``, the right passage is among the first five for fewer than half) and the share
of questions and recall at each action level under them, and which share of the
answerable and of the unanswerable questions gets each action.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from isotope import Isotope, evaluation
from isotope.retrieval import MODES, action

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "eval" / "squad-dev"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=300)
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
    print("| mode | deliver/refine | action | share % | R@1 | R@5 | answerable % | "
          "unanswerable % |")
    print("|---|---|---|---|---|---|---|---|")
    with Isotope.open(index, create=False) as iso:
        search = evaluation.searcher(iso)
        for mode in MODES:
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
