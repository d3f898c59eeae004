"""Which questions pay, and how a chunk is scored from them (issue 47), without a model call.

    .venv/bin/python benchmarks/questions.py [--index benchmarks/out/quality-300-batched]
        [--embedder local/multilingual-e5-small] [--json]

Reads an index that ``benchmarks/quality.py`` built (its chunks, statements, the questions
kept and those the filters dropped, with why) and scores ``questions-dense`` under one
lever at a time: how many questions per statement (the first 1, 2, 3, 5, 10 kept of each
in the order stored, where some statement has more: each question is attributed to the
statement it is closest to, so one can hold more than were asked for it), the dropped
questions given back (each reason alone, and all), how a chunk is scored from its
questions (the best one, today; a soft maximum; the mean of the best 2 or 3; the matched
statement's own similarity added), the questions appended to their chunk's text for
keyword search (document expansion, as doc2query does: ranked by SQLite FTS5 as the index
ranks chunks, the questions in the column that holds a chunk's context), and the embedding
model. Each lever's questions-dense is also fused into ``hybrid`` (z-scores of the five
default signals, the shipped fusion) beside ``hybrid-no-questions``: what the lever brings
to the default search. Dense signals are exact (every vector compared); the keyword
signals come from the index's own BM25, but for chunks-bm25, remade here over the chunks'
text alone (an index of schema 13 or later holds its questions' text in the chunks'
keyword text too: that is the document expansion row). Ratios are against the shipped
questions-dense of the same run.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from isotope import Isotope
from isotope.embedders import Embedder, create
from isotope.search import evaluation
from isotope.search.retrieval import Candidate, fuse, keyword_query, signal
from isotope.settings import ModelSettings
from isotope.stores.keywords import query_words

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "eval" / "squad-dev"
OUT = ROOT / "benchmarks" / "out"
POOL = 50  # (the hybrid pool: retrieval.search's default)
KEYWORD = ("chunks-bm25", "atoms-bm25")


class Corpus:
    """The index's texts, the questions kept and dropped, and the queries with their
    gold chunk (rows of the chunk list)."""

    def __init__(self, index: Path) -> None:
        conn = sqlite3.connect(index / "isotope.db")
        rows = conn.execute("SELECT id, source, text FROM chunks ORDER BY rowid").fetchall()
        self.chunk_ids = [r[0] for r in rows]
        self.chunk_texts = [r[2] for r in rows]
        row_of = {r[0]: i for i, r in enumerate(rows)}
        by_source = {r[1]: i for i, r in enumerate(rows)}
        atoms = conn.execute("SELECT id, chunk_id, text FROM atoms ORDER BY rowid").fetchall()
        self.atom_texts = [a[2] for a in atoms]
        self.atom_chunk = np.array([row_of[a[1]] for a in atoms])
        atom_row = {a[0]: i for i, a in enumerate(atoms)}
        kept = conn.execute("SELECT atom_id, text FROM questions WHERE origin = 'generated' "
                            "ORDER BY rowid").fetchall()
        dropped = conn.execute("SELECT atom_id, text, reason FROM dropped_questions "
                               "ORDER BY rowid").fetchall()
        conn.close()
        known = [q for q in dropped if q[0] in atom_row]  # (not the ones disabled by hand)
        self.question_texts = [q[1] for q in kept] + [q[1] for q in known]
        self.question_atom = np.array([atom_row[q[0]] for q in kept + known])
        self.reason = ["" for _ in kept] + [q[2].split(":")[0].split(" of ")[0]
                                            for q in known]
        seen: dict[int, int] = {}
        order = []
        for atom in self.question_atom[: len(kept)]:
            seen[int(atom)] = seen.get(int(atom), 0) + 1
            order.append(seen[int(atom)])
        self.order = np.array(order + [0] * len(known))  # (1st, 2nd... kept of its atom)
        _, queries = evaluation.load(DATA / "passages.jsonl", DATA / "queries.jsonl")
        self.queries = [q for q in queries if q["gold_pid"] in by_source]
        self.gold = np.array([by_source[q["gold_pid"]] for q in self.queries])


def by_chunk(similarity: np.ndarray, chunk_of: np.ndarray, chunks: int,
             score: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Each chunk's score from its items' similarities (-inf for a chunk without items)."""
    out = np.full((similarity.shape[0], chunks), -np.inf, dtype=np.float32)
    order = np.argsort(chunk_of, kind="stable")
    bounds = np.searchsorted(chunk_of[order], np.arange(chunks + 1))
    for c in range(chunks):
        items = order[bounds[c]:bounds[c + 1]]
        if len(items):
            out[:, c] = score(similarity[:, items])
    return out


def best(s: np.ndarray) -> np.ndarray:
    return s.max(axis=1)


def soft_max(temperature: float) -> Callable[[np.ndarray], np.ndarray]:
    def score(s: np.ndarray) -> np.ndarray:
        top = s.max(axis=1, keepdims=True)
        return (top + temperature * np.log(np.exp((s - top) / temperature)
                                           .sum(axis=1, keepdims=True)))[:, 0]
    return score


def mean_of_best(n: int) -> Callable[[np.ndarray], np.ndarray]:
    def score(s: np.ndarray) -> np.ndarray:
        top = -np.sort(-s, axis=1)[:, :n]
        return top.sum(axis=1) / n  # (a chunk with fewer questions is scored lower)
    return score


def recall(scores: np.ndarray, gold: np.ndarray) -> dict[str, float]:
    top = np.argsort(-scores, axis=1)[:, :10]
    hit = top == gold[:, None]
    rank = np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, 0)
    return {"r1": round(100 * float(hit[:, 0].mean()), 1),
            "r5": round(100 * float(hit[:, :5].any(axis=1).mean()), 1),
            "mrr10": round(100 * float(np.where(rank > 0, 1 / np.maximum(rank, 1), 0).mean()),
                           1)}


def candidates(scores: np.ndarray, ids: Sequence[str]) -> list[list[Candidate]]:
    """Each query's first POOL chunks of a signal, as the fusion takes them."""
    top = np.argsort(-scores, axis=1)[:, :POOL]
    return [[Candidate(ids[c], float(row[c]), []) for c in order if np.isfinite(row[c])]
            for row, order in zip(scores, top, strict=True)]


def hybrid(signals: dict[str, list[list[Candidate]]], gold: Sequence[str]
           ) -> dict[str, float]:
    """R@1 and R@5 of the shipped fusion (z-scores, weight 0.5 each) over ``signals``."""
    first = five = 0
    for i, right in enumerate(gold):
        ranked = [c for c, _ in fuse({m: found[i] for m, found in signals.items()},
                                     dict.fromkeys(signals, 0.5))][:5]
        first += ranked[:1] == [right]
        five += right in ranked
    return {"r1": round(100 * first / len(gold), 1), "r5": round(100 * five / len(gold), 1)}


def fts5_bm25(texts: Sequence[str], extra: Sequence[str], queries: Sequence[str]
              ) -> np.ndarray:
    """Each query's BM25 against each text as the embedded index ranks chunks: SQLite FTS5
    (``porter unicode61``) over two columns, the text and ``extra`` (where the index keeps
    a chunk's context), the query's keywords OR-ed; 0 where a text matches no keyword."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(text, extra, tokenize='porter unicode61')")
    conn.executemany("INSERT INTO t(rowid, text, extra) VALUES (?, ?, ?)",
                     [(i + 1, t, e) for i, (t, e) in enumerate(zip(texts, extra, strict=True))])
    out = np.zeros((len(queries), len(texts)), dtype=np.float32)
    for i, query in enumerate(queries):
        words = query_words(keyword_query(query))
        if words:
            for row, score in conn.execute(
                    "SELECT rowid, bm25(t) FROM t WHERE t MATCH ?",
                    (" OR ".join(f'"{w}"' for w in words),)):
                out[i, row - 1] = -score
    conn.close()
    return out


def keyword_signals(index: Path, corpus: Corpus, dim: int) -> dict[str, list[list[Candidate]]]:
    zero = np.zeros(dim, dtype=np.float32)  # (keyword signals read no vector)
    with Isotope.open(index) as iso:
        return {m: [signal(iso.store, m, q["question"], zero, POOL) for q in corpus.queries]
                for m in KEYWORD}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", type=Path, default=OUT / "quality-300-batched")
    parser.add_argument("--embedder", default="local/all-minilm-l6-v2")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not (args.index / "isotope.db").exists():
        sys.exit(f"no index at {args.index}: run benchmarks/quality.py first, or give "
                 "--index")
    corpus = Corpus(args.index)
    embedder: Embedder = create(args.embedder, ModelSettings(threads=2))
    started = time.perf_counter()
    queries = embedder.embed([q["question"] for q in corpus.queries])
    questions = embedder.embed(corpus.question_texts)
    atoms = embedder.embed_documents(corpus.atom_texts)
    chunks = embedder.embed_documents(corpus.chunk_texts)
    embedded = time.perf_counter() - started
    n = len(corpus.chunk_ids)
    q_sim, a_sim, c_sim = queries @ questions.T, queries @ atoms.T, queries @ chunks.T
    by_atoms = by_chunk(a_sim, corpus.atom_chunk, n, best)
    q_chunk = corpus.atom_chunk[corpus.question_atom]
    kept = np.array([r == "" for r in corpus.reason])

    def questions_dense(select: np.ndarray, score: Callable[[np.ndarray], np.ndarray] = best,
                        atom_weight: float = 0.0) -> np.ndarray:
        sim = q_sim[:, select]
        if atom_weight:
            sim = sim + atom_weight * a_sim[:, corpus.question_atom[select]]
        return by_chunk(sim, q_chunk[select], n, score)

    levers: list[tuple[str, np.ndarray]] = [("shipped: kept questions, the best one",
                                             questions_dense(kept))]
    most = int(corpus.order.max(initial=0))  # (kept of one statement, at most)
    for first in [f for f in (1, 2, 3, 5, 10) if f < most]:
        levers.append((f"the first {first} kept per statement",
                       questions_dense(kept & (corpus.order <= first))))
    for reason in sorted({r for r in corpus.reason if r}):
        back = np.array([r in ("", reason) for r in corpus.reason])
        levers.append((f"+ dropped as {reason} ({int((np.array(corpus.reason) == reason).sum())})",
                       questions_dense(back)))
    levers.append(("+ every dropped question", questions_dense(np.ones_like(kept))))
    for temperature in (0.02, 0.05):
        levers.append((f"soft maximum, temperature {temperature}",
                       questions_dense(kept, soft_max(temperature))))
    for m in (2, 3):
        levers.append((f"mean of the best {m}", questions_dense(kept, mean_of_best(m))))
    for weight in (0.5, 1.0):
        levers.append((f"+ {weight} x the statement's similarity",
                       questions_dense(kept, atom_weight=weight)))
    base = {"chunks-dense": candidates(c_sim, corpus.chunk_ids),
            "atoms-dense": candidates(by_atoms, corpus.chunk_ids),
            **keyword_signals(args.index, corpus, embedder.dim)}
    gold = [corpus.chunk_ids[g] for g in corpus.gold]
    asked = [q["question"] for q in corpus.queries]
    of_chunk: dict[int, list[str]] = {}
    for i in np.flatnonzero(kept):
        of_chunk.setdefault(int(q_chunk[i]), []).append(corpus.question_texts[i])
    plain = fts5_bm25(corpus.chunk_texts, [""] * n, asked)
    expanded = fts5_bm25(corpus.chunk_texts, ["\n".join(of_chunk.get(c, []))
                                              for c in range(n)], asked)
    every: dict[int, list[str]] = {}
    for i in range(len(corpus.question_texts)):
        every.setdefault(int(q_chunk[i]), []).append(corpus.question_texts[i])
    expanded_all = fts5_bm25(corpus.chunk_texts, ["\n".join(every.get(c, []))
                                                  for c in range(n)], asked)
    # (the chunks' own keyword signal, without their questions: the index may hold them)
    base["chunks-bm25"] = candidates(np.where(plain > 0, plain, -np.inf), corpus.chunk_ids)
    rows: list[dict[str, Any]] = [{"lever": "hybrid-no-questions", "hybrid": hybrid(base, gold)}]
    for name, scores in levers:
        found = {**base, "questions-dense": candidates(scores, corpus.chunk_ids)}
        rows.append({"lever": name, "questions_dense": recall(scores, corpus.gold),
                     "hybrid": hybrid(found, gold)})
    for name, bm25, with_questions in (
            ("chunks-bm25 remade here, without questions-dense", plain, False),
            ("chunks-bm25 remade here, with questions-dense", plain, True),
            ("questions in their chunk's keyword text, without questions-dense", expanded,
             False),
            ("questions in their chunk's keyword text, with questions-dense", expanded,
             True),
            ("the dropped questions in the keyword text too, with questions-dense",
             expanded_all, True)):
        found = {**base, "chunks-bm25": candidates(np.where(bm25 > 0, bm25, -np.inf),
                                                   corpus.chunk_ids)}
        if with_questions:
            found["questions-dense"] = candidates(levers[0][1], corpus.chunk_ids)
        rows.append({"lever": name, "chunks_bm25": recall(bm25, corpus.gold),
                     "hybrid": hybrid(found, gold)})
    shipped = rows[1]["questions_dense"]["r1"]
    report = {"index": str(args.index), "embedder": embedder.model_id,
              "queries": len(corpus.queries), "chunks": n, "statements": len(atoms),
              "questions_kept": int(kept.sum()), "dropped": int((~kept).sum()),
              "embed_s": round(embedded, 1),
              "chunks_dense": recall(c_sim, corpus.gold),
              "atoms_dense": recall(by_atoms, corpus.gold),
              "levers": rows}
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f"{report['queries']} questions over {n} chunks, {len(atoms)} statements, "
          f"{report['questions_kept']} questions kept, {report['dropped']} dropped; "
          f"embedder {embedder.model_id} ({embedded:.0f} s to embed)")
    print(f"chunks-dense R@1 {report['chunks_dense']['r1']}, "
          f"atoms-dense R@1 {report['atoms_dense']['r1']}\n")
    print("| lever | questions-dense R@1 | R@5 | MRR@10 | vs shipped | hybrid R@1 | R@5 |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        q = row.get("questions_dense")
        dense = (f"{q['r1']} | {q['r5']} | {q['mrr10']} | {q['r1'] / shipped:.3f}x" if q
                 else "- | - | - | -")
        if "chunks_bm25" in row:  # (these rows' own signal: chunks-bm25)
            q = row["chunks_bm25"]
            dense = f"chunks-bm25 {q['r1']} | {q['r5']} | {q['mrr10']} | -"
        print(f"| {row['lever']} | {dense} | {row['hybrid']['r1']} | {row['hybrid']['r5']} |")


if __name__ == "__main__":
    main()
