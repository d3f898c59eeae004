"""The query adapter's variants side by side (issue 66), on an index quality.py built.

    .venv/bin/python benchmarks/adapter.py [--passages 300 | --unseen 150]
        [--embedder local/multilingual-e5-small] [--cache DIR] [--confirmed] [--bound]

Reads the index's kept questions and their chunks' vectors (``Store.question_pairs``) and
embeds the real SQuAD questions of its passages, then scores, in numpy and exactly (the
cosine of the mapped query with every chunk), each way of fitting a linear map of the
query on the index's own questions, over four draws of the tenth of the chunks held out
of the fit (seeds 0-3; the index's own fit draws with seed 0):

- **held-out**: the change of R@1 of the held-out questions (its own chunk first among
  all the chunks) against the query as embedded: the fit is used only where it is above
  0 (``used`` counts the draws where it is);
- **real**: the change of chunks-dense R@1 of the real questions (what quality.py's
  ``chunks-dense +adapter`` row measures through the store, for seed 0), and of those
  whose passage was held out (a chunk the fit never saw, as one ingested after it).

Variants: regularised least squares toward the chunk's vector (``W = (Q'Q + l I)^-1 (Q'C
+ l I)``, from the identity), and the contrastive fit (in-batch negatives, Adam) at
several steps and learning rates, the shipped one first. ``--confirmed``: half the real
questions (a fixed draw) join the fit as confirmed queries at weights 0, 1, 2 and 4; R@1
of the other half. ``--bound``: hybrid's R@1 with the shipped fit applied, with the
default weights and with the best of a grid of weights chosen on these questions
themselves (a bound on what any fitted weights could give, not a method). No model
call; the index is only read.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from isotope import Isotope
from isotope.search import adapter, evaluation, retrieval

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "eval" / "squad-dev"
OUT = ROOT / "benchmarks" / "out"
UNSEEN = 600
SEEDS = (0, 1, 2, 3)
CONTRASTIVE = ((adapter.STEPS, adapter.LEARNING_RATE), (200, 1e-4), (200, 1e-3),
               (50, 1e-3), (20, 1e-3))
"""(steps, learning rate) of the contrastive fits compared; the shipped one first."""
LAMBDAS = (1.0, 10.0, 100.0)


def least_squares(queries: Any, chunk_of: Any, chunks: Any, weights: Any, *,
                  lam: float) -> Any:
    """The map from the identity nearest, in squares, to sending each query onto its
    chunk's vector: ``(Q'Q + lam I)^-1 (Q'C + lam I)``."""
    eye = np.eye(queries.shape[1])
    q = queries.astype(np.float64)
    return np.linalg.solve(q.T @ q + lam * eye,
                           q.T @ chunks[chunk_of].astype(np.float64) + lam * eye
                           ).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=300)
    parser.add_argument("--unseen", type=int, default=0, metavar="N")
    parser.add_argument("--embedder", default=None)
    parser.add_argument("--cache", type=Path, default=ROOT / "benchmarks" / "cache")
    parser.add_argument("--confirmed", action="store_true")
    parser.add_argument("--bound", action="store_true")
    args = parser.parse_args()
    _, queries = evaluation.load(DATA / "passages.jsonl", DATA / "queries.jsonl",
                                 args.unseen or args.passages,
                                 start=UNSEEN if args.unseen else 0)
    which = f"unseen-{args.unseen}" if args.unseen else str(args.passages)
    index = OUT / (f"quality-{which}-batched"
                   + (f"-{args.embedder.rsplit('/', 1)[-1]}" if args.embedder else ""))
    if not index.is_dir():
        sys.exit(f"no index at {index}: build it with benchmarks/quality.py first")
    models = {"embedding_model": args.embedder} if args.embedder else {}
    with Isotope.open(index, create=False, cache_dir=args.cache, **models) as iso:
        pairs = iso.store.question_pairs(adapter.MOST_PAIRS)
        position = {c: i for i, c in enumerate(pairs.chunk_ids)}
        sources = {c.id: c.source for c in iso.store.get_chunks(pairs.chunk_ids).values()}
        of_source = {sources[c]: position[c] for c in pairs.chunk_ids}
        queries = [q for q in queries if str(q["gold_pid"]) in of_source]
        real = np.asarray(iso.embedder.embed([q["question"] for q in queries]))
        gold = np.asarray([of_source[str(q["gold_pid"])] for q in queries])
        questions = np.asarray(pairs.vectors, dtype=np.float32)
        chunk_of = np.asarray(pairs.chunk_of)
        chunks = np.asarray(pairs.chunk_vectors, dtype=np.float32)
        print(f"{index.name}: {len(questions):,} questions over {len(chunks)} chunks, "
              f"{len(real):,} real questions; chunks-dense R@1 as embedded "
              f"{100 * adapter.first(real, gold, chunks, None) / len(real):.1f}")
        variants: list[tuple[str, Any]] = [
            (f"contrastive, {s} steps, rate {r:g}" + (" (shipped)" if i == 0 else ""),
             lambda q, c, ch, w, seed, s=s, r=r: adapter.train_linear(
                 q, c, ch, w, steps=s, rate=r, seed=seed))
            for i, (s, r) in enumerate(CONTRASTIVE)]
        variants += [(f"least squares, lambda {lam:g}",
                      lambda q, c, ch, w, seed, lam=lam: least_squares(q, c, ch, w, lam=lam))
                     for lam in LAMBDAS]
        print("\n| variant | held-out R@1 change (seeds 0-3) | used | chunks-dense R@1 change, "
              "real questions | ... of the held-out chunks | fit s |")
        print("|---|---|---|---|---|---|")
        for name, fit in variants:
            row = [_draw(fit, questions, chunk_of, chunks, real, gold, seed)
                   for seed in SEEDS]
            held = [r["held"] for r in row]
            print(f"| {name} | {np.mean(held):+.1f} ({', '.join(f'{h:+.1f}' for h in held)}) "
                  f"| {sum(h > 0 for h in held)} of {len(SEEDS)} | "
                  f"{np.mean([r['real'] for r in row]):+.1f} (seed 0: {row[0]['real']:+.1f}) | "
                  f"{np.mean([r['unseen'] for r in row]):+.1f} | "
                  f"{np.median([r['seconds'] for r in row]):.2f} |")
        if args.confirmed:
            _confirmed(questions, chunk_of, chunks, real, gold)
        if args.bound:
            _bound(iso, queries)


def _draw(fit: Any, questions: Any, chunk_of: Any, chunks: Any, real: Any, gold: Any,
          seed: int) -> dict[str, float]:
    """One draw of the held-out tenth: the fit's changes of R@1 (points)."""
    rng = np.random.default_rng(seed)
    held = np.zeros(len(chunks), dtype=bool)
    held[rng.choice(len(held), max(1, round(adapter.HELD_OUT * len(held))), replace=False)] = True
    train = ~held[chunk_of]
    started = time.perf_counter()
    matrix = fit(questions[train], chunk_of[train], chunks,
                 np.ones(int(train.sum()), dtype=np.float32), seed)
    seconds = time.perf_counter() - started
    test, unseen = ~train, held[gold]

    def change(q: Any, c: Any) -> float:
        return 100 * (adapter.first(q, c, chunks, matrix)
                      - adapter.first(q, c, chunks, None)) / max(1, len(q))

    return {"held": change(questions[test], chunk_of[test]), "real": change(real, gold),
            "unseen": change(real[unseen], gold[unseen]), "seconds": seconds}


def _confirmed(questions: Any, chunk_of: Any, chunks: Any, real: Any, gold: Any) -> None:
    """Half the real questions as confirmed queries at several weights (seed 0's
    held-out draw): R@1 of the other half."""
    rng = np.random.default_rng(0)
    held = np.zeros(len(chunks), dtype=bool)
    held[rng.choice(len(held), max(1, round(adapter.HELD_OUT * len(held))), replace=False)] = True
    train = ~held[chunk_of]
    half = np.random.default_rng(5).random(len(real)) < 0.5
    confirmed, scored = half & ~held[gold], ~half
    base = adapter.first(real[scored], gold[scored], chunks, None) / scored.sum()
    print(f"\nConfirmed queries: {int(confirmed.sum())} real questions join the fit; R@1 of "
          f"the other {int(scored.sum())} ({100 * base:.1f} as embedded)\n")
    print("| weight of a confirmed query | R@1 |")
    print("|---|---|")
    for weight in (0.0, 1.0, 2.0, 4.0):
        fitted = np.vstack([questions[train], real[confirmed]])
        targets = np.concatenate([chunk_of[train], gold[confirmed]])
        weights = np.concatenate([np.ones(int(train.sum())),
                                  np.full(int(confirmed.sum()), weight)]).astype(np.float32)
        keep = weights > 0
        matrix = adapter.train_linear(fitted[keep], targets[keep], chunks, weights[keep])
        right = adapter.first(real[scored], gold[scored], chunks, matrix)
        print(f"| {weight:g} | {100 * right / scored.sum():.1f} |")


SIGNALS = ("questions-dense", "atoms-dense", "atoms-bm25", "chunks-dense", "chunks-bm25")
GRID = {"questions-dense": (0.25, 0.5, 1.0), "atoms-dense": (0.25, 0.5, 1.0),
        "atoms-bm25": (0.25, 0.5), "chunks-dense": (0.25, 0.5, 1.0, 1.5),
        "chunks-bm25": (0.25, 0.5, 1.0)}


def _bound(iso: Isotope, queries: list[dict[str, Any]]) -> None:
    """hybrid with the index's fit (seed 0, as ``isotope adapter fit``; not kept)
    applied: with the default weights, and the best weights of :data:`GRID` chosen on
    these questions."""
    done, mapped = adapter.fit(iso.store, iso.embedder)
    vectors = iso.embedder.embed([q["question"] for q in queries])
    found: dict[bool, list[tuple[dict[str, Any], str]]] = {False: [], True: []}
    for query, vector in zip(queries, vectors, strict=True):
        text, adapted = query["question"], mapped.apply(vector)
        for on in (False, True):
            signals = {m: retrieval.signal(iso.store, m, text, vector, 50,
                                           adapted=adapted if on else None)
                       for m in SIGNALS}
            found[on].append((signals, str(query["gold_pid"])))
    ids = {c.chunk_id for rows in found.values() for s, _ in rows for f in s.values() for c in f}
    source = {c.id: c.source for c in iso.store.get_chunks(sorted(ids)).values()}

    def first(on: bool, weights: dict[str, float]) -> float:
        total, right = sum(weights.values()), 0
        for signals, pid in found[on]:
            ranked = retrieval.confirmed_raise(
                signals, retrieval.fuse(signals, weights), total)
            right += source[ranked[0][0]] == pid
        return 100 * right / len(queries)

    default = dict.fromkeys(SIGNALS, 0.5)
    print(f"\nhybrid with the fit of seed 0 (held-out R@1 {100 * done.r1_identity:.1f} -> "
          f"{100 * done.r1:.1f}, used: {done.used}), R@1 of {len(queries)} questions\n")
    print("| weights | without the adapter | with it |")
    print("|---|---|---|")
    print(f"| default (0.5 each) | {first(False, default):.1f} | {first(True, default):.1f} |")
    best = {on: max((first(on, dict(zip(SIGNALS, w, strict=True))), w)
                    for w in itertools.product(*GRID.values())) for on in (False, True)}
    print(f"| the best of {np.prod([len(v) for v in GRID.values()])} chosen on these "
          f"questions (a bound) | {best[False][0]:.1f} {best[False][1]} | "
          f"{best[True][0]:.1f} {best[True][1]} |")


if __name__ == "__main__":
    main()
