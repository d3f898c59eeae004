"""Question generation throughput of the local model, mode against mode, in one run.

    .venv/bin/python benchmarks/generation.py [--passages 50] [--modes atom,chunk,batched]

Each passage of ../shared/eval/squad-dev is one chunk. For every mode a fresh index is
built with the cache off, and the table gives seconds per passage, questions per second,
model calls and tokens per passage, and the share of generated questions the filters
kept (quality proxy), with ratios against mode ``atom`` (one call per atom).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from isotope import Chunk, Isotope

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "eval" / "squad-dev"
OUT = ROOT / "benchmarks" / "out"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=50)
    parser.add_argument("--modes", default="atom,chunk,batched")
    args = parser.parse_args()
    passages = [json.loads(line) for line in (DATA / "passages.jsonl").open()][: args.passages]
    chunks = [Chunk(text=p["text"], source=f"squad:{p['pid']}") for p in passages]
    rows = []
    for mode in args.modes.split(","):
        index = OUT / f"generation-{mode}"
        shutil.rmtree(index, ignore_errors=True)
        with Isotope.open(index, generation=mode, cache=False) as iso:
            iso.llm().complete([{"role": "user", "content": "hi"}], max_tokens=1)  # load
            started = time.perf_counter()
            report = iso.ingest_chunks(chunks)
            seconds = time.perf_counter() - started
        generate = report.timings["generate"]
        rows.append({
            "mode": mode, "s/passage": seconds / len(chunks),
            "generate s/passage": generate / len(chunks),
            "questions/s": report.questions_generated / generate,
            "calls/passage": report.llm_calls / len(chunks),
            "prompt tok/passage": report.prompt_tokens / len(chunks),
            "completion tok/passage": report.completion_tokens / len(chunks),
            "questions/passage": report.questions_generated / len(chunks),
            "kept %": 100 * report.questions / max(1, report.questions_generated),
            "failed atoms": len(report.failed_atoms),
        })
        print(f"{mode}: done in {seconds:.0f} s", file=sys.stderr)
    base = next((r for r in rows if r["mode"] == "atom"), rows[0])
    for row in rows:
        row["speed-up (questions/s)"] = row["questions/s"] / base["questions/s"]
    header = list(rows[0])
    print(f"\nQuestion generation, {len(chunks)} passages, local Qwen2.5-Coder-1.5B, cache off")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(
            f"{v:.2f}" if isinstance(v, float) else str(v) for v in row.values()) + " |")


if __name__ == "__main__":
    main()
