"""Fit the answer's confidence and the strictness levels' bars on the development set
(issue 65): what `isotope.search.answer_check.WEIGHTS`, `WORDS_ONLY` and `LEVELS` hold.

    .venv/bin/python benchmarks/answer_fit.py [--passages 300] [--limit-queries 200]
        [--cache DIR] [--signals FILE] [--json]

Asks the development questions of benchmarks/answers.py (the first ``--passages``
passages' ``--limit-queries`` questions, the 30 unanswerable and the 30 swapped ones) as
`ask` does, judges each reply at ``lenient`` (every answer a passage supports is a
candidate) and records what its confidence is made from (`Signals`: support, evidence,
matched, the model's check) with whether the answer holds a gold answer, whether the
sentence that would be quoted does. Then fits the logistic models (with the check and
without it) by gradient descent on the log-loss, and for each level picks the bars:
``generate`` the lowest whose generated answers are right at least the level's precision
(lenient 0.85, balanced 0.92, strict 0.95; over answerable and unanswerable questions
alike), ``quote`` the lowest that keeps the level's share of the unanswerable questions
declined (0.8, 0.9, 0.95). Prints the weights and bars to copy into answer_check.py, and
what each level gives
on this set. Thresholds are never fitted on the unseen passages.

The replies and checks come from the model cache (benchmarks/cache/, or ``--cache``): a
reply not cached is asked (about 8-10 s a question on 2 cores), a check about 2 s.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from isotope import Isotope
from isotope.search import answer_eval, evaluation
from isotope.search.answer import (
    JOINED,
    MAX_PASSAGES,
    _answer_sentence,
    _backed,
    _quote,
    _tidy,
)
from isotope.search.answer_check import check_prompt

sys.path.insert(0, str(Path(__file__).resolve().parent))
import answers  # (the benchmark's sets and paths)

PRECISION = {"lenient": 0.85, "balanced": 0.92, "strict": 0.95}
"""The share of generated answers each level wants right (on this set)."""
DECLINED = {"lenient": 0.8, "balanced": 0.9, "strict": 0.95}
"""The share of unanswerable questions each level wants declined (on this set)."""


def record(index: Path, queries: list[dict[str, Any]], unanswerable: list[dict[str, Any]],
           cache: Path) -> list[dict[str, Any]]:
    """Each question's signals, as judged at lenient, and what is right."""
    rows = []
    with Isotope.open(index, create=False, cache_dir=cache, answer_strictness="lenient") as iso:
        check = iso.answer_llm().yes_probability
        for n, query in enumerate([*queries, *unanswerable]):
            found = iso.search(query["question"], for_answer=True)
            pieces: list[str] = []
            iso.answer(found, on_token=pieces.append)
            readable = [r for r in found.results if not r.chunk.stale][:MAX_PASSAGES]
            sure = found.suggested_action == "deliver" and bool(readable) \
                and readable[0] is found.results[0]
            question = query["question"]
            answer = _answer_sentence("".join(pieces), question)
            backed = _backed(answer, question, readable, JOINED["lenient"], sure=sure,
                             two_hop=iso.settings.graph) if answer else None
            signals, quote = None, ""
            if backed is not None:
                _, signals, passage, source = backed
                signals = replace(signals, checked=check(check_prompt(
                    _tidy(answer), question, passage, iso.prompts["check"])))
                quote = _quote(answer, question, readable[source - 1].chunk.text)
            candidate = _tidy(answer) if backed is not None else ""
            golds = answer_eval._golds(query)
            swapped_to = str(query.get("swapped", "")).partition(" -> ")[2].lower()
            rows.append({
                "question": query["question"], "impossible": n >= len(queries),
                "swapped": bool(swapped_to), "sure": sure,
                "signals": asdict(signals) if signals else None, "candidate": candidate,
                "right": answer_eval.contains(candidate, golds),
                "asserts_swap": bool(swapped_to) and swapped_to in candidate.lower(),
                "quote_right": bool(quote) and answer_eval.contains(quote, golds),
                "has_quote": bool(quote)})
            if (n + 1) % 20 == 0:
                print(f"  {n + 1}/{len(queries) + len(unanswerable)}", file=sys.stderr,
                      flush=True)
    return rows


NAMES = ["bias", "evidence", "matched", "top", "first", "sure", "checked"]
"""The logistic model's terms, in `answer_check.Weights`' order."""


def features(signals: dict[str, Any], with_check: bool) -> list[float]:
    checked = signals["checked"]
    odds = 0.0
    if with_check and checked is not None:
        p = min(max(checked, 1e-4), 1 - 1e-4)
        odds = math.log(p / (1 - p))
    return [1.0, signals["evidence"], signals["matched"], signals["top"],
            float(signals["first"]), float(signals["sure"]), odds]


def fit(x: np.ndarray, y: np.ndarray, l2: float = 0.01, steps: int = 20000) -> np.ndarray:
    """Logistic regression by gradient descent (bias not penalised)."""
    w = np.zeros(x.shape[1])
    for _ in range(steps):
        p = 1 / (1 + np.exp(-x @ w))
        grad = x.T @ (p - y) / len(y) + l2 * np.r_[0.0, w[1:]]
        w -= 0.5 * grad
    return w


def decide(rows: list[dict[str, Any]], trust: list[float | None], generate: float,
           quote: float) -> dict[str, Any]:
    """What judge shows for each row at these bars, scored as answers.py scores it."""
    kinds, right = [], []
    for row, t in zip(rows, trust, strict=True):
        if t is not None and t >= generate:
            kinds.append("generated")
            right.append(row["right"] and not row["impossible"])
        elif t is not None and row["has_quote"] and t >= quote:
            kinds.append("quoted")
            right.append(row["quote_right"] and not row["impossible"])
        else:
            kinds.append("declined")
            right.append(False)
    answerable = [i for i, r in enumerate(rows) if not r["impossible"]]
    impossible = [i for i, r in enumerate(rows) if r["impossible"]]
    generated = [i for i, k in enumerate(kinds) if k == "generated"]
    swapped = [i for i in impossible if rows[i]["swapped"]]
    return {
        "generated_precision": round(sum(right[i] for i in generated) / max(1, len(generated)), 3),
        "generated_share": round(sum(kinds[i] == "generated" for i in answerable)
                                 / len(answerable), 3),
        "quoted_share": round(sum(kinds[i] == "quoted" for i in answerable) / len(answerable), 3),
        "contains_gold": round(sum(right[i] for i in answerable) / len(answerable), 3),
        "unanswerable_declined": round(sum(kinds[i] == "declined" for i in impossible)
                                       / max(1, len(impossible)), 3),
        "swapped_asserted": round(sum(kinds[i] == "generated" and rows[i]["asserts_swap"]
                                      for i in swapped) / max(1, len(swapped)), 3)}


def bars(rows: list[dict[str, Any]], trust: list[float | None]) -> dict[str, dict[str, Any]]:
    """Each level's bars: ``generate`` the lowest whose generated answers are right at the
    level's precision, ``quote`` the lowest that declines the level's share of the
    unanswerable questions."""
    grid = [round(float(t), 2) for t in np.arange(0.05, 1.0, 0.01)]
    chosen = {}
    for level, precision in PRECISION.items():
        generate = next((g for g in grid if decide(rows, trust, g, 1.1)["generated_precision"]
                         >= precision), 0.99)
        quote = next((q for q in grid if q <= generate and decide(
            rows, trust, generate, q)["unanswerable_declined"] >= DECLINED[level]), generate)
        chosen[level] = {"generate": generate, "quote": quote,
                         **decide(rows, trust, generate, quote)}
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=300)
    parser.add_argument("--limit-queries", type=int, default=200)
    parser.add_argument("--cache", type=Path, default=answers.CACHE)
    parser.add_argument("--signals", type=Path, help="read (or write) the recorded signals")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.signals and args.signals.exists():
        rows = json.loads(args.signals.read_text())
    else:
        _, queries = evaluation.load(answers.DATA / "passages.jsonl",
                                     answers.DATA / "queries.jsonl", args.passages)
        index = answers.OUT / f"quality-{args.passages}-batched"
        if not (index / "isotope.db").exists():
            sys.exit(f"no index at {index}: run benchmarks/quality.py --passages "
                     f"{args.passages}")
        unanswerable = [*evaluation.read_jsonl(answers.UNANSWERABLE, ("question",)),
                        *evaluation.read_jsonl(answers.SWAPPED, ("question", "swapped"))]
        rows = record(index, answer_eval.pick(queries, args.limit_queries), unanswerable,
                      args.cache)
        if args.signals:
            args.signals.write_text(json.dumps(rows))
    candidates = [r for r in rows if r["signals"]]
    y = np.array([float(r["right"] and not r["impossible"]) for r in candidates])
    out: dict[str, Any] = {"questions": len(rows), "candidates": len(candidates)}
    names = NAMES
    for name, with_check in (("WEIGHTS", True), ("WORDS_ONLY", False)):
        x = np.array([features(r["signals"], with_check) for r in candidates])
        w = fit(x, y)
        if not with_check:
            w[-1] = 0.0
        by_row = iter(1 / (1 + np.exp(-x @ w)))
        trust = [float(next(by_row)) if r["signals"] else None for r in rows]
        out[name] = {"weights": dict(zip(names, (round(float(v), 3) for v in w), strict=True)),
                     "levels": bars(rows, trust)}
        print(f"\n{name} = Weights(" + ", ".join(f"{k}={v}" for k, v in
                                               out[name]["weights"].items()) + ")")
        print("| level | generate at | quote at | generated precision | generated % | quoted % "
              "| contains gold | unanswerable declined | swapped asserted |")
        print("|---|---|---|---|---|---|---|---|---|")
        for level, got in out[name]["levels"].items():
            print(f"| {level} | {got['generate']} | {got['quote']} | "
                  f"{got['generated_precision']} | {got['generated_share']} | "
                  f"{got['quoted_share']} | {got['contains_gold']} | "
                  f"{got['unanswerable_declined']} | {got['swapped_asserted']} |")
    if args.json:
        print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
