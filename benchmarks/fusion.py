"""Can the fusion learn, per query, when to trust the generated questions? (issue 17)

    .venv/bin/python benchmarks/fusion.py [--passages 300] [--unseen INDEX]

Uses the index of the first ``--passages`` passages of ../shared/eval/squad-dev that
benchmarks/quality.py builds (run that first). Every query's signals are searched once
(each signal's candidates at the hybrid pool size, kept in benchmarks/out/), then fusion
rules are compared on them without searching again:

- ``with questions`` / ``without``: isotope's z-score fusion (retrieval.fuse) as shipped,
  and with the question signals' weight 0;
- ``hindsight``: for each query the better of the two (an upper bound, not a rule);
- ``fixed weights, fitted``: the five signal weights chosen on one half of the passages
  (random search on Recall@1) and scored on the other half;
- ``margin gate, fitted``: the questions' weight scaled by exp(a*qd margin + b*BM25 margin
  + c*qd top cosine), a, b, c chosen on one half;
- ``weight chosen per query``: a logistic regression over 46 query-time features (each
  signal's margin and top standard score, the dense top cosines, which signals agree on
  the first chunk, how each first chunk stands in the other signals) predicts which of six
  question weights ranks the passage first; fitted on one half;
- ``learned linear fusion``: each signal's standard score and reciprocal rank, and the
  question score times every query feature, weighted by a listwise softmax regression
  fitted on one half.

Halves are split by passage (no passage's questions in both), five random splits,
both ways. ``--unseen INDEX``: also fit every rule on all of the development passages and
score it on another index built the same way (its passages' questions never seen).
Prints R@1, R@5 and R@1 on the easy (chunk BM25 alone ranks the passage first) and hard
questions; ratios against ``with questions``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from isotope import Isotope
from isotope.search import evaluation
from isotope.search.retrieval import SIGNALS, Candidate, fuse, signal, signal_weights
from isotope.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "eval" / "squad-dev"
OUT = ROOT / "benchmarks" / "out"
SIG = [s for s in SIGNALS if s != "graph"]  # questions-dense, questions-bm25, atoms-...
"""The signals compared (the graph's only where an index has one: not these)."""
_DEFAULTS = Settings()
SHIPPED_WEIGHTS = signal_weights(_DEFAULTS.alpha, _DEFAULTS.weights)
"""The weights ``hybrid`` ships with, read from the code (never retyped here)."""
WITHOUT_WEIGHTS = {name: 0.0 if name.startswith("questions") else weight
                   for name, weight in SHIPPED_WEIGHTS.items()}
SHIPPED = np.array([SHIPPED_WEIGHTS[name] for name in SIG])
WITHOUT = np.array([WITHOUT_WEIGHTS[name] for name in SIG])
"""The same weights as vectors over ``SIG``, for the fitted rules' own scoring."""
QUESTION_WEIGHTS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)


# -- the signals, searched once --------------------------------------------------------
def collect(index: Path, queries: Sequence[dict[str, Any]], out: Path,
            pool: int = 50) -> list[dict[str, Any]]:
    """Each query's candidates per signal (passage id, raw score), cached in ``out``."""
    if out.exists():
        return json.loads(out.read_text())  # type: ignore[no-any-return]
    rows = []
    with Isotope.open(index, create=False) as iso:
        passage_of: dict[str, str] = {}
        for n, q in enumerate(queries):
            vector = iso.embedder.embed_one(q["question"])
            with iso.store.snapshot():
                found = {m: signal(iso.store, m, q["question"], vector, pool) for m in SIG}
                new = [c.chunk_id for cs in found.values() for c in cs
                       if c.chunk_id not in passage_of]
                for chunk_id, chunk in iso.store.get_chunks(new).items():
                    passage_of[chunk_id] = evaluation.passage_id(chunk)
            rows.append({"question": q["question"], "gold": str(q["gold_pid"]),
                         "signals": {m: [[passage_of[c.chunk_id], c.score] for c in cs]
                                     for m, cs in found.items()}})
            if n % 500 == 0:
                print(f"searched {n}/{len(queries)}", file=sys.stderr, flush=True)
    out.write_text(json.dumps(rows))
    return rows


class Query:
    """One query's candidates as matrices: standard scores ``z`` (a chunk a signal did not
    find gets that signal's lowest, as retrieval.fuse does), reciprocal ranks ``rr``."""

    def __init__(self, row: dict[str, Any]):
        signals = row["signals"]
        self.cands = sorted({c for s in SIG for c, _ in signals[s]})
        at = {c: i for i, c in enumerate(self.cands)}
        n = len(self.cands)
        self.z = np.zeros((n, len(SIG)))
        self.rr = np.zeros((n, len(SIG)))
        self.margin = np.zeros(len(SIG))
        self.top_z = np.zeros(len(SIG))
        self.top_raw = np.zeros(len(SIG))
        self.first: list[int] = []
        for j, name in enumerate(SIG):
            found = signals[name]
            if not found:
                self.first.append(-1)
                continue
            raw = np.array([score for _, score in found])
            z = (raw - raw.mean()) / (raw.std() or 1.0)
            self.z[:, j] = z.min()
            for rank, ((c, _), value) in enumerate(zip(found, z, strict=True), start=1):
                self.z[at[c], j] = value
                self.rr[at[c], j] = 1 / rank
            self.top_raw[j], self.top_z[j] = raw[0], z[0]
            self.margin[j] = z[0] - z[1] if len(z) > 1 else 0.0
            self.first.append(at[found[0][0]])
        self.gold = at.get(row["gold"], -1)
        self.easy = self.gold >= 0 and self.first[SIG.index("chunks-bm25")] == self.gold
        self.signals = {name: [Candidate(c, float(score), []) for c, score in signals[name]]
                        for name in SIG}

    def shipped_rank(self, weights: dict[str, float]) -> int:
        """The gold passage's rank under isotope's own fusion (``retrieval.fuse``, as
        shipped: the benchmark never re-implements it)."""
        fused = dict(fuse(self.signals, weights))
        scores = np.array([fused.get(c, -np.inf) for c in self.cands])
        return self.rank_of_gold(scores)

    def features(self) -> np.ndarray:
        """Query-time features: how sure each signal is, how they agree."""
        f = [*self.margin, *self.top_z, *self.top_raw[[0, 2, 4]]]
        f += [float(self.first[a] == self.first[b])
              for a in range(len(SIG)) for b in range(a + 1, len(SIG))]
        for a in (0, 3, 5):  # where questions-dense's, atoms-bm25's, chunks-bm25's first stand
            f += list(self.z[self.first[a], [0, 2, 3, 4, 5]]) if self.first[a] >= 0 else [0] * 5
        f.append(len(self.cands) / 100)
        return np.array(f)

    def rank_of_gold(self, scores: np.ndarray) -> int:
        """1-based rank of the gold passage (ties count against it); 0 if not found."""
        if self.gold < 0:
            return 0
        return int((scores > scores[self.gold]).sum()
                   + (scores[np.arange(len(scores)) != self.gold] == scores[self.gold]).sum()
                   + 1)


# -- rules: each fits on training queries and returns a scorer --------------------------
Scorer = Callable[[int, Query], np.ndarray]


def hits1(queries: Sequence[Query], scorer: Scorer, idx: np.ndarray) -> np.ndarray:
    return np.array([queries[i].rank_of_gold(scorer(i, queries[i])) == 1 for i in idx])


def fixed(weights: np.ndarray) -> Scorer:
    return lambda i, q: q.z @ weights


def fit_fixed(queries: Sequence[Query], train: np.ndarray, feats: np.ndarray) -> Scorer:
    rng = np.random.default_rng(0)
    trials = [SHIPPED] + [np.insert(w, 1, 0.0) for w in rng.dirichlet(np.ones(5), 300)]
    best = max(trials, key=lambda w: hits1(queries, fixed(w), train).mean())
    return fixed(best)


def fit_gate(queries: Sequence[Query], train: np.ndarray, feats: np.ndarray) -> Scorer:
    mqd, mcb, cos = (feats[:, SIG.index("questions-dense")], feats[:, SIG.index("chunks-bm25")],
                     feats[:, 12])

    def scorer_of(a: float, b: float, c: float) -> Scorer:
        def score(i: int, q: Query) -> np.ndarray:
            w = 0.5 * np.exp(a * (mqd[i] - 1) + b * (mcb[i] - 1.8) + c * (cos[i] - 0.8))
            return q.z @ np.array([min(w, 5.0), 0, 0.5, 0.5, 0.5, 0.5])
        return score

    steps = (-0.3, -0.15, 0.0, 0.15, 0.3)
    grid = [(a, b, c) for a in steps for b in steps for c in (-2.0, 0.0, 2.0)]
    best = max(grid, key=lambda p: hits1(queries, scorer_of(*p), train).mean())
    return scorer_of(*best)


def _logistic(x: np.ndarray, y: np.ndarray, lam: float = 10.0) -> np.ndarray:
    theta = np.zeros(x.shape[1])
    for _ in range(50):
        p = 1 / (1 + np.exp(-x @ theta))
        grad = x.T @ (p - y) + lam * theta
        hess = (x * (p * (1 - p))[:, None]).T @ x + lam * np.eye(x.shape[1])
        step = np.linalg.solve(hess, grad)
        theta -= step
        if np.abs(step).max() < 1e-7:
            break
    return theta


def fit_choice(queries: Sequence[Query], train: np.ndarray, feats: np.ndarray) -> Scorer:
    weights = [np.array([w, 0, 0.5, 0.5, 0.5, 0.5]) for w in QUESTION_WEIGHTS]
    x = np.column_stack([np.ones(len(feats)), feats])
    thetas = [_logistic(x[train], hits1(queries, fixed(w), train).astype(float))
              for w in weights]

    def score(i: int, q: Query) -> np.ndarray:
        best = int(np.argmax([x[i] @ t for t in thetas]))
        return q.z @ weights[best]
    return score


def _listwise(data: list[tuple[np.ndarray, int]], lam: float = 10.0) -> np.ndarray:
    """Softmax regression over each query's candidates (Newton with backtracking)."""
    d = data[0][0].shape[1]

    def loss_grad_hess(theta: np.ndarray, hessian: bool = True
                       ) -> tuple[float, np.ndarray, np.ndarray]:
        loss, grad, hess = 0.0, np.zeros(d), np.zeros((d, d))
        for x, gold in data:
            s = x @ theta
            s -= s.max()
            e = np.exp(s)
            p = e / e.sum()
            loss -= s[gold] - np.log(e.sum())
            mean = p @ x
            grad += mean - x[gold]
            if hessian:
                centred = x - mean
                hess += (centred * p[:, None]).T @ centred
        return (loss + lam / 2 * theta @ theta, grad + lam * theta,
                hess + lam * np.eye(d))

    theta = np.zeros(d)
    loss, grad, hess = loss_grad_hess(theta)
    for _ in range(50):
        step = np.linalg.solve(hess, grad)
        t = 1.0
        while True:
            new = theta - t * step
            new_loss = loss_grad_hess(new, hessian=False)[0]
            if new_loss <= loss - 1e-4 * t * (grad @ step) or t < 1e-6:
                break
            t /= 2
        theta = new
        if loss - new_loss < 1e-7 * abs(loss):
            break
        loss, grad, hess = loss_grad_hess(theta)
    return theta


def fit_linear(queries: Sequence[Query], train: np.ndarray, feats: np.ndarray) -> Scorer:
    used = [0, 2, 3, 4, 5]
    mean, spread = feats[train].mean(0), feats[train].std(0) + 1e-9

    def x_of(i: int, q: Query) -> np.ndarray:
        f = (feats[i] - mean) / spread
        return np.hstack([q.z[:, used], q.rr[:, used], q.z[:, [0]] * f[None, :]])

    theta = _listwise([(x_of(i, queries[i]), queries[i].gold) for i in train
                       if queries[i].gold >= 0])
    return lambda i, q: x_of(i, q) @ theta


RULES: dict[str, Callable[[Sequence[Query], np.ndarray, np.ndarray], Scorer]] = {
    "fixed weights, fitted": fit_fixed,
    "margin gate, fitted": fit_gate,
    "weight chosen per query": fit_choice,
    "learned linear fusion": fit_linear,
}


# -- scoring ---------------------------------------------------------------------------
def score(queries: Sequence[Query], ranks: list[int], idx: Sequence[int]) -> dict[str, float]:
    r = np.array(ranks)
    easy = np.array([queries[i].easy for i in idx])
    return {"R@1": 100 * (r == 1).mean(), "R@5": 100 * ((r >= 1) & (r <= 5)).mean(),
            "easy": 100 * (r[easy] == 1).mean(), "hard": 100 * (r[~easy] == 1).mean()}


def evaluate(queries: Sequence[Query], splits: int) -> dict[str, dict[str, float]]:
    feats = np.array([q.features() for q in queries])
    everyone = np.arange(len(queries))
    table: dict[str, dict[str, float]] = {}
    with_r = [q.shipped_rank(SHIPPED_WEIGHTS) for q in queries]
    without_r = [q.shipped_rank(WITHOUT_WEIGHTS) for q in queries]
    table["with questions (shipped)"] = score(queries, with_r, everyone)
    table["without questions"] = score(queries, without_r, everyone)
    table["hindsight: better of the two"] = score(
        queries, [min(a, b) if a and b else a or b for a, b in zip(with_r, without_r,
                                                                   strict=True)], everyone)
    gold_of = [q.cands[q.gold] if q.gold >= 0 else "" for q in queries]
    golds = sorted(set(gold_of))
    for name, fit in RULES.items():
        started = time.perf_counter()
        ranks: list[int] = []
        order: list[int] = []
        for seed in range(splits):
            rng = np.random.default_rng(seed)
            shuffled = list(golds)
            rng.shuffle(shuffled)
            half = {g: n % 2 for n, g in enumerate(shuffled)}
            fold = np.array([half[g] for g in gold_of])
            for side in (0, 1):
                scorer = fit(queries, everyone[fold != side], feats)
                test = everyone[fold == side]
                ranks += [queries[i].rank_of_gold(scorer(i, queries[i])) for i in test]
                order += list(test)
        table[name] = score(queries, ranks, order)
        print(f"{name}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return table


def transfer(dev: Sequence[Query], unseen: Sequence[Query]) -> dict[str, dict[str, float]]:
    """Every rule fitted on all of ``dev``, scored on ``unseen``."""
    both = list(dev) + list(unseen)
    feats = np.array([q.features() for q in both])
    train = np.arange(len(dev))
    test = np.arange(len(dev), len(both))
    table = {name: score(both, [both[i].shipped_rank(w) for i in test], test)
             for name, w in (("with questions (shipped)", SHIPPED_WEIGHTS),
                             ("without questions", WITHOUT_WEIGHTS))}
    for name, fit in RULES.items():
        scorer = fit(both, train, feats)
        table[name] = score(both, [both[i].rank_of_gold(scorer(i, both[i])) for i in test],
                            test)
    return table


def show(title: str, table: dict[str, dict[str, float]], n: int) -> None:
    base = table["with questions (shipped)"]["R@1"]
    print(f"\n{title} ({n} questions)\n")
    print("| fusion | R@1 | R@5 | R@1 easy | R@1 hard | R@1 vs shipped |")
    print("|---|---|---|---|---|---|")
    for name, s in table.items():
        print(f"| {name} | {s['R@1']:.1f} | {s['R@5']:.1f} | {s['easy']:.1f} | "
              f"{s['hard']:.1f} | {s['R@1'] / base:.3f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=300)
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument("--unseen", type=Path, help="another index built like quality.py's")
    args = parser.parse_args()
    _, queries = evaluation.load(DATA / "passages.jsonl", DATA / "queries.jsonl",
                                 args.passages)
    index = OUT / f"quality-{args.passages}-batched"
    if not (index / "isotope.db").exists():
        sys.exit(f"no index at {index}: run benchmarks/quality.py --passages {args.passages}")
    dev = [Query(r) for r in collect(index, queries, OUT / f"signals-{args.passages}.json")]
    show(f"First {args.passages} passages of squad-dev, halves by passage, "
         f"{args.splits} splits", evaluate(dev, args.splits), len(dev))
    if args.unseen:
        with Isotope.open(args.unseen, create=False) as iso:
            pids = {s.source.uri for s in iso.sources()}
        rows = evaluation.read_jsonl(DATA / "queries.jsonl", ("question", "gold_pid"))
        unseen_q = [q for q in rows if str(q["gold_pid"]) in pids]
        unseen = [Query(r) for r in collect(args.unseen, unseen_q,
                                            OUT / f"signals-{args.unseen.name}.json")]
        show(f"Fitted on those, scored on {args.unseen.name} ({len(pids)} passages)",
             transfer(dev, unseen), len(unseen))


if __name__ == "__main__":
    main()
