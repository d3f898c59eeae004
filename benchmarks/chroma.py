"""Chroma as the vector backend against usearch, in the same run, on the scale
benchmark's index (``benchmarks/scale.py``; built first if it is not there).

    ISOTOPE_BENCH_DIR=/tmp/bench-scale .venv/bin/python benchmarks/chroma.py \\
        --questions 100000 --json

The scale index is copied (``isotope copy``: every source with its vectors, no model) into
an index kept with usearch, one with its vectors in an embedded Chroma folder
(``--no-embedded``: not that one), and one in a real ``chroma run`` server on loopback
(``--no-server``: not that one), each copy timed with its compaction (the build rate).
Then on each: questions-dense and hybrid p50 (k=10,
the query's embedding is the stand-in's, from its marker), the recall@10 of the question
search of a principal who may see 1% and 10% of the sources (every source gets the list
``group:gN`` as in ``benchmarks/access.py``) against an exact search over what it may see,
and the bytes per question on disk (the index folder; with a server, its folder too).
The recall is also measured as copied (the lists come with the copy), unfiltered and at
both shares, before the lists are given again (``*_as_copied``): what the graph holds
apart from what sending every item's metadata again does to it; and each recall also
against an exact search over the vectors as the stores hold them, float16 (``*_stored``:
the graph's own recall; the plain figure also counts what float16 changes).
Every Chroma figure is printed with the usearch one and their ratio. The copies are
deleted at the end (``--keep``: kept in the work folder)."""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import access
import scale
from isotope.access import Principal
from isotope.stores import VectorBackend
from isotope.stores.chroma_server import local_server
from isotope.stores.copying import copy_index

KEYS = ("dense_p50_ms", "hybrid_p50_ms", "filtered_recall_at_10_1%",
        "filtered_recall_at_10_10%", "bytes_per_question", "build_questions_per_s")


def measure(name: str, source: Path, target: Path, backend: VectorBackend,
            synthesis: scale.Synthesis, embedded: Any, queries: list[str],
            extra_folder: Path | None) -> dict[str, Any]:
    """One backend's figures (see the module's text)."""
    started = time.perf_counter()
    copy_index(source, target, backend=backend)
    with scale.open_index(target, synthesis) as iso:
        iso.compact()
        build_s = time.perf_counter() - started
        questions = iso.store.counts()["questions"]
        print(f"  {name}: {questions:,} questions copied in {build_s:.1f} s", file=sys.stderr)
        result: dict[str, Any] = {"build_questions_per_s": round(questions / build_s),
                                  "vector_backend": iso.vector_backend}
        disk = scale.folder_bytes(target) + (scale.folder_bytes(extra_folder)
                                             if extra_folder else 0)
        result["bytes_per_question"] = round(disk / questions, 1)
        for q in queries[:20]:  # warm
            iso.search(q, k=10)
        for mode, key in (("questions-dense", "dense"), ("hybrid", "hybrid")):
            times = scale.timed(lambda q, m=mode: iso.search(q, k=10, mode=m), queries)
            result[f"{key}_p50_ms"] = scale.ms(times, 50)
        vectors = {q: synthesis.vector(q) for q in queries}
        principals: dict[str, Principal | None] = {
            "1%": Principal(groups=("g7",), strict=True),
            "10%": Principal(groups=tuple(f"g{n}" for n in range(10)), strict=True)}
        # the lists came with the copy (the source has them): recall as copied, unfiltered
        # too, then after every source is given its list again (Chroma: every item's
        # metadata sent again), the figure the table reports
        copied = access.principal_recall(iso.store, embedded, synthesis, queries, vectors,
                                         {"all": None, **principals}, stored=True)
        for share, (value, _) in copied.items():
            result[f"recall_at_10_{share}_as_copied"] = value
        result["set_lists_s"] = round(access.lists(iso, True), 2)
        recalled = access.principal_recall(iso.store, embedded, synthesis, queries, vectors,
                                           principals, stored=True)
        for share, (value, _) in recalled.items():
            result[f"filtered_recall_at_10_{share}"] = value  # (and _stored)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--no-server", action="store_true",
                        help="leave out the Chroma server (embedded Chroma and usearch only)")
    parser.add_argument("--no-embedded", action="store_true",
                        help="leave out embedded Chroma (the server and usearch only)")
    parser.add_argument("--keep", action="store_true", help="keep the copies")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    synthesis = scale.Synthesis(scale.real_bank())
    path = scale.built_index(synthesis, args.questions)
    with scale.open_index(path, synthesis) as iso:
        synthesis.atoms = iso.store.counts()["atoms"]
    queries = [synthesis.query_text(i) for i in range(args.queries)]
    work = scale.WORK / f"chroma-{args.questions}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    results: dict[str, dict[str, Any]] = {}
    try:
        with scale.open_index(path, synthesis) as embedded, contextlib.ExitStack() as stack:
            access.lists(embedded, True)  # (what the exact search says each may see)
            try:
                runs: list[tuple[str, VectorBackend, Path | None]] = [
                    ("usearch", VectorBackend("usearch", True), None)]
                if not args.no_embedded:
                    runs.append(("chroma", VectorBackend("chroma", True), None))
                if not args.no_server:
                    folder = work / "server-data"
                    url = stack.enter_context(local_server(folder))
                    runs.append(("chroma_server",
                                 VectorBackend(f"{url}/bench", True,
                                               {"chroma_timeout": 600}), folder))
                for name, backend, extra in runs:
                    results[name] = measure(name, path, work / name, backend, synthesis,
                                            embedded, queries, extra)
                    print(f"  {name}: {json.dumps(results[name])}", file=sys.stderr)
            finally:
                access.lists(embedded, False)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    said: dict[str, Any] = {"questions": args.questions, "queries": args.queries}
    for name in results:
        if name == "usearch":
            continue
        for key in KEYS:
            ours, theirs = results[name][key], results["usearch"][key]
            said[f"{name}_{key}" if name != "chroma" else key] = ours
            said[f"usearch_{key}"] = theirs
            said[f"{name}_{key}_over_usearch"] = round(ours / max(theirs, 1e-9), 2)
        said[f"{name}_set_lists_s"] = results[name]["set_lists_s"]
        for key in [k for k in results[name] if k.endswith(("_as_copied", "_stored"))]:
            said[f"{name}_{key}"] = results[name][key]
            said[f"usearch_{key}"] = results["usearch"][key]
    said["usearch_set_lists_s"] = results["usearch"]["set_lists_s"]
    if args.json:
        print(json.dumps(said, indent=2))
        return
    print(f"{'':32}" + "".join(f"{n:>16}" for n in results))
    for key in (*KEYS, "set_lists_s"):
        print(f"{key:32}" + "".join(f"{results[n][key]:>16}" for n in results))


if __name__ == "__main__":
    main()
