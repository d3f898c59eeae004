"""An index of German documents: the questions' language, and search with each embedder
(issue 47).

    .venv/bin/python benchmarks/multilingual.py [--embedders local/all-minilm-l6-v2,
        local/multilingual-e5-small] [--distractors 50] [--json]

benchmarks/data/german/ holds 12 German passages written for this benchmark (facts about
German places, people and science) and 36 German questions about them, written by hand,
a third of them in other words than their passage; ``queries-english.jsonl`` asks the
same 36 in English. Each index holds the 12 with the first ``--distractors`` English
passages of ../shared/eval/squad-dev, with questions by the default offline model
(batched generation; the model cache is benchmarks/out/cache-multilingual, seeded from
benchmarks/cache so that the SQuAD passages cost no model call; an index left by an
earlier run is reused: delete benchmarks/out/multilingual-* to generate anew). Printed: the share of
the German passages' generated questions written in German (a stopword count), and per
embedder every mode's R@1 / R@5 on the German and on the English questions.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

from isotope import Isotope
from isotope.ingest.language import ENGLISH, LANGUAGES
from isotope.search import evaluation

ROOT = Path(__file__).resolve().parent.parent
GERMAN = ROOT / "benchmarks" / "data" / "german"
SQUAD = ROOT.parent / "shared" / "eval" / "squad-dev"
OUT = ROOT / "benchmarks" / "out"
MODES = ["questions-dense", "atoms-dense", "chunks-dense", "chunks-bm25", "hybrid",
         evaluation.WITHOUT_QUESTIONS]
# (the library's common words, with each language's question words: a question is too
# short for language_of's thresholds)
_DE = LANGUAGES["German"] | set("wer wann wie welche welcher welches was wo warum".split())
_EN = ENGLISH | set("who when how which what where why did does".split())


def language(text: str) -> str:
    """``de`` or ``en`` by the common words each has, else ``?``."""
    words = re.findall(r"\w+", text.lower())
    de, en = sum(w in _DE for w in words), sum(w in _EN for w in words)
    return "de" if de > en else "en" if en > de else "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embedders", default="local/all-minilm-l6-v2,"
                        "local/multilingual-e5-small")
    parser.add_argument("--distractors", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    german, asked = evaluation.load(GERMAN / "passages.jsonl", GERMAN / "queries.jsonl")
    _, english = evaluation.load(GERMAN / "passages.jsonl", GERMAN / "queries-english.jsonl")
    squad, _ = evaluation.load(SQUAD / "passages.jsonl", SQUAD / "queries.jsonl",
                               args.distractors)
    cache = OUT / "cache-multilingual"
    if not cache.exists():
        cache.mkdir(parents=True)
        shutil.copy(ROOT / "benchmarks" / "cache" / "cache.db", cache / "cache.db")
    report: dict[str, Any] = {"passages": len(german), "distractors": len(squad),
                              "embedders": {}}
    for embedder in args.embedders.split(","):
        index = OUT / f"multilingual-{args.distractors}-{embedder.rsplit('/', 1)[-1]}"
        started = time.perf_counter()
        with Isotope.open(index, cache_dir=cache, embedding_model=embedder) as iso:
            if not iso.status().counts.get("chunks"):
                iso.ingest_chunks(evaluation.chunks_of(german + squad))
            ingest_s = time.perf_counter() - started
            written = [q.text for source in (p["pid"] for p in german)
                       for q in iso.questions(source=source)]
            search = evaluation.searcher(iso)
            scores = {label: evaluation.evaluate(search, queries, MODES)
                      for label, queries in (("german", asked), ("english", english))}
        kinds = [language(q) for q in written]
        report["embedders"][embedder] = {
            "ingest_s": round(ingest_s, 1), "questions_of_german_passages": len(written),
            "questions_german": round(kinds.count("de") / max(1, len(kinds)), 3),
            **{label: {m.mode: {"r1": round(m.recall[1], 1), "r5": round(m.recall[5], 1)}
                       for m in found} for label, found in scores.items()}}
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f"{len(german)} German passages with {len(squad)} English distractors")
    for embedder, found in report["embedders"].items():
        print(f"{embedder}: {found['questions_of_german_passages']} questions generated for "
              f"the German passages, {100 * found['questions_german']:.0f}% of them in "
              "German")
    print("\n| embedder | mode | German questions R@1 | R@5 | English questions R@1 | R@5 |")
    print("|---|---|---|---|---|---|")
    for embedder, found in report["embedders"].items():
        for mode in MODES:
            de, en = found["german"][mode], found["english"][mode]
            print(f"| {embedder} | {mode} | {de['r1']} | {de['r5']} | {en['r1']} | "
                  f"{en['r5']} |")


if __name__ == "__main__":
    main()
