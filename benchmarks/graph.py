"""Two-hop questions over every squad-dev passage (issue 46): does the search bring both
passages a question needs?

    .venv/bin/python benchmarks/graph.py --check          # the questions' rules only
    .venv/bin/python benchmarks/graph.py --questions later [--ask]
    .venv/bin/python benchmarks/graph.py [--ask]          # with generated questions
    .venv/bin/python benchmarks/graph.py --questions later --graph   # the graph signal

``benchmarks/data/two_hop.jsonl`` holds 60 hand-written questions, each needing two
passages joined by an entity (the bridge): the first passage links what the question
names to the bridge, the second mentions the bridge and holds the answer. Half join two
articles. ``--check`` verifies the rules every question must keep: both passages exist,
the answer is in the second and not in the first, the bridge (or an alias) is in both
and not in the question, and the second passage shares **no content word** with the
question (stopwords and the answer-type words below aside; plural variants count as the
same word), so no keyword shortcut leads to it.

Every one of ../shared/eval/squad-dev's passages is ingested as one chunk (its own
source), with the default offline models (``--questions later``: no model is called and
the question signals are empty; the default generates them, which takes hours on two
cores the first time: replies are cached in ``benchmarks/out/cache-graph``). Then for
each mode: the share of questions with both gold passages in the top 5, with the
answering passage in the top 5, and with the first passage in the top 5; ``--ask``: the
share of ``ask`` answers that contain the answer (the local answer model), of those
generated without it (and how many of those had an ``answer_confidence`` of 0.8 or more),
and the answers' kinds.

``--graph`` builds the index with the knowledge graph (setting ``graph``) and adds the
``graph`` mode, ``hybrid`` with the graph signal at the weights of ``--graph-weights``, and
the passages a search for an answer gives the answer model (``answer_k`` results, then
``answer_bridges`` more, from hybrid with the graph signal at ``answer_graph_weight``: 5
by default).
With ``--questions later`` the chunks' entities and relations are generated alone (one
prompt per chunk, batched; the chunks keep waiting for their questions), so the graph is
measured against hybrid without generated questions in an hour rather than many.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from isotope import Isotope
from isotope.ingest.generation import FACTS_TOKENS, facts_prompt
from isotope.knowledge.facts import attribute, parse_facts
from isotope.search import evaluation
from isotope.stores import ChunkQuestions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quality import passages_done

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "eval" / "squad-dev"
QUESTIONS = ROOT / "benchmarks" / "data" / "two_hop.jsonl"
OUT = ROOT / "benchmarks" / "out"
K = 5
ANSWER_PASSAGES = "given to an answer"
"""A pseudo-mode: the passages a search for an answer gives the answer model (``answer_k``
results, then ``answer_bridges`` more; on an index with a graph, the graph signal weighed
in)."""

STOPWORDS = frozenset("""
a an the i me my mine myself we us our ours ourselves you your yours yourself yourselves
he him his himself she her hers herself it its itself they them their theirs themselves
one ones someone something anyone anything everyone everything this that these those such
am is are was were be been being do does did doing done have has had having will would
shall should can could may might must ought not no nor only own same so than too very
just also and or but if then else because as until while though although whether either
neither of at by for with about against between into through during before after above
below to from up down in out on off over under again further once upon within without
along across among around behind beyond near toward towards onto via per since till
unless whereas yet thus hence etc here there all any both each few more most other some
another what which who whom whose when where why how ll re ve
""".split())
ANSWER_TYPES = frozenset(
    "name named called year years city country person born many much date number place"
    .split())
"""Words that say what kind of answer is asked for; the answering passage may share them."""


def content_words(text: str) -> set[str]:
    """Lowercase runs of letters (accents kept) or of digits, without stopwords, answer
    types and single letters."""
    return {w for w in re.findall(r"[^\W\d_]+|\d+", text.lower())
            if len(w) > 1 and w not in STOPWORDS and w not in ANSWER_TYPES}


def _variants(word: str) -> set[str]:
    if word.isdigit():
        return {word}
    found = {word, word + "s", word + "es"}
    if word.endswith("s"):
        found.add(word[:-1])
    if word.endswith("es"):
        found.add(word[:-2])
    if word.endswith("ies"):
        found.add(word[:-3] + "y")
    if word.endswith("y"):
        found.add(word[:-1] + "ies")
    return found


def shared_words(question: str, passage: str) -> set[str]:
    """The question's content words found in ``passage`` (plural variants included)."""
    theirs = content_words(passage)
    return {w for w in content_words(question) if _variants(w) & theirs}


def problems(item: dict[str, Any], passages: dict[str, dict[str, Any]]) -> list[str]:
    """Every rule ``item`` breaks (empty when it keeps them all)."""
    first, second = passages.get(str(item["first_pid"])), passages.get(str(item["second_pid"]))
    if first is None or second is None or first is second:
        return ["first_pid and second_pid must be two passages of squad-dev"]
    said: list[str] = []
    question, answer = item["question"], item["answer"]
    names = [item["bridge"], *item.get("bridge_aliases", [])]
    if answer not in second["text"]:
        said.append("the answer is not in the second passage")
    if answer.lower() in first["text"].lower() or answer.lower() in question.lower():
        said.append("the answer is in the first passage or the question")
    for passage, which in ((first, "first"), (second, "second")):
        if not any(n.lower() in passage["text"].lower() for n in names):
            said.append(f"the bridge is not in the {which} passage")
    if any(n.lower() in question.lower() for n in names):
        said.append("the question names the bridge")
    shared = shared_words(question, second["text"])
    if shared:
        said.append(f"the question shares {sorted(shared)} with the second passage")
    if item["cross_article"] != (first.get("title") != second.get("title")):
        said.append("cross_article does not match the passages' titles")
    return said


def load() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    passages = [json.loads(line) for line in (DATA / "passages.jsonl").open()]
    items = [json.loads(line) for line in QUESTIONS.open()]
    return passages, items


def check(passages: list[dict[str, Any]], items: list[dict[str, Any]]) -> int:
    """Print every broken rule; returns how many questions break one."""
    by_pid = {str(p["pid"]): p for p in passages}
    bad = 0
    for item in items:
        broken = problems(item, by_pid)
        for problem in broken:
            print(f"{item['id']}: {problem}", file=sys.stderr)
        bad += bool(broken)
    cross = sum(bool(i["cross_article"]) for i in items)
    print(f"{len(items)} questions ({cross} joining two articles), {bad} breaking a rule",
          file=sys.stderr)
    return bad


def facts_only(iso: Isotope, window: int = 32) -> int:
    """The entities and relations of every chunk waiting for its questions, generated
    alone (the local model's batched decoding, one prompt per chunk; replies cached) and
    stored with no question, the chunks left waiting. Returns the relations stored."""
    llm = iso.llm(iso.settings.question_model)
    spec = iso.prompts["graph"]
    done = relations = 0
    pending = iso.store.pending_chunks(1_000_000)
    empty = iso.embedder.embed(["x"])[:0]
    for start in range(0, len(pending), window):
        part = pending[start:start + window]
        replies = llm.sample_batched([[facts_prompt(p.chunk, p.atoms, spec)] for p in part],
                                     max_tokens=FACTS_TOKENS, temperature=0.5,
                                     questions=0)  # (as ingest asks: FACTS_LIMITS)
        stored = []
        for p, (reply,) in zip(part, replies, strict=True):
            facts = [f for f in attribute(parse_facts(reply), p.atoms) if f]
            relations += sum(len(f.relations) for f in facts)
            stored.append(ChunkQuestions(p.chunk.id, [], empty, complete=False, facts=facts))
        iso.store.add_questions(stored)
        done += len(part)
        print(f"facts of {done}/{len(pending)} chunks", file=sys.stderr)
    return relations


def measure(iso: Isotope, items: list[dict[str, Any]], modes: list[str], ask: bool
            ) -> dict[str, Any]:
    """Each mode's shares (percent) of questions with both passages, the answering one and
    the first one in the top ``K``; with ``ask``, answers containing the answer."""
    plain = evaluation.searcher(iso)

    def search(query: str, mode: str, k: int) -> tuple[list[str], float, str]:
        if mode != ANSWER_PASSAGES:
            return plain(query, mode, k)
        response = iso.search(query, for_answer=True)
        return [evaluation.passage_id(r.chunk) for r in response.results], 0.0, ""

    said: dict[str, Any] = {}
    for mode in modes:
        both = second = first = 0
        times: list[float] = []
        missed: list[str] = []
        for item in items:
            started = time.perf_counter()
            found, _, _ = search(item["question"], mode, K)
            times.append(time.perf_counter() - started)
            a, b = str(item["first_pid"]) in found, str(item["second_pid"]) in found
            first, second, both = first + a, second + b, both + (a and b)
            if not (a and b):
                missed.append(item["id"])
        n = len(items)
        times.sort()
        said[mode] = {"both_at_5": round(100 * both / n, 1),
                      "answering_at_5": round(100 * second / n, 1),
                      "first_at_5": round(100 * first / n, 1),
                      "p50_ms": round(1000 * times[n // 2], 2), "missed": missed}
    if ask:
        contained = wrong = sure_wrong = 0
        kinds: dict[str, int] = {}
        for item in items:
            answered = iso.ask(item["question"])
            right = item["answer"].lower() in (answered.answer or "").lower()
            contained += right
            wrong += answered.answer_kind == "generated" and not right
            sure_wrong += (answered.answer_kind == "generated" and not right
                           and (answered.answer_confidence or 0) >= 0.8)
            kinds[answered.answer_kind or ""] = kinds.get(answered.answer_kind or "", 0) + 1
        said["ask_contains_answer"] = round(100 * contained / len(items), 1)
        said["ask_generated_without_answer"] = round(100 * wrong / len(items), 1)
        said["ask_generated_without_answer_confident"] = sure_wrong
        said["ask_kinds"] = kinds
    return said


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="only check the questions' rules (exit 1 when one is broken)")
    parser.add_argument("--questions", choices=["now", "later"], default="now",
                        help="later: ingest without generating questions (no model call)")
    parser.add_argument("--ask", action="store_true",
                        help="also ask every question (the local answer model)")
    parser.add_argument("--reuse-index", action="store_true",
                        help="search the index a previous run built, without ingesting")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--graph", action="store_true",
                        help="with the knowledge graph: adds the graph mode and hybrid with it")
    parser.add_argument("--graph-weights", default="0.5,1,2",
                        help="the graph signal's weights in hybrid (with --graph)")
    parser.add_argument("--passages", type=int, default=None,
                        help="only the first N passages and the questions' gold passages "
                        "(a quicker, easier run: fewer passages to tell apart)")
    args = parser.parse_args()
    passages, items = load()
    broken = check(passages, items)
    if broken or args.check:
        sys.exit(1 if broken else 0)
    if args.passages is not None:
        gold = {str(i[k]) for i in items for k in ("first_pid", "second_pid")}
        passages = [p for n, p in enumerate(passages)
                    if n < args.passages or str(p["pid"]) in gold]
    name = f"{args.questions}{'-graph' if args.graph else ''}"
    index = OUT / f"graph-{len(passages)}-{name}"
    started = time.perf_counter()
    progress = passages_done(50)
    with Isotope.open(index, cache_dir=OUT / "cache-graph", graph=args.graph) as iso:
        built = not (args.reuse_index and iso.store.counts()["chunks"])
        if built:  # (--reuse-index with no index there yet builds it)
            iso.ingest_chunks(evaluation.chunks_of(passages), progress=progress,
                              questions=args.questions)
            if args.graph and args.questions == "later":
                facts_only(iso)
        ingest_s = round(time.perf_counter() - started, 1)
        modes = ["hybrid", "chunks-bm25", "chunks-dense"]
        if args.questions == "now":
            modes.insert(1, evaluation.WITHOUT_QUESTIONS)
        if args.graph:
            weights = args.graph_weights.split(",")
            modes += ["graph", *(f"{evaluation.WITH_GRAPH}{w}" for w in weights),
                      ANSWER_PASSAGES]
        said = {"passages": len(passages), "questions": len(items),
                "generated_questions": iso.store.counts()["questions"],
                "entities": len(iso.entities(1_000_000)) if args.graph else None,
                "relations": len(iso.store.relations()) if args.graph else None,
                "ingest_s": ingest_s if built else None,
                **measure(iso, items, modes, args.ask)}
    (OUT / f"graph-{len(passages)}-{name}.json").write_text(json.dumps(said, indent=1))
    if args.json:
        print(json.dumps(said, indent=1))
        return
    print(f"{len(items)} two-hop questions over {len(passages)} passages "
          f"({said['generated_questions']} generated questions" + (
              f", {said['entities']} entities, {said['relations']} relations)"
              if args.graph else ")"))
    print(f"| mode | both at {K} | answering at {K} | first at {K} | p50 ms |")
    print("|---|---|---|---|---|")
    for mode in modes:
        m = said[mode]
        print(f"| {mode} | {m['both_at_5']} | {m['answering_at_5']} | {m['first_at_5']} | "
              f"{m['p50_ms']} |")
    if args.ask:
        print(f"ask contains the answer: {said['ask_contains_answer']} %; generated "
              f"without it: {said['ask_generated_without_answer']} % (with "
              f"answer_confidence >= 0.8: {said['ask_generated_without_answer_confident']}); "
              f"kinds: {said['ask_kinds']}")


if __name__ == "__main__":
    main()
