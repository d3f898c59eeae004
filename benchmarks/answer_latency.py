"""``ask`` latency with no cached replies: the p50 of the whole ask (search and answer) and
of the first piece of the reply after the results, over the first N of the development
questions answers.py uses, one after another, after one warm-up answer.

    .venv/bin/python benchmarks/answer_latency.py [N] [--index benchmarks/out/quality-300-batched]
        [--without-check]

``--without-check``: the same questions asked, in the same run and alternately, by a
second index object whose model gives no P(yes) (the answer judged by its words alone, as
before issue 65), each with its own empty cache and its own copy of the model: the
answer check's cost, measured beside its baseline. To compare with another commit, run
the same file with that commit's source first on the path
(``PYTHONPATH=/path/to/worktree/src``): the index and the questions are the same.
Needs the index quality.py builds (``benchmarks/quality.py --passages 300``)."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from contextlib import ExitStack
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
    parser.add_argument("--without-check", action="store_true",
                        help="also time each question without the answer check (alternately)")
    args = parser.parse_args()
    _, queries = evaluation.load(DATA / "passages.jsonl", DATA / "queries.jsonl", 300)
    queries = answer_eval.pick(queries, args.count)
    runs = ["with the check", *(["without it"] if args.without_check else [])]
    totals: dict[str, list[float]] = {run: [] for run in runs}
    firsts: dict[str, list[float]] = {run: [] for run in runs}
    with ExitStack() as stack:
        isos = {}
        for run in runs:
            cache = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            isos[run] = stack.enter_context(Isotope.open(args.index, create=False,
                                                         cache_dir=cache))
            if run == "without it":
                isos[run].answer_llm().inner.yes_probability = (  # type: ignore[method-assign]
                    lambda prompt: None)
            isos[run].answer(isos[run].search("warm up the model", 3))
        for query in queries:
            for run, iso in isos.items():
                start, marks = time.perf_counter(), list[float]()
                mark = marks.append
                found = iso.search(query["question"], iso.settings.answer_k)
                shown = time.perf_counter()
                iso.answer(found, on_token=lambda _, mark=mark: mark(  # type: ignore[misc]
                    time.perf_counter()))
                totals[run].append(time.perf_counter() - start)
                firsts[run].append(marks[0] - shown if marks else float("nan"))
    print("| run | questions | ask p50 s | first piece after the results p50 s |")
    print("|---|---|---|---|")
    for run in runs:
        print(f"| {run} | {len(totals[run])} | {statistics.median(totals[run]):.2f} | "
              f"{statistics.median(firsts[run]):.2f} |")
    if args.without_check:
        ratio = statistics.median(totals["with the check"]) / statistics.median(
            totals["without it"])
        print(f"ask p50 with the check / without it: {ratio:.2f}x")


if __name__ == "__main__":
    main()
