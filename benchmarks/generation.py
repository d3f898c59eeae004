"""Question generation throughput of the local model, mode against mode, in one run.

    .venv/bin/python benchmarks/generation.py [--passages 50] [--modes atom,chunk,batched]

A mode followed by ``+graph`` (``batched+graph``) also asks for each chunk's entities and
relations (setting ``graph``); its time is then given against the same mode without it.

Each passage of ../shared/eval/squad-dev is one chunk, and each block of ``--block``
passages one document (a source of several chunks, as a real file is, so a mode may work
on several chunks at once). Every mode has its own fresh index (cache off) and its own
loaded model; the blocks are fed to the modes in turn (the order of the modes rotating),
so a load that comes and goes on a shared machine weighs on every mode alike. The table
gives seconds per passage, questions per second, model calls and tokens per passage, and
the share of generated questions the filters kept, with ratios against mode ``atom`` (one
call per atom); then the quality of each mode's questions, as retrieval on the passages'
SQuAD questions.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from isotope import Chunk, Isotope
from isotope.search import evaluation

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "eval" / "squad-dev"
OUT = ROOT / "benchmarks" / "out"
SUMMED = ("questions_generated", "questions", "llm_calls", "prompt_tokens",
          "completion_tokens", "atoms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=50)
    parser.add_argument("--modes", default="atom,chunk,batched")
    parser.add_argument("--block", type=int, default=10, help="passages per document")
    args = parser.parse_args()
    passages = [json.loads(line) for line in (DATA / "passages.jsonl").open()][: args.passages]
    chunks = [Chunk(text=p["text"], source=f"squad-block:{i // args.block}")
              for i, p in enumerate(passages)]
    blocks = [chunks[i : i + args.block] for i in range(0, len(chunks), args.block)]
    modes = args.modes.split(",")
    indexes: dict[str, Isotope] = {}
    for mode in modes:
        index = OUT / f"generation-{mode}"
        shutil.rmtree(index, ignore_errors=True)
        indexes[mode] = Isotope.open(index, generation=mode.split("+")[0], cache=False,
                                     graph=mode.endswith("+graph"))
        indexes[mode].llm().complete([{"role": "user", "content": "hi"}], max_tokens=1)  # load
    totals = {mode: Counter[str]() for mode in modes}
    seconds = dict.fromkeys(modes, 0.0)
    generate = dict.fromkeys(modes, 0.0)
    failed = dict.fromkeys(modes, 0)
    for p, block in enumerate(blocks):
        for mode in modes[p % len(modes):] + modes[: p % len(modes)]:
            started = time.perf_counter()
            report = indexes[mode].ingest_chunks(block)
            seconds[mode] += time.perf_counter() - started
            generate[mode] += report.timings["generate"]
            failed[mode] += len(report.failed_atoms)
            totals[mode].update({k: getattr(report, k) for k in SUMMED})
        done = sum(len(b) for b in blocks[: p + 1])
        print(f"passages {done}/{len(chunks)}: " + ", ".join(
            f"{m} {seconds[m] / done:.1f} s/passage" for m in modes), file=sys.stderr)
    quality = _retrieval(indexes, passages)
    graphs = {mode: (len(iso.entities(1_000_000)), len(iso.store.relations()))
              for mode, iso in indexes.items() if mode.endswith("+graph")}
    model = next(iter(indexes.values())).settings.question_model
    for iso in indexes.values():
        iso.close()
    n = len(chunks)
    rows = []
    for mode in modes:
        t = totals[mode]
        rows.append({
            "mode": mode, "s/passage": seconds[mode] / n,
            "generate s/passage": generate[mode] / n,
            "questions/s": t["questions_generated"] / generate[mode],
            "calls/passage": t["llm_calls"] / n,
            "prompt tok/passage": t["prompt_tokens"] / n,
            "completion tok/passage": t["completion_tokens"] / n,
            "questions/passage": t["questions_generated"] / n,
            "kept/passage": t["questions"] / n,
            "kept %": 100 * t["questions"] / max(1, t["questions_generated"]),
            "failed atoms": failed[mode],
        })
    base = next((r for r in rows if r["mode"] == "atom"), rows[0])
    for row in rows:
        row["speed-up (questions/s)"] = row["questions/s"] / base["questions/s"]
        row["speed-up (kept/s)"] = (row["kept/passage"] / row["generate s/passage"]) / (
            base["kept/passage"] / base["generate s/passage"])
    header = list(rows[0])
    atoms = totals[modes[0]]["atoms"]
    print(f"\nQuestion generation, {n} passages ({atoms} atoms), model {model} (the "
          "question_model setting of this run), "
          f"cache off, documents of {args.block} passages, modes interleaved")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(
            f"{v:.2f}" if isinstance(v, float) else str(v) for v in row.values()) + " |")
    by_mode = {r["mode"]: r for r in rows}
    for mode, (entities, relations) in graphs.items():
        plain, ours = by_mode.get(mode.removesuffix("+graph")), by_mode[mode]
        print(f"\n{mode}: {entities} entities, {relations} relations"
              f" ({entities / n:.1f} and {relations / n:.1f} per passage)" + (
                  "; against the same mode without the graph: ingest "
                  f"{ours['s/passage'] / plain['s/passage']:.2f}x, generation "
                  f"{ours['generate s/passage'] / plain['generate s/passage']:.2f}x, "
                  "completion tokens "
                  f"{ours['completion tok/passage'] / plain['completion tok/passage']:.2f}x"
                  if plain else ""))
    print("\nQuestion quality: retrieval on the same passages with their SQuAD questions")
    print("| generation | questions-dense R@1 | R@5 | MRR@10 | hybrid R@1 | R@5 |")
    print("|---|---|---|---|---|---|")
    for mode, (dense, hybrid) in quality.items():
        print(f"| {mode} | {dense.recall[1]:.1f} | {dense.recall[5]:.1f} | {dense.mrr:.1f} | "
              f"{hybrid.recall[1]:.1f} | {hybrid.recall[5]:.1f} |")


def _retrieval(indexes: dict[str, Isotope], passages: list[dict[str, Any]]
               ) -> dict[str, list[evaluation.ModeScores]]:
    """questions-dense and hybrid scores of each mode's index (chunks are matched to
    their passage by text, as the benchmark's sources are documents of passages)."""
    _, queries = evaluation.load(DATA / "passages.jsonl", DATA / "queries.jsonl",
                                 len(passages))
    pid_of = {p["text"]: str(p["pid"]) for p in passages}
    out = {}
    for mode, iso in indexes.items():
        search = evaluation.searcher(iso, lambda chunk: pid_of[chunk.text])
        out[mode] = evaluation.evaluate(search, queries, ["questions-dense", "hybrid"])
    return out


if __name__ == "__main__":
    main()
