"""Can two entity names be merged because their embeddings are near (issue 46: "embedding
similarity of names above a measured threshold")? The precision of that rule, by
threshold, on hand-labelled pairs of names.

    .venv/bin/python benchmarks/graph_names.py [--embedder local/multilingual-e5-small] [--json]

``benchmarks/data/entity_name_pairs.jsonl`` holds every pair of entity names (each entity
by its most frequent name) whose MiniLM cosine is at least 0.85 in the two-hop
benchmark's graph index (``graph-144-later-graph``, 698 entities) and at least 0.90 in the
dev-300 graph index (``quality-300-batched-graph``, 1,160 entities), each labelled by hand
``same`` when the two names are one thing of the corpus (labelled generously: a plural, a
title or a first name added counts as the same: "Catholic"/"Catholics", "King Malcolm
III of Scotland"/"Malcolm III of Scotland"). For each threshold the table gives the
labelled pairs at or above it (by the embedder chosen, measured in this run) and the share
that are the same thing; ``numbers equal`` keeps only pairs whose digits and Roman
numerals agree ("Super Bowl XLVII"/"Super Bowl XLVIII", "BWV 38"/"BWV 62" dropped). The
pairs at or above 0.90 are every such pair of both indexes under MiniLM; below that the
dev-300 index's are not labelled (the shares there are of the two-hop index's pairs).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np

from isotope.embedders import create
from isotope.settings import ModelSettings

PAIRS = Path(__file__).resolve().parent / "data" / "entity_name_pairs.jsonl"
THRESHOLDS = (0.95, 0.93, 0.90, 0.88, 0.85)
_NUMERAL = re.compile(r"\b(?:\d+|[IVXLC]+)\b")


def numbers(name: str) -> set[str]:
    """The digits and Roman numerals of a name ("Super Bowl XLVII": XLVII)."""
    return set(_NUMERAL.findall(name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embedder", default="local/all-minilm-l6-v2")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    pairs = [json.loads(line) for line in PAIRS.read_text().splitlines() if line.strip()]
    embedder = create(args.embedder, ModelSettings())
    a = embedder.embed([p["a"] for p in pairs])
    b = embedder.embed([p["b"] for p in pairs])
    cosine = np.einsum("ij,ij->i", a, b)
    rows = []
    for threshold in THRESHOLDS:
        above = [p for p, c in zip(pairs, cosine, strict=True) if c >= threshold]
        kept = [p for p in above if numbers(p["a"]) == numbers(p["b"])]
        rows.append({
            "threshold": threshold, "pairs": len(above),
            "same": round(sum(p["same"] for p in above) / len(above), 3) if above else None,
            "pairs_numbers_equal": len(kept),
            "same_numbers_equal": (round(sum(p["same"] for p in kept) / len(kept), 3)
                                   if kept else None)})
    if args.json:
        print(json.dumps({"embedder": args.embedder, "labelled": len(pairs),
                          "labelled_same": sum(p["same"] for p in pairs), "rows": rows}))
        return
    print(f"{len(pairs)} labelled pairs ({sum(p['same'] for p in pairs)} the same thing), "
          f"cosine by {args.embedder}")
    print(f"{'cosine >=':>10} {'pairs':>6} {'same':>6} {'pairs (numbers equal)':>22} "
          f"{'same':>6}")
    for r in rows:
        def share(x: float | None) -> str:
            return "-" if x is None else f"{100 * x:.0f}%"
        print(f"{r['threshold']:>10.2f} {r['pairs']:>6} {share(r['same']):>6} "
              f"{r['pairs_numbers_equal']:>22} {share(r['same_numbers_equal']):>6}")


if __name__ == "__main__":
    main()
