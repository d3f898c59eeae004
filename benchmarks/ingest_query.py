"""Ingest and query benchmark on the first N passages of ../shared/eval/squad-dev.

    .venv/bin/python benchmarks/ingest_query.py [--passages 100] [--reuse]

Prints, as tables:
- ingest seconds per passage split by stage (atomize, generate, embed, store), against a
  baseline measured in the same run: the same passages chunk-embedded and stored with no
  language model;
- query latency p50/p95 of `--raw` queries in process (embedding + search) and of the
  search alone (after embedding), against exact chunk search over the same index;
- wall time of `isotope query --raw` as a fresh process, against a bare interpreter start;
- Recall@1/@5 and MRR@10 of the question index against chunk embeddings (a preview; the
  full evaluation is `isotope eval`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from isotope import Chunk, Isotope, Progress
from isotope.stores import SourceBatch

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "eval" / "squad-dev"
OUT = ROOT / "benchmarks" / "out"


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q))


def table(title: str, header: list[str], rows: list[list[str]]) -> None:
    print(f"\n{title}")
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=100)
    parser.add_argument("--reuse", action="store_true", help="reuse an index built before")
    args = parser.parse_args()
    if not DATA.is_dir():
        sys.exit(f"benchmark data not found at {DATA}")
    passages = [json.loads(line) for line in (DATA / "passages.jsonl").open()][: args.passages]
    pids = {p["pid"] for p in passages}
    queries = [q for q in map(json.loads, (DATA / "queries.jsonl").open()) if q["gold_pid"] in pids]
    index = OUT / f"index-{args.passages}"
    chunks = [Chunk(text=p["text"], source=f"squad:{p['pid']}") for p in passages]

    timings: dict[str, float] = {}
    if not (args.reuse and index.exists()):
        shutil.rmtree(index, ignore_errors=True)
        with Isotope.open(index, cache=False) as iso:
            started = time.perf_counter()
            last = [started]

            def progress(p: Progress) -> None:
                now = time.perf_counter()
                if now - last[0] > 30:
                    last[0] = now
                    print(f"  {p.sources_done}/{p.sources_total} passages, "
                          f"{p.questions} questions, {now - started:.0f} s", file=sys.stderr)

            report = iso.ingest_chunks(chunks, progress=progress)
            timings = dict(report.timings)
            timings["total"] = time.perf_counter() - started
            (index / "ingest.json").write_text(json.dumps({
                "timings": timings, "atoms": report.atoms, "questions": report.questions,
                "generated": report.questions_generated, "llm_calls": report.llm_calls,
            }))
    saved = json.loads((index / "ingest.json").read_text())
    timings = saved["timings"]

    # Baseline: chunks only, no language model (embed + store).
    baseline_dir = OUT / "baseline-chunks"
    shutil.rmtree(baseline_dir, ignore_errors=True)
    with Isotope.open(baseline_dir, cache=False) as base:
        started = time.perf_counter()
        vectors = base.embedder.embed([c.text for c in chunks])
        embed_s = time.perf_counter() - started
        started = time.perf_counter()
        empty = np.zeros((0, base.embedder.dim), dtype=np.float32)
        for chunk, vector in zip(chunks, vectors, strict=True):
            from isotope.models import Source

            base.store.add(SourceBatch(Source(uri=chunk.source, loader="chunks"), [chunk], [],
                                       [], vector[None, :], empty, empty))
        store_s = time.perf_counter() - started
    n = len(passages)
    rows = []
    for stage in ("atomize", "generate", "embed", "store"):
        rows.append([stage, f"{timings[stage] / n:.3f}"])
    rows.append(["total (wall)", f"{timings['total'] / n:.3f}"])
    table(
        f"Ingest, seconds per passage ({n} passages, {saved['atoms']} atoms, "
        f"{saved['llm_calls']} LLM calls, {saved['questions']} questions kept of "
        f"{saved['generated']})",
        ["stage", "s/passage"], rows,
    )
    table("Baseline ingest: chunk embeddings only, no language model", ["stage", "s/passage"],
          [["embed", f"{embed_s / n:.4f}"], ["store", f"{store_s / n:.4f}"],
           ["ratio isotope/baseline", f"{timings['total'] / (embed_s + store_s):.0f}x"]])

    with Isotope.open(index, create=False) as iso:
        iso.search("warm up", 5)
        iso.store.search("chunks", iso.embedder.embed_one("warm up"), 5)
        total, search, chunk_search = [], [], []
        hits_q, hits_c = [], []
        for q in queries:
            started = time.perf_counter()
            response = iso.search(q["question"], 10)
            total.append(time.perf_counter() - started)
            search.append(response.timings["search"])
            vector = iso.embedder.embed_one(q["question"])
            started = time.perf_counter()
            found = iso.store.search("chunks", vector, 10)
            chunk_search.append(time.perf_counter() - started)
            hits_q.append([r.chunk.source for r in response.results])
            hits_c.append([iso.store.get_chunks([h.chunk_id])[h.chunk_id].source for h in found])
        counts = iso.store.counts()
    ms = 1000
    table(
        f"Query latency in process ({len(queries)} queries; {counts['questions']} questions, "
        f"{counts['chunks']} chunks indexed)",
        ["measure", "p50 ms", "p95 ms"],
        [
            ["search --raw (embed + search)", f"{percentile(total, 50) * ms:.2f}",
             f"{percentile(total, 95) * ms:.2f}"],
            ["question search alone", f"{percentile(search, 50) * ms:.3f}",
             f"{percentile(search, 95) * ms:.3f}"],
            ["baseline: chunk vector search", f"{percentile(chunk_search, 50) * ms:.3f}",
             f"{percentile(chunk_search, 95) * ms:.3f}"],
            ["ratio question/chunk search",
             f"{percentile(search, 50) / percentile(chunk_search, 50):.1f}x", ""],
        ],
    )

    fresh, bare = [], []
    for _ in range(7):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "isotope", "query", queries[0]["question"],
                        "--raw", "--index", str(index)], check=True, capture_output=True)
        fresh.append(time.perf_counter() - started)
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare.append(time.perf_counter() - started)
    table("Fresh process `isotope query --raw` (7 runs, model load included)",
          ["measure", "p50 s", "max s"],
          [["isotope query --raw", f"{statistics.median(fresh):.2f}", f"{max(fresh):.2f}"],
           ["baseline: python -c pass", f"{statistics.median(bare):.2f}", f"{max(bare):.2f}"]])

    def recall(hits: list[list[str]], k: int) -> float:
        return 100 * sum(f"squad:{q['gold_pid']}" in h[:k] for q, h in zip(queries, hits,
                                                                           strict=True)) / len(hits)

    def mrr(hits: list[list[str]]) -> float:
        total_rr = 0.0
        for q, h in zip(queries, hits, strict=True):
            gold = f"squad:{q['gold_pid']}"
            total_rr += 1 / (h.index(gold) + 1) if gold in h[:10] else 0
        return 100 * total_rr / len(hits)

    table("Retrieval preview on the same passages (baseline: chunk embeddings)",
          ["mode", "R@1", "R@5", "MRR@10"],
          [["questions-dense (isotope)", f"{recall(hits_q, 1):.1f}", f"{recall(hits_q, 5):.1f}",
            f"{mrr(hits_q):.1f}"],
           ["chunks-dense (baseline)", f"{recall(hits_c, 1):.1f}", f"{recall(hits_c, 5):.1f}",
            f"{mrr(hits_c):.1f}"]])


if __name__ == "__main__":
    main()
