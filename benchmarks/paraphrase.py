"""Where the questions help: the development queries reworded away from their passage.

    .venv/bin/python benchmarks/paraphrase.py [--passages 300] [--sample 300]

SQuAD questions were written by people looking at the passage, so they share its words
and favour keyword search. This builds a second query set with less overlap: a sample of
the questions of the first ``--passages`` passages, each rewritten by the offline model
(cached in benchmarks/cache) to ask the same thing without the content words it shares
with its passage; rewrites that still share as many words, or lost the question form, are
dropped. It prints the overlap before and after, a few pairs to check by hand, and every
mode (with ``hybrid-no-questions``: hybrid without the question signals) on the original
and the reworded questions of the same sample. Reads the index benchmarks/enrichment.py
builds (run it first).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from isotope import Isotope
from isotope.ingest.questions import STOPWORDS
from isotope.search import evaluation
from isotope.search.retrieval import MODES

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "eval" / "squad-dev"
OUT = ROOT / "benchmarks" / "out"
CACHE = ROOT / "benchmarks" / "cache"
QUESTION_WORDS = {"what", "which", "who", "whom", "whose", "when", "where", "why", "how"}


def content(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9']+", text.lower())
            if w not in STOPWORDS and w not in QUESTION_WORDS and len(w) > 2}


def prompt(question: str, avoid: list[str]) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "You reword questions. Reply with one question only."},
        {"role": "user", "content":
            f"Reword this question so that it asks for exactly the same thing using "
            f"different words (synonyms, a description instead of a name, another "
            f"sentence structure). Do not use these words: {', '.join(avoid)}.\n\n"
            f"Question: {question}\nReworded question:"},
    ]


def reworded(iso: Isotope, text_of: dict[str, str], sample: list[dict]
             ) -> tuple[list[dict], list[dict], list[int], list[int]]:
    """The questions of ``sample`` the index's model (through its cache) reworded with
    fewer content words of their passage (``text_of`` by pid): (the originals kept, their
    rewordings, content words shared before, after)."""
    llm = iso.llm()
    prompts = [prompt(q["question"], sorted(content(q["question"])
                                            & content(text_of[str(q["gold_pid"])])))
               for q in sample]
    replies: list[str] = []
    for start in range(0, len(prompts), 8):
        replies += llm.complete_batch(prompts[start : start + 8], max_tokens=48)
        print(f"{len(replies)}/{len(prompts)} rewritten", file=sys.stderr)
    kept, originals, before, after = [], [], [], []
    for q, reply in zip(sample, replies, strict=True):
        line = reply.strip().splitlines()[0].strip().strip('"') if reply.strip() else ""
        passage = content(text_of[str(q["gold_pid"])])
        old, new = len(content(q["question"]) & passage), len(content(line) & passage)
        if not line.endswith("?") or new >= old or len(line) < 12:
            continue
        kept.append({**q, "question": line})
        originals.append(q)
        before.append(old)
        after.append(new)
    return originals, kept, before, after


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=300)
    parser.add_argument("--sample", type=int, default=300)
    args = parser.parse_args()
    passages, queries = evaluation.load(DATA / "passages.jsonl", DATA / "queries.jsonl",
                                        args.passages)
    text_of = {str(p["pid"]): p["text"] for p in passages}
    step = max(1, len(queries) // args.sample)
    sample = queries[::step][: args.sample]
    index = OUT / f"enrichment-{args.passages}"
    if not index.exists():
        sys.exit(f"no index at {index}: run benchmarks/enrichment.py first")
    with Isotope.open(index, cache_dir=CACHE, create=False) as iso:
        originals, kept, before, after = reworded(iso, text_of, sample)
        search = evaluation.searcher(iso)
        modes = [*MODES, evaluation.WITHOUT_QUESTIONS]
        on_original = evaluation.evaluate(search, originals, modes)
        on_reworded = evaluation.evaluate(search, kept, modes)
    (OUT / "paraphrased.jsonl").write_text("".join(json.dumps(q) + "\n" for q in kept))
    print(f"\n{len(kept)} of {len(sample)} sampled questions reworded with less overlap: "
          f"content words shared with the passage {sum(before) / len(kept):.2f} -> "
          f"{sum(after) / len(kept):.2f} per question (saved to {OUT / 'paraphrased.jsonl'})")
    print("\nsome pairs, to check by hand:")
    for o, k in list(zip(originals, kept, strict=True))[:8]:
        print(f"- {o['question']}\n  -> {k['question']}")
    print("\n| mode | original R@1 / R@5 | reworded R@1 / R@5 |")
    print("|---|---|---|")
    for o, r in zip(on_original, on_reworded, strict=True):
        print(f"| {o.mode} | {o.recall[1]:.1f} / {o.recall[5]:.1f} | "
              f"{r.recall[1]:.1f} / {r.recall[5]:.1f} |")


if __name__ == "__main__":
    main()
