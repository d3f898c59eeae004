"""Spend generation where it pays: which atoms should get questions? (issue 17)

    .venv/bin/python benchmarks/selective.py [--passages 300] [--by atoms|chunks]

Generation time is about proportional to the atoms given questions. On the fully
enriched index of benchmarks/enrichment.py (run it first), this keeps the questions of a
share of the atoms only, chosen by a rule that needs nothing from generation, and scores
hybrid on the development questions: quality against generation spent. Rules: random;
atoms with the least distinctive words first (lowest mean idf of their content words:
keyword search finds distinctive atoms without questions); the most distinctive first
(the opposite, to check the direction); the longest atoms first. Each point is a copy of
the index with the other atoms' questions deleted. With ``--by chunks`` the rules choose
whole chunks, and the others are marked as waiting for questions, so that the fusion
scores them without the question signals (as a selective ingest would store them).
"""

from __future__ import annotations

import argparse
import math
import random
import re
import shutil
import sqlite3
import tempfile
from collections import Counter
from pathlib import Path

from isotope import Isotope
from isotope.ingest.questions import STOPWORDS
from isotope.search import evaluation

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "eval" / "squad-dev"
OUT = ROOT / "benchmarks" / "out"
CACHE = ROOT / "benchmarks" / "cache"


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9']+", text.lower()) if w not in STOPWORDS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=300)
    parser.add_argument("--shares", default="0.25,0.5,0.75")
    parser.add_argument("--by", choices=("atoms", "chunks"), default="atoms")
    args = parser.parse_args()
    _, queries = evaluation.load(DATA / "passages.jsonl", DATA / "queries.jsonl",
                                 args.passages)
    index = OUT / f"enrichment-{args.passages}"
    conn = sqlite3.connect(index / "isotope.db")
    if args.by == "atoms":
        atoms = conn.execute("SELECT a.id, a.text FROM atoms a WHERE EXISTS "
                             "(SELECT 1 FROM questions q WHERE q.atom_id = a.id)").fetchall()
    else:  # (named atoms below: the units chosen)
        atoms = conn.execute("SELECT id, text FROM chunks").fetchall()
    conn.close()
    df = Counter(w for _, text in atoms for w in words(text))

    def idf(text: str) -> float:
        found = words(text)
        return sum(math.log(len(atoms) / df[w]) for w in found) / max(1, len(found))

    rng = random.Random(3)
    shuffled = [a for a, _ in atoms]
    rng.shuffle(shuffled)
    rules = {
        "random": shuffled,
        "least distinctive first": [a for a, t in sorted(atoms, key=lambda a: idf(a[1]))],
        "most distinctive first": [a for a, t in sorted(atoms, key=lambda a: -idf(a[1]))],
        "longest first": [a for a, t in sorted(atoms, key=lambda a: -len(a[1]))],
    }
    print(f"{len(atoms)} {args.by} with questions; hybrid on {len(queries)} questions")
    print(f"| rule | share of {args.by} with questions | R@1 | R@5 | MRR@10 |")
    print("|---|---|---|---|---|")
    for share in [0.0, *(float(s) for s in args.shares.split(",")), 1.0]:
        for name, order in rules.items():
            if share in (0.0, 1.0) and name != "random":
                continue
            dropped = order[round(share * len(order)):]
            with tempfile.TemporaryDirectory() as tmp:
                copy = Path(tmp) / "index"
                shutil.copytree(index, copy)
                db = sqlite3.connect(copy / "isotope.db")
                db.execute("CREATE TEMP TABLE gone(id TEXT PRIMARY KEY)")
                db.executemany("INSERT INTO gone VALUES (?)", [(a,) for a in dropped])
                if args.by == "atoms":
                    db.execute("DELETE FROM questions WHERE atom_id IN (SELECT id FROM gone)")
                else:
                    db.execute("DELETE FROM questions WHERE chunk_id IN (SELECT id FROM gone)")
                    db.execute("UPDATE chunks SET enriched = 0 WHERE id IN (SELECT id FROM gone)")
                db.commit()
                db.close()
                with Isotope.open(copy, cache_dir=CACHE, create=False) as iso:
                    score = evaluation.evaluate(evaluation.searcher(iso), queries,
                                                ["hybrid"])[0]
            label = name if 0.0 < share < 1.0 else ("none" if share == 0 else "all")
            print(f"| {label} | {share:.2f} | {score.recall[1]:.1f} | {score.recall[5]:.1f} "
                  f"| {score.mrr:.1f} |", flush=True)


if __name__ == "__main__":
    main()
