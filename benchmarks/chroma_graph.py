"""Chroma's graph alone at scale: recall@10 and latency of its search, unfiltered and
for someone who may see 1% and 10%, against an exact search, for graph settings and
search breadths (issue 45's floor at a million questions).

    ISOTOPE_BENCH_DIR=/tmp/bench-scale .venv/bin/python benchmarks/chroma_graph.py \\
        --questions 1000000 --max-neighbors 16 --ef-construction 100 --breadths 100,800

The question vectors of the scale benchmark's index (``benchmarks/scale.py``, built first
if it is not there; float32 recomputed from their markers, stored at float16 as isotope
logs them) go straight into one embedded Chroma collection (cosine, the given
``max_neighbors`` and ``ef_construction``; the build is timed), each with its source's
group as ``benchmarks/access.py`` gives them (``g`` = 0..99). Then, for each breadth
(``ef_search``), a fresh process (Chroma keeps a loaded graph's breadth for the process's
life) runs ``--queries`` stand-in queries with no filter, with ``g $in [7]`` (1 %) and
``g $in [0..9]`` (10 %), comparing each top 10 by row with the exact top 10 of what the
filter lets through. Faster to rebuild than ``benchmarks/chroma.py`` (no atoms, chunks or
keyword index) but it is Chroma's graph alone, not isotope's search through it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scale

SHARES = {"all": None, "1%": [7], "10%": list(range(10))}


def vectors(questions: int, work: Path) -> None:
    """The index's question vectors, groups, rows and query vectors, saved in ``work``."""
    synthesis = scale.Synthesis(scale.real_bank())
    with scale.open_index(scale.built_index(synthesis, questions), synthesis) as iso:
        conn = iso.store._conn()  # type: ignore[attr-defined]
        synthesis.atoms = iso.store.counts()["atoms"]
        uris = sorted(r[0] for r in conn.execute("SELECT uri FROM sources"))
        group = {u: n % 100 for n, u in enumerate(uris)}
        rows = conn.execute("SELECT q.rowid, c.source, q.text FROM questions q JOIN chunks c "
                            "ON c.id = q.chunk_id ORDER BY q.rowid").fetchall()
    found = np.empty((len(rows), 384), dtype=np.float32)
    for i, (_, _, text) in enumerate(rows):
        found[i] = synthesis.vector(text)
    np.save(work / "vectors.npy", found)
    np.save(work / "groups.npy", np.array([group[u] for _, u, _ in rows]))
    np.save(work / "rows.npy", np.array([r[0] for r in rows]))
    np.save(work / "queries.npy",
            np.stack([synthesis.vector(synthesis.query_text(i)) for i in range(200)]))


def build(work: Path, max_neighbors: int, ef_construction: int) -> float:
    """The collection, built; returns the vectors added per second."""
    import chromadb

    found = np.load(work / "vectors.npy").astype(np.float16).astype(np.float32)
    groups, rows = np.load(work / "groups.npy"), np.load(work / "rows.npy")
    client = chromadb.PersistentClient(path=str(work / "chroma"))
    collection = client.create_collection("questions", configuration={"hnsw": {
        "space": "cosine", "max_neighbors": max_neighbors,
        "ef_construction": ef_construction}})
    started = time.perf_counter()
    for at in range(0, len(rows), 5000):
        collection.add(ids=[str(r) for r in rows[at:at + 5000]],
                       embeddings=found[at:at + 5000],
                       metadatas=[{"g": int(g)} for g in groups[at:at + 5000]])
        if at % 100_000 == 0:
            print(f"  {at:,} added, {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return len(rows) / (time.perf_counter() - started)


def search(work: Path, breadth: int, queries: int) -> dict[str, dict[str, float]]:
    """Recall@10 and p50 ms per share at ``breadth`` (run in a process of its own)."""
    import chromadb

    found = np.load(work / "vectors.npy")
    groups, rows = np.load(work / "groups.npy"), np.load(work / "rows.npy")
    asked = np.load(work / "queries.npy")[:queries]
    client = chromadb.PersistentClient(path=str(work / "chroma"))
    client.get_collection("questions").modify(configuration={"hnsw": {"ef_search": breadth}})
    collection = client.get_collection("questions")
    said = {}
    for share, allowed in SHARES.items():
        mask = np.isin(groups, allowed) if allowed else np.ones(len(rows), dtype=bool)
        seen, seen_rows = found[mask], rows[mask]
        recalls, times = [], []
        for query in asked:
            truth = set(seen_rows[np.argsort(-(seen @ query))[:10]].tolist())
            started = time.perf_counter()
            reply = collection.query(query_embeddings=[query], n_results=10,
                                     where={"g": {"$in": allowed}} if allowed else None,
                                     include=["distances"])
            times.append(time.perf_counter() - started)
            recalls.append(len(truth & {int(i) for i in reply["ids"][0]}) / 10)
        said[share] = {"recall_at_10": round(float(np.mean(recalls)), 3),
                       "p50_ms": scale.ms(times, 50)}
    return said


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--max-neighbors", type=int, default=16)
    parser.add_argument("--ef-construction", type=int, default=100)
    parser.add_argument("--breadths", default="100,200,800")
    parser.add_argument("--keep", action="store_true", help="keep the collection")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--search", type=int, help=argparse.SUPPRESS)  # (the child process)
    args = parser.parse_args()
    work = scale.WORK / (f"chroma-graph-{args.questions}-{args.max_neighbors}-"
                         f"{args.ef_construction}")
    if args.search:
        print(json.dumps(search(work, args.search, args.queries)))
        return
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        vectors(args.questions, work)
        said: dict[str, object] = {
            "questions": len(np.load(work / "rows.npy")), "max_neighbors": args.max_neighbors,
            "ef_construction": args.ef_construction,
            "build_vectors_per_s": round(build(work, args.max_neighbors,
                                               args.ef_construction))}
        for breadth in (int(b) for b in args.breadths.split(",")):
            child = subprocess.run(
                [sys.executable, __file__, "--questions", str(args.questions),
                 "--queries", str(args.queries), "--max-neighbors", str(args.max_neighbors),
                 "--ef-construction", str(args.ef_construction), "--search", str(breadth)],
                check=True, capture_output=True, text=True)
            said[f"breadth_{breadth}"] = json.loads(child.stdout)
            print(f"  breadth {breadth}: {child.stdout.strip()}", file=sys.stderr)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(said, indent=1))
        return
    print(f"{said['questions']:,} questions, max_neighbors {args.max_neighbors}, "
          f"ef_construction {args.ef_construction}: {said['build_vectors_per_s']} vectors/s")
    print("| breadth | " + " | ".join(f"recall@10 {s} | p50 ms {s}" for s in SHARES) + " |")
    print("|---|" + "---|---|" * len(SHARES))
    for key, value in said.items():
        if key.startswith("breadth_"):
            cells = [f"{value[s]['recall_at_10']} | {value[s]['p50_ms']}"  # type: ignore[index]
                     for s in SHARES]
            print(f"| {key[8:]} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
