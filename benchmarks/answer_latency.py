"""``ask`` latency with no cached replies: the p50 of the whole ask (search and answer) and
of the first piece of the reply after the results, over the first N of the development
questions answers.py uses, one after another, after one warm-up answer.

    .venv/bin/python benchmarks/answer_latency.py [N] [--index benchmarks/out/quality-300-batched]

To compare with another commit, run the same file with that commit's source first on the
path (``PYTHONPATH=/path/to/worktree/src``): the index and the questions are the same.
Needs the index quality.py builds (``benchmarks/quality.py --passages 300``)."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from isotope import Isotope
from isotope.search import answer_eval, evaluation

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "eval" / "squad-dev"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("count", type=int, nargs="?", default=30)
    parser.add_argument("--index", type=Path,
                        default=ROOT / "benchmarks" / "out" / "quality-300-batched")
    args = parser.parse_args()
    _, queries = evaluation.load(DATA / "passages.jsonl", DATA / "queries.jsonl", 300)
    queries = answer_eval.pick(queries, args.count)
    totals, firsts = [], []
    with tempfile.TemporaryDirectory() as cache, \
            Isotope.open(args.index, create=False, cache_dir=Path(cache)) as iso:
        iso.answer(iso.search("warm up the model", 3))
        for query in queries:
            start, marks = time.perf_counter(), []
            mark = marks.append
            found = iso.search(query["question"], iso.settings.answer_k)
            shown = time.perf_counter()
            iso.answer(found, on_token=lambda _, mark=mark: mark(time.perf_counter()))
            totals.append(time.perf_counter() - start)
            firsts.append(marks[0] - shown if marks else float("nan"))
    print("| questions | ask p50 s | first piece after the results p50 s |")
    print("|---|---|---|")
    print(f"| {len(totals)} | {statistics.median(totals):.2f} | "
          f"{statistics.median(firsts):.2f} |")


if __name__ == "__main__":
    main()
