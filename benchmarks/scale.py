"""Scale benchmark: an index of N questions on the embedded store, built through the
public API, then searched.

    .venv/bin/python benchmarks/scale.py --questions 100000 [--json] [--rebuild]
    .venv/bin/python benchmarks/scale.py --questions 1000000 --learned 5000
    .venv/bin/python benchmarks/scale.py --questions 100000 --graph [--json]
    .venv/bin/python benchmarks/scale.py --questions 100000 --adapter

The index has the usual proportions (about 4.25 questions per atom and 4 atoms per chunk,
as isotope keeps for SQuAD passages), built with ``Isotope.ingest_chunks`` by a model
stand-in (no language model) and an embedder stand-in whose vectors have real structure:

- the real texts are the sentences of ../shared/eval/squad-dev's passages and its
  questions, embedded once with the bundled model (cached in the work folder);
- a synthetic atom is a real sentence (with a marker ``(item N)``), its vector that
  sentence's real vector mixed with two other real sentences' and a little noise (so that
  the ~50 atoms built on one sentence are related, not near copies);
- its questions are real SQuAD questions of the first half (with a marker ``(N.k)``), each
  vector its atom's mixed with that real question's vector and noise; a chunk's vector is
  the mean of its atoms'. Vectors follow from the markers, so the exact float32 baseline
  can be rebuilt;
- a query asks about one stored atom in words never used to build the index: a real
  question of the second half (with a marker ``(about N)``), its vector the atom's mixed
  with that question's, as a user asks about a fact in their own words. (Held-out
  questions alone, about nothing stored, put every stored question at cosine 0.28 to 0.33
  of the query, near ties that no approximate index ranks like exact search.)

``--adapter`` (issue 66) fits the index's query adapter three times (``Isotope.fit_adapter``:
its questions read and the fit; wall and CPU seconds, the CPU time of every thread, which
a loaded box inflates less), then times hybrid and chunks-dense searches
without and with it, each query searched both ways in turn; the fit is forgotten after.

``--graph`` (issue 46) builds a second index of the same chunks with the knowledge graph
(setting ``graph``; the stand-in model names each passage's runs of capitalised words as
its entities and joins those of one sentence by the words between them, as a small model
does) and prints, for both, the disk per question and the latency of hybrid, and of
hybrid with the graph signal at weight 1.

The stand-in embedder declares the bundled model's id, so a fresh ``isotope query``
process embeds its query with the real model against this index.

Measured, with the exact index (float32, numpy) as the baseline in the same run:
questions-dense and hybrid search latency (query embedding excluded), recall@10 of the
index against exact search with no filter and with a filter keeping 1% of chunks, write
then search, delete then search, a fresh ``isotope query --raw`` process (time and peak
RSS), disk per question, and the store's build rate. Generated data lives in the work
folder (``$ISOTOPE_BENCH_DIR``, default ``~/.cache/isotope-bench``), never in the
repository.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from isotope import Chunk, Isotope
from isotope.ann import search_groups
from isotope.ann.exact import ExactIndex
from isotope.ann.layered import LayeredIndex
from isotope.embedders import Embedder, Vectors
from isotope.ingest.sentences import sentences
from isotope.providers import LLM, Prompt
from isotope.stores.sqlite_vectors import segments_of

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "eval" / "squad-dev"
WORK = Path(os.environ.get("ISOTOPE_BENCH_DIR", Path.home() / ".cache" / "isotope-bench"))
MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
ATOMS_PER_CHUNK = 4
CHUNKS_PER_SOURCE = 10
SHARDS = 100
"""Each chunk has metadata ``shard`` 0..99: ``--where shard=7`` keeps 1% of chunks."""
ITEM = re.compile(r"\(item (\d+)\)")
QUESTION = re.compile(r"\((\d+)\.(\d+)\)")
ABOUT = re.compile(r" \(about (\d+), (\d+)\)")
STATEMENT = re.compile(r"Statement: [^\n]*?\(item (\d+)\)")


# -- real vectors ------------------------------------------------------------------------
def real_bank() -> tuple[list[str], Vectors, list[str], Vectors]:
    """SQuAD dev sentences and questions with their real embeddings (cached)."""
    cache = WORK / "real-texts-v1.npz"
    if cache.exists():
        saved = np.load(cache, allow_pickle=False)
        return (list(saved["sentences"]), saved["sentence_vectors"],
                list(saved["questions"]), saved["question_vectors"])
    from isotope.embedders import create
    from isotope.settings import Settings

    found = [s for line in (DATA / "passages.jsonl").open()
             for s in sentences(json.loads(line)["text"]) if len(s.split()) >= 6]
    said = list(dict.fromkeys(found))
    asked = list(dict.fromkeys(json.loads(line)["question"].strip()
                               for line in (DATA / "queries.jsonl").open()))
    model = create("local/all-minilm-l6-v2", Settings())
    print(f"embedding {len(said)} sentences and {len(asked)} questions once "
          f"(cached in {cache})", file=sys.stderr)
    vectors = []
    texts = said + asked
    for start in range(0, len(texts), 256):
        vectors.append(model.embed(texts[start : start + 256]))
        print(f"  {min(start + 256, len(texts))}/{len(texts)}", file=sys.stderr, end="\r")
    every = np.vstack(vectors).astype(np.float32)
    WORK.mkdir(parents=True, exist_ok=True)
    np.savez(cache, sentences=np.array(said), sentence_vectors=every[: len(said)],
             questions=np.array(asked), question_vectors=every[len(said) :])
    return said, every[: len(said)], asked, every[len(said) :]


def noise(rng: np.random.Generator, dim: int) -> Vectors:
    """A random direction of length about 1 (so its weight in a mix is what it says)."""
    return rng.standard_normal(dim) / np.sqrt(dim)


class Synthesis:
    """Texts and vectors of synthetic atoms, questions and chunks, from their markers."""

    def __init__(self, bank: tuple[list[str], Vectors, list[str], Vectors]) -> None:
        self.sentences, self.sentence_vectors, self.questions, self.question_vectors = bank
        self.query_index = {q: i for i, q in enumerate(self.questions)}
        self.half = len(self.questions) // 2
        self.atoms = 0
        """Atoms built (set by the benchmark): queries ask about these."""

    def _rng(self, *key: int) -> np.random.Generator:
        return np.random.default_rng([7, *key])

    def atom_text(self, n: int) -> str:
        s = self._rng(n, 0).integers(len(self.sentences))
        text = self.sentences[s].rstrip(".")
        return f"{text} (item {n})."

    def atom_vector(self, n: int) -> Vectors:
        rng = self._rng(n, 0)
        s, a, b = (rng.integers(len(self.sentences)) for _ in range(3))
        mix = (self.sentence_vectors[s] + 0.8 * self.sentence_vectors[a]
               + 0.6 * self.sentence_vectors[b]
               + 0.1 * noise(rng, self.sentence_vectors.shape[1]))
        return mix / np.linalg.norm(mix)

    def questions_of(self, n: int) -> int:
        return 5 if n % 4 == 0 else 4  # 4.25 per atom

    def question_text(self, n: int, k: int) -> str:
        j = self._rng(n, k + 1).integers(self.half)
        return f"{self.questions[j].rstrip('?').strip()} ({n}.{k})?"

    def question_vector(self, n: int, k: int) -> Vectors:
        rng = self._rng(n, k + 1)
        j = rng.integers(self.half)
        mix = (self.atom_vector(n) + 0.6 * self.question_vectors[j]
               + 0.25 * noise(rng, self.question_vectors.shape[1]))
        return mix / np.linalg.norm(mix)

    def query_text(self, i: int) -> str:
        """The ``i``-th query: a held-out real question, about a stored atom."""
        rng = self._rng(10**9, i)
        j = self.half + int(rng.integers(len(self.questions) - self.half))
        return (f"{self.questions[j].rstrip('?').strip()} (about {rng.integers(self.atoms)}, "
                f"{j})?")

    def query_vector(self, text: str, n: int, j: int) -> Vectors:
        rng = np.random.default_rng(_seed(text))
        mix = (self.atom_vector(n) + 0.6 * self.question_vectors[j]
               + 0.25 * noise(rng, self.question_vectors.shape[1]))
        return mix / np.linalg.norm(mix)

    def vector(self, text: str) -> Vectors:
        """Any text's vector: a query's real one, a question's or atom's from its marker,
        a chunk's as the mean of its atoms'."""
        if text in self.query_index:
            return self.question_vectors[self.query_index[text]]
        about = ABOUT.search(text)
        if about:
            return self.query_vector(text, int(about.group(1)), int(about.group(2)))
        asked = QUESTION.search(text)
        if asked:
            return self.question_vector(int(asked.group(1)), int(asked.group(2)))
        items = [int(m) for m in ITEM.findall(text)]
        if items:
            mean = np.mean([self.atom_vector(n) for n in items], axis=0)
            return mean / np.linalg.norm(mean)
        rng = np.random.default_rng(_seed(text))
        made = rng.standard_normal(self.sentence_vectors.shape[1])
        return made / np.linalg.norm(made)


def _seed(text: str) -> int:
    """A seed from ``text``, the same in every run (Python's ``hash`` of a str changes
    from process to process, and with it the queries and every figure)."""
    return zlib.crc32(text.encode("utf-8"))


class StandInEmbedder(Embedder):
    model_id = MODEL_ID
    dim = 384
    batch_size = 4096

    def __init__(self, synthesis: Synthesis) -> None:
        self.synthesis = synthesis

    def embed_batch(self, texts: Sequence[str]) -> Vectors:
        return np.stack([self.synthesis.vector(t) for t in texts]).astype(np.float32)


class StandInModel(LLM):
    """Writes each atom's synthetic questions (one call per atom)."""

    model_id = "bench/stand-in"

    def __init__(self, synthesis: Synthesis) -> None:
        self.synthesis = synthesis

    def complete_batch(self, prompts: Sequence[Prompt], *, max_tokens: int = 256,
                       temperature: float = 0.0, json_schema: dict[str, Any] | None = None
                       ) -> list[str]:
        replies = []
        for prompt in prompts:
            if FACTS in prompt[-1]["content"]:
                replies.append(stand_in_facts(prompt[-1]["content"]))
                continue
            found = STATEMENT.search(prompt[-1]["content"])
            n = int(found.group(1)) if found else 0
            replies.append("\n".join(
                f"{k + 1}. {self.synthesis.question_text(n, k)}"
                for k in range(self.synthesis.questions_of(n))))
        return replies


FACTS = "New task: no questions."
"""What a chunk's facts prompt (setting ``graph``) says, and a question prompt does not."""
NAME = re.compile(r"(?:[A-Z][\w'-]+ )*[A-Z][\w'-]+")


def stand_in_facts(content: str) -> str:
    """A facts reply for the passage in ``content``: its runs of capitalised words (not
    the first word of a sentence alone) are entities, and the first two of each sentence
    are related by the words between them."""
    passage = content.split("Passage:\n", 1)[-1].split(FACTS, 1)[0]
    names: list[str] = []
    relations: list[str] = []
    for sentence in re.split(r"(?<=[.!?])\s+", re.sub(r"\(item \d+\)", "", passage)):
        found = [m for m in NAME.finditer(sentence) if m.start() > 0 or " " in m.group(0)]
        names += [m.group(0) for m in found if m.group(0) not in names]
        if len(found) > 1:
            between = sentence[found[0].end():found[1].start()].strip(" ,") or "and"
            relations.append(f"{found[0].group(0)} | {' '.join(between.split()[:6])} | "
                             f"{found[1].group(0)}")
    return ("Entities: " + "; ".join(f"{n} (thing)" for n in names) + "\nRelations: "
            + "; ".join(relations)) if names else "Entities: none\nRelations: none"


# -- building ----------------------------------------------------------------------------
def open_index(path: Path, synthesis: Synthesis, **settings: Any) -> Isotope:
    return Isotope.open(path, embedder=StandInEmbedder(synthesis),
                        llm=StandInModel(synthesis), cache=False, generation="atom",
                        min_question_similarity=-1.0, dedup_threshold=None, **settings)


def build(path: Path, synthesis: Synthesis, questions: int, **settings: Any
          ) -> dict[str, Any]:
    """Ingest chunks until ``questions`` questions are stored; returns timings, the store's
    rate over each 100,000 questions and the largest the index folder grew meanwhile."""
    chunks_needed = int(np.ceil(questions / (4.25 * ATOMS_PER_CHUNK)))
    started = time.perf_counter()
    store_s, stored, batch = 0.0, 0, 2_000
    per_100k: list[dict[str, float]] = []
    mark = (0, 0.0, started)  # (stored, store_s, time) where the current 100k began
    peak = DiskPeak(path)
    with peak, open_index(path, synthesis, **settings) as iso:
        for first in range(0, chunks_needed, batch):
            made = []
            for c in range(first, min(chunks_needed, first + batch)):
                atoms = range(c * ATOMS_PER_CHUNK, (c + 1) * ATOMS_PER_CHUNK)
                made.append(Chunk(text=" ".join(synthesis.atom_text(n) for n in atoms),
                                  source=f"doc-{c // CHUNKS_PER_SOURCE:06d}",
                                  metadata={"shard": c % SHARDS}))
            report = iso.ingest_chunks(made)
            store_s += report.timings["store"]
            stored += report.questions
            now = time.perf_counter()
            rate = stored / (now - started)
            print(f"  built {stored:,} questions ({rate:,.0f}/s overall, "
                  f"{stored / max(store_s, 1e-9):,.0f}/s in the store)", file=sys.stderr)
            if stored - mark[0] >= 100_000 or first + batch >= chunks_needed:
                done = stored - mark[0]
                # searches while the load goes on: the segments and the log as they are
                held, synthesis.atoms = synthesis.atoms, len(made) and (
                    min(chunks_needed, first + batch) * ATOMS_PER_CHUNK)
                during = timed(lambda q: iso.search(q, k=10, mode="questions-dense"),
                               [synthesis.query_text(i) for i in range(20)])
                synthesis.atoms = held
                segments = segments_of((iso.store.get_meta("vectors") or {}).get(
                    "questions"))
                per_100k.append({
                    "up_to": stored,
                    "store_questions_per_s": round(done / max(store_s - mark[1], 1e-9)),
                    "overall_questions_per_s": round(done / (now - mark[2])),
                    "disk_peak_bytes": peak.peak,
                    "question_segments": len(segments),
                    "dense_p50_ms_meanwhile": ms(during, 50)})
                mark = (stored, store_s, time.perf_counter())  # (the searches left out)
        compact_started = time.perf_counter()
        iso.compact()
        compact_s = time.perf_counter() - compact_started
    return {"build_s": time.perf_counter() - started, "store_s": store_s,
            "compact_s": compact_s, "stored": stored, "per_100k": per_100k,
            "disk_peak_bytes": peak.peak, "resting_bytes": resting_bytes(path)}


class DiskPeak:
    """The largest the files under a folder added up to, sampled twice a second while
    the ``with`` block runs."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.peak = folder, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            self.peak = max(self.peak, folder_bytes(self.folder))

    def __enter__(self) -> DiskPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, folder_bytes(self.folder))


def folder_bytes(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):  # (a file replaced meanwhile)
                total += os.stat(os.path.join(root, name)).st_size
    return total


def resting_bytes(path: Path) -> int:
    """What the index holds at rest: its database and the vector and keyword files its
    meta names (replaced ones still kept for readers excluded)."""
    import sqlite3

    with sqlite3.connect(path / "isotope.db") as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        row = conn.execute("SELECT value FROM meta WHERE key = 'vectors'").fetchone()
    bases = json.loads(row[0]) if row else {}
    named = sum(sum(int(s.get("bytes", 0)) for s in segments_of(b))
                + int((b.get("keywords") or {}).get("bytes", 0)) for b in bases.values())
    return named + sum(p.stat().st_size for p in path.glob("isotope.db*"))


def built_index(synthesis: Synthesis, questions: int, *, graph: bool = False) -> Path:
    """The scale index of ``questions`` questions in the work folder (``graph``: with the
    knowledge graph, its own folder), built first if it is not there (the access, chroma,
    postgres and graph benchmarks measure on it)."""
    path = WORK / f"scale-{questions}{'-graph' if graph else ''}"
    if not (path / "built.json").exists():
        import shutil

        shutil.rmtree(path, ignore_errors=True)
        print(f"building {questions:,} questions in {path}", file=sys.stderr)
        built = build(path, synthesis, questions, **({"graph": True} if graph else {}))
        (path / "built.json").write_text(json.dumps(built))
    return path


# -- measuring ---------------------------------------------------------------------------
def exact_baseline(iso: Isotope, synthesis: Synthesis) -> dict[str, ExactIndex]:
    """Each kind's vectors at float32, recomputed from the markers of the stored texts."""
    conn = iso.store._conn()  # type: ignore[attr-defined]
    made = {}
    sql = {
        "questions": "SELECT q.rowid, c.rowid, q.text FROM questions q JOIN chunks c ON "
                     "c.id = q.chunk_id ORDER BY q.rowid",
        "atoms": "SELECT a.rowid, c.rowid, a.text FROM atoms a JOIN chunks c ON "
                 "c.id = a.chunk_id ORDER BY a.rowid",
        "chunks": "SELECT rowid, rowid, text FROM chunks ORDER BY rowid",
    }
    for kind, query in sql.items():
        rows = conn.execute(query).fetchall()
        vectors = np.empty((len(rows), 384), dtype=np.float32)
        for i, (_, _, text) in enumerate(rows):
            vectors[i] = synthesis.vector(text)
        made[kind] = ExactIndex(np.array([r[0] for r in rows], dtype=np.int64),
                                np.array([r[1] for r in rows], dtype=np.int64), vectors)
    return made


def timed(run: Any, queries: list[str]) -> list[float]:
    times = []
    for query in queries:
        started = time.perf_counter()
        run(query)
        times.append(time.perf_counter() - started)
    return times


def ms(times: list[float], q: float) -> float:
    return round(float(np.percentile(np.array(times) * 1000, q)), 2)


def recall(found: list[list[int]], truth: list[list[int]]) -> float:
    hits = sum(len(set(f) & set(t)) for f, t in zip(found, truth, strict=True))
    return round(hits / max(1, sum(len(t) for t in truth)), 4)


def fresh_query(path: Path, query: str) -> float:
    """Wall seconds of ``isotope query --raw`` in a new process."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "isotope", "query", "--raw", "--json", "--index", str(path),
         query], capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"isotope query failed: {done.stderr}")
    return seconds


def query_process_rss(path: Path, queries: list[str]) -> float:
    """Peak RSS (MB) of a process answering hybrid queries (real embedder) on the index."""
    script = (
        "import sys, json\n"
        "from isotope import Isotope\n"
        "queries = json.loads(sys.stdin.read())\n"
        f"with Isotope.open({str(path)!r}, create=False) as iso:\n"
        "    for q in queries:\n"
        "        iso.search(q, k=10)\n"
        # VmHWM, not ru_maxrss: Linux keeps a forked parent's peak in ru_maxrss
        "peak = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
        "print(int(peak.split()[1]) / 1024)\n")
    done = subprocess.run([sys.executable, "-c", script], input=json.dumps(queries),
                          capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def measure(path: Path, synthesis: Synthesis, built: dict[str, float], n_queries: int
            ) -> dict[str, Any]:
    with open_index(path, synthesis) as iso:
        synthesis.atoms = iso.store.counts()["atoms"]
    queries = [synthesis.query_text(i) for i in range(n_queries)]
    vectors = {q: synthesis.vector(q) for q in queries}
    result: dict[str, Any] = {}
    with open_index(path, synthesis) as iso:
        store = iso.store
        counts = store.counts()
        result["questions"] = counts["questions"]
        result["atoms"], result["chunks"] = counts["atoms"], counts["chunks"]
        bases = store.get_meta("vectors") or {}
        result["vector_indexes"] = {k: v["impl"] for k, v in bases.items()}
        result["segments"] = {k: len(segments_of(v)) for k, v in bases.items()}
        for q in queries:  # warm: the mapped files' pages touched once, as in a server
            iso.search(q, k=10)
        # latency through the public API (the stand-in embedder answers from a table)
        dense = timed(lambda q: iso.search(q, k=10, mode="questions-dense"), queries)
        hybrid = timed(lambda q: iso.search(q, k=10), queries)
        keyword = timed(lambda q: iso.search(q, k=10, mode="questions-bm25"), queries)
        kinds_bm25 = {kind: timed(lambda q, m=f"{kind}-bm25": iso.search(q, k=10, mode=m),
                                  queries) for kind in ("atoms", "chunks")}
        ranked = {kind: [[r.chunk.id for r in iso.search(q, k=10, mode=f"{kind}-bm25").results]
                         for q in queries] for kind in ("atoms", "chunks")}
        # recall of the index against exact float32 search, at the store level
        truth = exact_baseline(iso, synthesis)
        from isotope.search.filters import parse

        allowed = store._allowed(parse({"shard": 7}))  # type: ignore[attr-defined]
        index = store._place.vectors.index("questions")  # type: ignore[attr-defined]
        found, expected, found_f, expected_f = [], [], [], []
        for q in queries:
            v = vectors[q]
            found.append([i for i, _, _ in index.search(v, 10)])
            expected.append([i for i, _, _ in truth["questions"].search(v, 10)])
            found_f.append([i for i, _, _ in index.search(v, 10, allowed)])
            expected_f.append([i for i, _, _ in truth["questions"].search(v, 10, allowed)])
        result["recall_at_10"] = recall(found, expected)
        result["recall_at_10_filtered"] = recall(found_f, expected_f)
        result["filtered_short"] = sum(len(f) < min(10, len(e))
                                       for f, e in zip(found_f, expected_f, strict=True))
        # the same searches with every kind's vectors in exact float32 matrices
        # and keyword search from FTS5, as the store does below 20,000 rows
        loaded = store._place.vectors._loaded  # type: ignore[attr-defined]
        postings = {kind: loaded[kind].keywords for kind in truth}
        for kind in truth:
            loaded[kind].keywords = None
        fts5_bm25 = {kind: timed(lambda q, m=f"{kind}-bm25": iso.search(q, k=10, mode=m),
                                 queries) for kind in ("atoms", "chunks")}
        fts5_ranked = {kind: [[r.chunk.id for r in iso.search(q, k=10,
                                                              mode=f"{kind}-bm25").results]
                              for q in queries] for kind in ("atoms", "chunks")}
        fts5_hybrid = timed(lambda q: iso.search(q, k=10), queries)
        saved = {kind: loaded[kind].index for kind in truth}
        for kind, exact in truth.items():
            loaded[kind].index = LayeredIndex(exact)
        exact_dense = timed(lambda q: iso.search(q, k=10, mode="questions-dense"), queries)
        exact_hybrid = timed(lambda q: iso.search(q, k=10), queries)
        for kind, layer in postings.items():
            loaded[kind].keywords = layer
        exact_bare = timed(lambda q: search_groups(truth["questions"], vectors[q], 10, 3),
                           queries)
        for kind, layered in saved.items():
            loaded[kind].index = layered
        bare = timed(lambda q: search_groups(saved["questions"], vectors[q], 10, 3), queries)
        result.update({
            "questions_dense_p50_ms": ms(dense, 50), "questions_dense_p99_ms": ms(dense, 99),
            "hybrid_p50_ms": ms(hybrid, 50), "hybrid_p95_ms": ms(hybrid, 95),
            "questions_bm25_p50_ms": ms(keyword, 50), "questions_bm25_p99_ms": ms(keyword, 99),
            "vector_search_p50_ms": ms(bare, 50),
            "exact_questions_dense_p50_ms": ms(exact_dense, 50),
            "exact_questions_dense_p99_ms": ms(exact_dense, 99),
            "exact_hybrid_p50_ms": ms(exact_hybrid, 50),
            "exact_vector_search_p50_ms": ms(exact_bare, 50),
            "hybrid_fts5_p50_ms": ms(fts5_hybrid, 50),
            "keyword_indexes": {k: "postings" if v is not None else "fts5"
                                for k, v in postings.items()},
        })
        for kind in ("atoms", "chunks"):
            result[f"{kind}_bm25_p50_ms"] = ms(kinds_bm25[kind], 50)
            result[f"{kind}_bm25_p99_ms"] = ms(kinds_bm25[kind], 99)
            result[f"fts5_{kind}_bm25_p50_ms"] = ms(fts5_bm25[kind], 50)
            result[f"fts5_{kind}_bm25_p99_ms"] = ms(fts5_bm25[kind], 99)
            result[f"{kind}_bm25_same_as_fts5"] = round(sum(
                a == b for a, b in zip(ranked[kind], fts5_ranked[kind], strict=True))
                / len(queries), 4)
        # write, then read
        started = time.perf_counter()
        iso.ingest_chunks([Chunk(text="The aquarium in Tromso feeds its seals at noon "
                                 "(item 99999999).", source="late-source",
                                 metadata={"shard": 1})])
        wrote = time.perf_counter() - started
        started = time.perf_counter()
        hits = iso.search("When does the aquarium feed its seals?", k=10).results
        result["write_s"] = round(wrote, 3)
        result["write_then_search_s"] = round(time.perf_counter() - started, 3)
        result["write_found"] = any(r.chunk.source == "late-source" for r in hits)
        # delete, then read: none of its questions in any mode
        from isotope.search.retrieval import MODES

        iso.delete("late-source")
        result["delete_gone_in_every_mode"] = not any(
            r.chunk.source == "late-source"
            for mode in MODES
            for r in iso.search("When does the aquarium feed its seals?", k=10,
                                mode=mode).results)
        result["disk_bytes"] = store.disk_size()
    result["bytes_per_question"] = round(result["disk_bytes"] / result["questions"])
    plain = synthesis.questions[synthesis.half : synthesis.half + 200]  # the real model's
    fresh = [fresh_query(path, q) for q in plain[:5]]
    result["fresh_query_s"] = round(statistics.median(fresh), 3)
    result["peak_rss_mb"] = round(query_process_rss(path, plain))
    result["build_questions_per_s"] = round(built["stored"] / max(built["store_s"], 1e-9))
    result["build_overall_questions_per_s"] = round(built["stored"] / built["build_s"])
    result["compact_s"] = round(built["compact_s"], 1)
    result["per_100k"] = built.get("per_100k", [])
    if built.get("resting_bytes"):
        result["disk_peak_over_resting"] = round(
            built["disk_peak_bytes"] / built["resting_bytes"], 2)
    result["built_at"] = built.get("built_at", "an unknown date")
    result["built_by"] = built.get("built_by", "an unknown version")
    result["build_measured_now"] = bool(built.get("now"))
    return result


def table(result: dict[str, Any]) -> None:
    built_from = ("" if result["build_measured_now"] else
                  f" (from the build of {result['built_at']}, isotope {result['built_by']}: "
                  "not measured in this run; --rebuild measures it)")
    rows = [
        ("questions-dense p50 / p99 ms", f"{result['questions_dense_p50_ms']} / "
         f"{result['questions_dense_p99_ms']}", f"{result['exact_questions_dense_p50_ms']} / "
         f"{result['exact_questions_dense_p99_ms']}"),
        ("vector search alone p50 ms", result["vector_search_p50_ms"],
         result["exact_vector_search_p50_ms"]),
        ("hybrid p50 / p95 ms", f"{result['hybrid_p50_ms']} / {result['hybrid_p95_ms']}",
         f"{result['exact_hybrid_p50_ms']}"),
        ("hybrid p50 ms, keyword search from FTS5", result["hybrid_fts5_p50_ms"], ""),
        *[(f"{kind}-bm25 p50 / p99 ms ({result['keyword_indexes'][kind]})",
           f"{result[f'{kind}_bm25_p50_ms']} / {result[f'{kind}_bm25_p99_ms']}",
           f"FTS5: {result[f'fts5_{kind}_bm25_p50_ms']} / {result[f'fts5_{kind}_bm25_p99_ms']}")
          for kind in ("atoms", "chunks")],
        *[(f"{kind}-bm25 top 10 identical to FTS5's", result[f"{kind}_bm25_same_as_fts5"], "")
          for kind in ("atoms", "chunks")],
        ("questions-bm25 p50 / p99 ms (FTS5)", f"{result['questions_bm25_p50_ms']} / "
         f"{result['questions_bm25_p99_ms']}", ""),
        ("recall@10 vs exact (no filter)", result["recall_at_10"], "(exact search is the "
         "reference)"),
        ("recall@10 vs exact (1% filter)", result["recall_at_10_filtered"], "(the reference)"),
        ("filtered searches short of k", result["filtered_short"], "0"),
        ("write one source, then search s", f"{result['write_s']} + "
         f"{result['write_then_search_s']} (found: {result['write_found']})", ""),
        ("deleted source gone from every mode", result["delete_gone_in_every_mode"], ""),
        ("fresh `isotope query --raw` s", result["fresh_query_s"], ""),
        ("peak RSS of a query process MB", result["peak_rss_mb"], ""),
        ("disk bytes per question", result["bytes_per_question"], ""),
        (f"store build questions/s{built_from}", result["build_questions_per_s"], ""),
        (f"whole build questions/s (stand-in model){built_from}",
         result["build_overall_questions_per_s"], ""),
        (f"compaction at the end s{built_from}", result["compact_s"], ""),
    ]
    print(f"\nScale: {result['questions']:,} questions, {result['atoms']:,} atoms, "
          f"{result['chunks']:,} chunks; vector indexes {result['vector_indexes']}")
    print("| measure | isotope | baseline (exact float32 vectors, FTS5; same run) |")
    print("|---|---|---|")
    for name, value, base in rows:
        print(f"| {name} | {value} | {base} |")
    if result.get("per_100k"):
        print("\nThe build, each 100,000 questions (the store's rate: its write calls' time; "
              "overall: the wall time, stand-in model included):")
        print("| up to | store questions/s | overall questions/s | disk peak so far MB "
              "| question segments | questions-dense p50 ms meanwhile |")
        print("|---|---|---|---|---|---|")
        for step in result["per_100k"]:
            print(f"| {step['up_to']:,} | {step['store_questions_per_s']:,} | "
                  f"{step['overall_questions_per_s']:,} | "
                  f"{step['disk_peak_bytes'] / 1e6:,.0f} | "
                  f"{step.get('question_segments', '')} | "
                  f"{step.get('dense_p50_ms_meanwhile', '')} |")
        if "disk_peak_over_resting" in result:
            print(f"disk at its peak during the build / at rest after it: "
                  f"{result['disk_peak_over_resting']}x")
    if result["exact_questions_dense_p50_ms"]:
        print(f"ratio exact/isotope questions-dense p50: "
              f"{result['exact_questions_dense_p50_ms'] / result['questions_dense_p50_ms']:.1f}x")


def graph_cost(synthesis: Synthesis, questions: int, n_queries: int) -> dict[str, Any]:
    """The index of ``questions`` questions without and with the knowledge graph (each
    built first if it is not there): disk per question, hybrid p50 and, on the graph's,
    hybrid with the graph signal at weight 1."""
    said: dict[str, Any] = {}
    for name, graph in (("plain", False), ("graph", True)):
        path = built_index(synthesis, questions, graph=graph)
        built = json.loads((path / "built.json").read_text())
        with open_index(path, synthesis) as iso:
            synthesis.atoms = iso.store.counts()["atoms"]
            queries = [synthesis.query_text(i) for i in range(n_queries)]
            for q in queries:  # warm, as measure() does
                iso.search(q, k=10)
            row: dict[str, Any] = {
                "questions": iso.store.counts()["questions"],
                "bytes_per_question": round(resting_bytes(path) / built["stored"]),
                "build_overall_questions_per_s": round(built["stored"] / built["build_s"]),
                "hybrid_p50_ms": ms(timed(lambda q: iso.search(q, k=10), queries), 50)}
            if graph:
                with_graph = timed(lambda q: iso.search(q, k=10, weights={"graph": 1.0}),
                                   queries)
                row.update(hybrid_graph_p50_ms=ms(with_graph, 50),
                           hybrid_graph_p95_ms=ms(with_graph, 95),
                           graph_p50_ms=ms(timed(lambda q: iso.search(q, k=10, mode="graph"),
                                                 queries), 50),
                           entities=len(iso.entities(1_000_000)),
                           relations=len(iso.store.relations()))
        said[name] = row
    said["disk_ratio"] = round(said["graph"]["bytes_per_question"]
                               / said["plain"]["bytes_per_question"], 3)
    return said


def learned_cost(path: Path, synthesis: Synthesis, learned: int, n_queries: int
                 ) -> dict[str, Any]:
    """On a copy of the index: questions-dense and hybrid latency before and after
    ``learned`` queries were searched (the query log on) and one of their results marked
    useful (``learn = auto``: each becomes a question of its chunk), and how often a
    learned query asked again has its marked chunk first (issue 29)."""
    import shutil

    copy = path.parent / f"{path.name}-learned"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(path, copy)
    with open_index(copy, synthesis) as iso:
        synthesis.atoms = iso.store.counts()["atoms"]
    queries = [synthesis.query_text(i) for i in range(n_queries)]
    taught = [synthesis.query_text(n_queries + i) for i in range(learned)]
    modes = ("questions-dense", "hybrid")
    try:
        with open_index(copy, synthesis, learn="auto") as iso:
            for q in queries:
                iso.search(q, k=10)
            before = {m: timed(lambda q, m=m: iso.search(q, k=10, mode=m), queries)
                      for m in modes}
            iso.query_log = True
            marked: dict[str, str] = {}
            started = time.perf_counter()
            for i, q in enumerate(taught):  # the 4th result (or the last) marked useful
                found = iso.search(q, k=10, mode="hybrid")
                chunk = found.results[min(3, len(found.results) - 1)].chunk.id
                assert found.query_id is not None
                if iso.feedback(found.query_id, chunk).learned in ("learned", "duplicate"):
                    marked[q] = chunk
                if (i + 1) % 500 == 0:
                    print(f"{i + 1}/{learned} learned", file=sys.stderr)
            teaching = time.perf_counter() - started
            iso.query_log = False
            after = {m: timed(lambda q, m=m: iso.search(q, k=10, mode=m), queries)
                     for m in modes}
            first = sum(iso.search(q, k=1, mode="hybrid").results[0].chunk.id == c
                        for q, c in list(marked.items())[:n_queries])
            started = time.perf_counter()
            iso.compact()  # (writes compact on their own from 20,000 changed vectors)
            compacting = time.perf_counter() - started
            for q in queries:
                iso.search(q, k=10)
            compacted = {m: timed(lambda q, m=m: iso.search(q, k=10, mode=m), queries)
                         for m in modes}
            return {"learned": len(marked), "teach_per_mark_ms": round(
                        1000 * teaching / max(1, learned), 1),
                    "repeated_first_pct": round(100 * first / max(1, min(n_queries,
                                                                        len(marked))), 1),
                    "compact_s": round(compacting, 1),
                    **{f"{m}_p50_ms": {"before": ms(before[m], 50), "after": ms(after[m], 50),
                                       "compacted": ms(compacted[m], 50)} for m in modes},
                    **{f"{m}_p99_ms": {"before": ms(before[m], 99), "after": ms(after[m], 99),
                                       "compacted": ms(compacted[m], 99)} for m in modes}}
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def adapter_cost(path: Path, synthesis: Synthesis, n_queries: int) -> dict[str, Any]:
    """The query adapter on the index (issue 66): the seconds of three fits (reading its
    questions, then fitting) and the p50 and p95 of hybrid and chunks-dense searches
    without and with the adapter, each query searched both ways in turn."""
    from isotope.search import adapter

    with open_index(path, synthesis) as iso:
        synthesis.atoms = iso.store.counts()["atoms"]
    queries = [synthesis.query_text(i) for i in range(n_queries)]
    with open_index(path, synthesis, query_adapter="linear") as iso:
        try:
            reads, fits, cpu = [], [], []
            for _ in range(3):
                started = time.perf_counter()
                pairs = iso.store.question_pairs(adapter.MOST_PAIRS)
                reads.append(time.perf_counter() - started)
                used = time.process_time()  # (every thread's: a loaded box's wall
                done = iso.fit_adapter()    # time says more of the box than the fit)
                cpu.append(round(time.process_time() - used, 2))
                fits.append(done.seconds)
            for q in queries:  # (warm)
                iso.search(q, k=10)
            times: dict[str, list[float]] = {}
            for i, q in enumerate(queries):
                for on in ((False, True) if i % 2 else (True, False)):
                    iso.settings.query_adapter = "linear" if on else "off"
                    for mode in ("hybrid", "chunks-dense"):
                        started = time.perf_counter()
                        iso.search(q, k=10, mode=mode)
                        times.setdefault(f"{mode}{' +adapter' if on else ''}", []).append(
                            time.perf_counter() - started)
        finally:
            iso.store.set_meta(adapter.META_KEY, None)
            iso.store.set_meta(adapter.MATRIX_KEY, None)
    return {"questions": done.questions, "pairs_read": len(pairs.origins),
            "read_s": [round(r, 2) for r in reads], "fit_s": fits, "fit_cpu_s": cpu,
            "fit": done.model_dump(),
            **{f"{name}_p50_ms": ms(t, 50) for name, t in times.items()},
            **{f"{name}_p95_ms": ms(t, 95) for name, t in times.items()}}


def _version() -> str:
    """isotope's version and the commit of this checkout, if it is one."""
    import isotope

    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    return f"{isotope.__version__}" + (f" at {commit}" if commit else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--rebuild", action="store_true", help="build the index again")
    parser.add_argument("--learned", type=int, default=0, metavar="N",
                        help="only: the latency before and after N learned questions (a "
                        "copy of the index; issue 29)")
    parser.add_argument("--graph", action="store_true",
                        help="only: the index without and with the knowledge graph (issue 46)")
    parser.add_argument("--adapter", action="store_true",
                        help="only: the query adapter's fit time and search latency (issue 66)")
    args = parser.parse_args()
    if not DATA.is_dir():
        sys.exit(f"benchmark data not found at {DATA}")
    synthesis = Synthesis(real_bank())
    if args.graph:
        said = graph_cost(synthesis, args.questions, args.queries)
        if args.json:
            print(json.dumps(said, indent=2))
            return
        print("| index | questions | disk bytes/question | build questions/s | hybrid p50 ms "
              "| hybrid + graph p50 / p95 ms | graph p50 ms | entities | relations |")
        print("|---|---|---|---|---|---|---|---|---|")
        for name in ("plain", "graph"):
            r = said[name]
            print(f"| {name} | {r['questions']:,} | {r['bytes_per_question']:,} | "
                  f"{r['build_overall_questions_per_s']:,} | {r['hybrid_p50_ms']} | "
                  f"{r.get('hybrid_graph_p50_ms', '')} / {r.get('hybrid_graph_p95_ms', '')} | "
                  f"{r.get('graph_p50_ms', '')} | {r.get('entities', '')} | "
                  f"{r.get('relations', '')} |")
        print(f"disk per question, graph / plain: {said['disk_ratio']}x")
        return
    path = WORK / f"scale-{args.questions}"
    marker = path / "built.json"
    if args.rebuild or not marker.exists():
        import shutil

        shutil.rmtree(path, ignore_errors=True)
        print(f"building {args.questions:,} questions in {path}", file=sys.stderr)
        built = build(path, synthesis, args.questions)
        built.update(built_at=time.strftime("%Y-%m-%d %H:%M"), built_by=_version())
        marker.write_text(json.dumps(built))
        built["now"] = True
    else:
        built = json.loads(marker.read_text())
    if args.learned:
        print(json.dumps(learned_cost(path, synthesis, args.learned, args.queries), indent=2))
        return
    if args.adapter:
        print(json.dumps(adapter_cost(path, synthesis, args.queries), indent=2))
        return
    result = measure(path, synthesis, built, args.queries)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        table(result)


if __name__ == "__main__":
    main()
