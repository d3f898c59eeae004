"""Retrieval evaluation: Recall@1/2/5 and MRR@10 of the gold passage among the first
distinct chunks, for every retrieval mode, side by side (the protocol of arXiv:2405.12363:
each passage is one chunk, each question a query).

Input files are JSON lines: passages (``pid``, ``text``, optional ``title``) and queries
(``question``, ``gold_pid``, optional ``qid``), as in ``../shared/eval/squad-dev``.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from isotope.errors import IsotopeError
from isotope.models import Chunk

if TYPE_CHECKING:
    from isotope.index import Isotope

RECALL_AT = (1, 2, 5)
MRR_AT = 10


@dataclass
class ModeScores:
    mode: str
    recall: dict[int, float]
    mrr: float
    latency_p50_ms: float
    latency_p95_ms: float
    confidence: dict[str, Any] = field(default_factory=dict)
    """Per suggested action: the thresholds in effect, the share of questions that got
    it and their Recall@1/@5; and the thresholds this data suggests."""
    split: dict[str, dict[str, float]] = field(default_factory=dict)
    """R@1 on the ``easy`` questions (chunk BM25 alone ranks their passage first) and the
    ``hard`` ones, when ``chunks-bm25`` is among the modes scored."""


WITHOUT_QUESTIONS = "hybrid-no-questions"
"""A pseudo-mode: ``hybrid`` with the question signals left out. ``isotope eval`` scores
it on its index before the questions are made (what the index gives without generated
questions); on an index that has them, the chunks' keyword text still holds their
words."""
WITH_GRAPH = "hybrid graph="
"""The prefix of :func:`searcher`'s mode ``hybrid graph=W``: hybrid, graph signal at W."""

QUESTION_SIGNALS = {"questions-dense": 0.0, "questions-bm25": 0.0}


DELIVER_PRECISION = 0.9
"""`deliver` from the lowest top score above which the first result is right this often."""
REFINE_RECALL = 0.5
"""`refine_query` under the highest top score just below which Recall@5 is under this: of
the questions scoring nearest under it (a band of :data:`REFINE_BAND` of them), fewer than
half find the right passage among the first five."""
REFINE_BAND = 0.05
"""Share of the questions (at least 5) in the band :data:`REFINE_RECALL` looks at. A local
rule: a cumulative one (recall of all the questions under a score) puts ``refine`` at
``deliver`` when many questions have no answer in the index."""
REFINE_RIGHT = 0.05
"""By index size (``hybrid``'s :data:`isotope.search.retrieval.HYBRID_BY_SIZE`), ``refine``
is also at most the score under which fall this share of the questions whose first result
is right: a right first result is told to rephrase at most one time in twenty by its
score. On an index of a few chunks every answerable question finds its passage among the
first five, so :data:`REFINE_RECALL` there only marks where the unanswerable questions
outnumber the answerable ones; where the two overlap (3 and 4 chunks) that put 15-19% of
the right first results under ``refine``."""


def calibrate(tops: Sequence[float], hit1: Sequence[bool], hit5: Sequence[bool],
              right_under: float | None = None) -> tuple[float, float]:
    """(deliver, refine) thresholds for these top scores and outcomes (hit1: the right
    passage first; hit5: among the first five; a question the index cannot answer has
    neither).

    ``deliver``: the lowest top score from which the first result is right for
    :data:`DELIVER_PRECISION` (90%) of the questions scoring as high or higher.
    ``refine``: the highest top score just under which (a band of :data:`REFINE_BAND` of
    the questions) fewer than :data:`REFINE_RECALL` (half) of the questions find the
    right passage among the first five; with ``right_under`` (:data:`REFINE_RIGHT` for
    the thresholds by index size), no higher than the score under which fall that share
    of the questions whose first result is right. Never above ``deliver``."""
    order = sorted(range(len(tops)), key=lambda i: -tops[i])
    deliver, right = 1.0, 0
    for seen, i in enumerate(order, start=1):
        right += hit1[i]
        if right / seen >= DELIVER_PRECISION:
            deliver = tops[i]
    rising = order[::-1]
    band = max(5, round(REFINE_BAND * len(rising)))
    refine = 0.0
    for j in range(band, len(rising)):  # rising[j - band:j] score just under rising[j]
        if sum(hit5[i] for i in rising[j - band : j]) < REFINE_RECALL * band:
            refine = tops[rising[j]]
    firsts = sorted(tops[i] for i in rising if hit1[i])
    if right_under is not None and firsts:  # (at most that share under it, once rounded)
        refine = min(refine, math.floor(1000 * firsts[int(right_under * len(firsts))]) / 1000)
    return round(deliver, 3), round(min(refine, deliver), 3)


def action_levels(actions: Sequence[str], hit1: Sequence[bool], hit5: Sequence[bool]
                  ) -> dict[str, dict[str, float]]:
    """Share of questions, Recall@1 and Recall@5 per suggested action."""
    levels: dict[str, dict[str, float]] = {}
    for name in ("deliver", "query_more", "refine_query"):
        idx = [i for i, a in enumerate(actions) if a == name]
        levels[name] = {
            "share": round(100 * len(idx) / max(1, len(actions)), 1),
            "R@1": round(100 * sum(hit1[i] for i in idx) / len(idx), 1) if idx else 0.0,
            "R@5": round(100 * sum(hit5[i] for i in idx) / len(idx), 1) if idx else 0.0,
        }
    return levels


@dataclass
class EvalResult:
    passages: int
    queries: int
    modes: list[ModeScores] = field(default_factory=list)
    ingest: dict[str, Any] = field(default_factory=dict)

    def confidence_table(self) -> list[dict[str, Any]]:
        """Per mode and suggested action: thresholds, share of questions, recall."""
        rows = []
        for m in self.modes:
            c = m.confidence
            for name, level in c.get("levels", {}).items():
                rows.append({"mode": m.mode, "action": name, "share %": level["share"],
                             "R@1": level["R@1"], "R@5": level["R@5"],
                             "deliver/refine": f"{c['thresholds']['deliver']:.2f}/"
                                               f"{c['thresholds']['refine']:.2f}",
                             "suggested": f"{c['suggested']['deliver']:.2f}/"
                                          f"{c['suggested']['refine']:.2f}"})
        return rows

    def table(self) -> list[dict[str, Any]]:
        return [
            {"mode": m.mode, **{f"R@{k}": round(v, 1) for k, v in m.recall.items()},
             f"MRR@{MRR_AT}": round(m.mrr, 1), "p50 ms": round(m.latency_p50_ms, 2),
             "p95 ms": round(m.latency_p95_ms, 2),
             **{f"R@1 {name} ({part['queries']:.0f})": part["R@1"]
                for name, part in m.split.items()}}
            for m in self.modes
        ]


PASSAGE_EXAMPLE = '{"pid": "p1", "text": "The passage.", "title": "optional"}'
QUERY_EXAMPLE = '{"question": "What does the passage say?", "gold_pid": "p1"}'


def read_jsonl(path: Path, required: Sequence[str], strings: Sequence[str] = (),
               example: str | None = None) -> list[dict[str, Any]]:
    """The JSON objects of a JSON lines file (blank lines skipped), each with the
    ``required`` fields, those in ``strings`` being strings. A file that cannot be read,
    or a line that is not UTF-8, not JSON, not an object or misses a field, is an
    :class:`IsotopeError` naming the file and line, and showing ``example`` (a line)."""
    example = example or "{" + ", ".join(f'"{k}": ...' for k in required) + "}"
    fix = f"each line must be one JSON object, e.g. {example}"
    rows = []
    if path.exists() and not path.is_dir() and not path.is_file():
        raise IsotopeError(f"{path} is not a regular file (a FIFO, socket or device); give "
                           f"a JSON lines file ({fix})")
    try:
        handle = path.open("rb")
    except IsADirectoryError:
        raise IsotopeError(f"{path} is a folder; give a JSON lines file ({fix})") from None
    except FileNotFoundError:
        raise IsotopeError(f"{path}: no such file; give a JSON lines file ({fix})") from None
    except OSError as exc:
        raise IsotopeError(f"{path} cannot be read ({exc.strerror or exc}); check the path "
                           "and its permissions") from None
    with handle:
        try:
            for number, raw in enumerate(handle, start=1):
                try:
                    line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    raise IsotopeError(f"{path}:{number}: not UTF-8 text ({exc.reason} at byte "
                                       f"{exc.start} of the line); save the file as UTF-8"
                                       ) from None
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise IsotopeError(f"{path}:{number}: not JSON ({exc.msg} at column "
                                       f"{exc.colno}); {fix}") from None
                if not isinstance(row, dict):
                    raise IsotopeError(f"{path}:{number}: not a JSON object but a "
                                       f"{type(row).__name__}; {fix}")
                missing = [k for k in required if k not in row]
                if missing:
                    raise IsotopeError(f"{path}:{number}: missing {', '.join(missing)}; {fix}")
                for key in strings:
                    if not isinstance(row[key], str):
                        raise IsotopeError(f"{path}:{number}: {key} must be a string, not "
                                           f"{json.dumps(row[key])}; {fix}")
                rows.append(row)
        except OSError as exc:  # e.g. an I/O error in the middle of the file
            raise IsotopeError(f"{path} cannot be read ({exc.strerror or exc})") from None
    return rows


def load(passages_path: Path, queries_path: Path, limit_passages: int | None = None,
         *, start: int = 0) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Passages (the first ``limit_passages`` from number ``start``) and the queries whose
    gold passage is among them. Files that cannot be read or lines that are not what
    :func:`read_jsonl` expects are :class:`IsotopeError`."""
    if limit_passages is not None and limit_passages < 1:
        raise IsotopeError(f"limit_passages must be at least 1, not {limit_passages}")
    if start < 0:
        raise IsotopeError(f"start must be at least 0, not {start}")
    passages = read_jsonl(passages_path, ("pid", "text"), ("text",), PASSAGE_EXAMPLE)
    passages = passages[start:][:limit_passages]
    pids = {str(p["pid"]) for p in passages}
    queries = [q for q in read_jsonl(queries_path, ("question", "gold_pid"),
                                     ("question",), QUERY_EXAMPLE)
               if str(q["gold_pid"]) in pids]
    if not passages or not queries:
        raise IsotopeError(f"no passages with questions in {passages_path} and {queries_path}")
    return passages, queries


def chunks_of(passages: Sequence[dict[str, Any]], documents: str | None = None) -> list[Chunk]:
    """One chunk per passage. Each passage is its own source, or with ``documents`` (a
    field such as ``title``) the passages sharing that field's value are the chunks of one
    source, in order, each keeping its id in ``metadata["pid"]``."""
    if documents is None:
        return [Chunk(text=p["text"], source=str(p["pid"]),
                      metadata={"title": p["title"]} if p.get("title") else {})
                for p in passages]
    missing = [str(p["pid"]) for p in passages if documents not in p]
    if missing:
        raise IsotopeError(f"passage {missing[0]} has no {documents!r} field to group by; "
                           f"give every passage one, or leave out --documents")
    return [Chunk(text=p["text"], source=str(p[documents]),
                  metadata={"pid": str(p["pid"]), "title": str(p[documents])})
            for p in passages]


def from_log(iso: Isotope) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A question/passage set from the index's useful marks (``isotope feedback``) that
    were learned or approved, no user's beyond a quarter (:func:`learning.vetted`): each
    marked chunk a passage (``pid``: its id), each query marked useful for it a question
    (``gold_pid``: the chunk), once per query and chunk; chunks no longer stored are left
    out."""
    from isotope.search.learning import vetted

    marks, _ = vetted(iso.store, 1_000_000)  # (learned or approved, bounded per user)
    pairs = sorted({(m.query, m.chunk_id) for m in marks})
    chunks = iso.store.get_chunks(sorted({c for _, c in pairs}))
    passages = [{"pid": c.id, "text": c.text, "source": c.source} for c in chunks.values()]
    queries = [{"question": q, "gold_pid": c} for q, c in pairs if c in chunks]
    return passages, queries


def passage_id(chunk: Chunk) -> str:
    """The passage a chunk of :func:`chunks_of` is."""
    return str(chunk.metadata.get("pid", chunk.source))


Search = Callable[[str, str, int], tuple[list[str], float, str]]
"""``search(query, mode, k) -> (source ids best first, top score, suggested action)``."""


def searcher(iso: Isotope, source_of: Callable[[Chunk], str] = passage_id, *,
             transform: bool = False) -> Search:
    """The search function :func:`evaluate` takes, over an index: the results' sources
    (or what ``source_of`` makes of each chunk), the response's top score and suggested
    action. With ``transform``, keyword queries are first rewritten into questions by the
    model. A mode ``hybrid graph=W`` is hybrid with the graph signal at weight ``W``."""
    def search(query: str, mode: str, k: int) -> tuple[list[str], float, str]:
        if mode == WITHOUT_QUESTIONS:
            response = iso.search(query, k, mode="hybrid", transform=transform,
                                  weights=QUESTION_SIGNALS)
        elif mode.startswith(WITH_GRAPH):
            response = iso.search(query, k, mode="hybrid", transform=transform,
                                  weights={"graph": float(mode.removeprefix(WITH_GRAPH))})
        else:
            response = iso.search(query, k, mode=mode, transform=transform)
        return ([source_of(r.chunk) for r in response.results], response.top_score,
                response.suggested_action)

    return search


def evaluate(
    search: Search,
    queries: Sequence[dict[str, Any]],
    modes: Sequence[str],
    *,
    thresholds: Callable[[str], tuple[float, float]] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    easy: Sequence[bool] | None = None,
) -> list[ModeScores]:
    """Score ``search`` (see :data:`Search`) for each mode: recall, MRR, latency, and the
    share and recall of the questions at each suggested action. ``thresholds(mode) ->
    (deliver, refine)`` are the thresholds in effect, reported with the ones this data
    suggests. ``easy``: the queries chunk BM25 alone answers first (each score's R@1 is
    split into those and the rest); default: where the ``chunks-bm25`` scored here
    does."""
    scores = []
    hits: dict[str, list[bool]] = {}
    for mode in modes:
        found: list[list[str]] = []
        tops: list[float] = []
        actions: list[str] = []
        latency: list[float] = []
        for n, query in enumerate(queries):
            started = time.perf_counter()
            sources, top, suggested_action = search(query["question"], mode, MRR_AT)
            latency.append(time.perf_counter() - started)
            found.append(sources)
            tops.append(top)
            actions.append(suggested_action)
            if progress and n % 100 == 0:
                progress(mode, n, len(queries))
        gold = [str(q["gold_pid"]) for q in queries]
        recall = {k: 100 * sum(g in f[:k] for g, f in zip(gold, found, strict=True)) / len(gold)
                  for k in RECALL_AT}
        mrr = 100 * sum(1 / (f.index(g) + 1) if g in f[:MRR_AT] else 0.0
                        for g, f in zip(gold, found, strict=True)) / len(gold)
        ordered = sorted(latency)
        hit1 = [g in f[:1] for g, f in zip(gold, found, strict=True)]
        hit5 = [g in f[:5] for g, f in zip(gold, found, strict=True)]
        hits[mode] = hit1
        suggested = calibrate(tops, hit1, hit5)
        deliver, refine = thresholds(mode) if thresholds else suggested
        confidence = {
            "thresholds": {"deliver": deliver, "refine": refine},
            "levels": action_levels(actions, hit1, hit5),
            "suggested": {"deliver": suggested[0], "refine": suggested[1]},
        }
        scores.append(ModeScores(
            mode, recall, mrr, 1000 * statistics.median(latency),
            1000 * ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], confidence,
        ))
    if easy is None and "chunks-bm25" in hits:
        easy = hits["chunks-bm25"]
    if easy is not None:  # where keywords already find the passage, and where not
        for score in scores:
            for name, wanted in (("easy", True), ("hard", False)):
                own = [h for h, e in zip(hits[score.mode], easy, strict=True) if e == wanted]
                score.split[name] = {"queries": len(own), "R@1": round(
                    100 * sum(own) / len(own), 1) if own else 0.0}
    return scores


def answered_first(search: Search, queries: Sequence[dict[str, Any]], mode: str
                   ) -> list[bool]:
    """Whether ``mode`` puts each query's gold passage first."""
    return [search(q["question"], mode, 1)[0][:1] == [str(q["gold_pid"])] for q in queries]


def chart(result: EvalResult, path: Path) -> Path:
    """A PNG bar chart of Recall@k and MRR per mode."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        from isotope.errors import MissingDependency

        raise MissingDependency.from_import(exc, "the evaluation chart", "eval") from exc
    metrics = [f"R@{k}" for k in RECALL_AT] + [f"MRR@{MRR_AT}"]
    rows = result.table()
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(rows)), 4.5))
    width = 0.8 / len(metrics)
    for i, metric in enumerate(metrics):
        xs = [j + i * width for j in range(len(rows))]
        bars = ax.bar(xs, [r[metric] for r in rows], width, label=metric)
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(rows))])
    ax.set_xticklabels([r["mode"] for r in rows], rotation=20, ha="right")
    ax.set_ylim(0, 100)
    ax.set_ylabel("%")
    ax.set_title(f"isotope eval: {result.passages} passages, {result.queries} questions")
    ax.legend(ncol=len(metrics), fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
