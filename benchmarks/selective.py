"""Spend generation where it pays: which atoms should get questions? (issues 17, 47)

    .venv/bin/python benchmarks/selective.py [--passages 300] [--by atoms|chunks]
        [--index benchmarks/out/quality-300-batched]

Generation time is about proportional to the atoms given questions. On the fully
enriched index of benchmarks/enrichment.py (run it first), this keeps the questions of a
share of the atoms only, chosen by a rule that needs nothing from generation, and scores
hybrid on the development questions: quality against generation spent. Rules: random;
atoms with the least distinctive words first (lowest mean idf of their content words:
keyword search finds distinctive atoms without questions); the most distinctive first
(the opposite, to check the direction); the longest atoms first; the least reachable by
chunk keyword search first (issue 47: each atom's text as a BM25 query over the chunks'
own text, how far its chunk leads the best other chunk, relative to its score; a chunk
by the mean over its atoms). Each point is a copy of the index with the other atoms'
questions deleted, and their text taken out of their chunk's keyword text. With ``--by
chunks`` the rules choose whole chunks, and the others are marked as waiting for
questions, so that the fusion scores them without the question signals (as a selective
ingest would store them).
"""

from __future__ import annotations

import argparse
import math
import random
import re
import shutil
import sqlite3
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

from isotope import Isotope
from isotope.ingest.questions import STOPWORDS
from isotope.search import evaluation
from isotope.stores.schema_steps import _QUESTIONS_TEXT_SQLITE

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "eval" / "squad-dev"
OUT = ROOT / "benchmarks" / "out"
CACHE = ROOT / "benchmarks" / "cache"


def tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def words(text: str) -> set[str]:
    return {w for w in tokens(text) if w not in STOPWORDS}


def keyword_lead(chunks: dict[str, str], atoms: list[tuple[str, str, str]]) -> dict[str, float]:
    """Each atom's (id, chunk id, text) lead under BM25 over the chunks' text (k1 1.2, b
    0.75): its own chunk's score less the best other chunk's, over its own chunk's score
    (1: only its chunk has its words; 0 or less: keyword search does not put it first)."""
    bags = {c: Counter(tokens(t)) for c, t in chunks.items()}
    mean = sum(b.total() for b in bags.values()) / len(bags)
    weight: dict[str, dict[str, float]] = defaultdict(dict)  # word -> chunk -> its BM25 term
    for c, b in bags.items():
        norm = 1.2 * (0.25 + 0.75 * b.total() / mean)
        for w, tf in b.items():
            weight[w][c] = tf * 2.2 / (tf + norm)
    lead = {}
    for atom, chunk, text in atoms:
        scores: dict[str, float] = defaultdict(float)
        for w in words(text):
            idf = math.log(1 + (len(bags) - len(weight[w]) + 0.5) / (len(weight[w]) + 0.5))
            for c, term in weight.get(w, {}).items():
                scores[c] += idf * term
        own = scores.pop(chunk, 0.0)
        lead[atom] = (own - max(scores.values(), default=0.0)) / own if own else -1.0
    return lead


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=300)
    parser.add_argument("--shares", default="0.25,0.5,0.75")
    parser.add_argument("--by", choices=("atoms", "chunks"), default="atoms")
    parser.add_argument("--index", type=Path, default=None,
                        help="an enriched index of these passages (default: "
                        "benchmarks/out/enrichment-N, from benchmarks/enrichment.py)")
    args = parser.parse_args()
    _, queries = evaluation.load(DATA / "passages.jsonl", DATA / "queries.jsonl",
                                 args.passages)
    index = args.index or OUT / f"enrichment-{args.passages}"
    conn = sqlite3.connect(index / "isotope.db")
    chunk_text = dict(conn.execute("SELECT id, text FROM chunks").fetchall())
    with_questions = conn.execute(
        "SELECT a.id, a.chunk_id, a.text FROM atoms a WHERE EXISTS "
        "(SELECT 1 FROM questions q WHERE q.atom_id = a.id)").fetchall()
    conn.close()
    lead = keyword_lead(chunk_text, with_questions)
    if args.by == "atoms":
        atoms = [(a, t) for a, _, t in with_questions]
    else:  # (named atoms below: the units chosen; a chunk's lead the mean of its atoms')
        atoms = list(chunk_text.items())
        of_chunk: dict[str, list[float]] = defaultdict(list)
        for a, c, _ in with_questions:
            of_chunk[c].append(lead[a])
        lead = {c: sum(v) / len(v) for c, v in of_chunk.items()}
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
        "least reachable by keywords first": [
            a for a, t in sorted(atoms, key=lambda a: lead.get(a[0], 1.0))],
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
                db.execute(_QUESTIONS_TEXT_SQLITE)  # (the keyword text keeps the rest's)
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
