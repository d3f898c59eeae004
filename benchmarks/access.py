"""What access control costs at scale: searches for a principal who may see 1% and 10% of
the sources, against the same searches without a principal, on the scale benchmark's
index (``benchmarks/scale.py``; built first if it is not there).

    ISOTOPE_BENCH_DIR=/tmp/bench-scale .venv/bin/python benchmarks/access.py --questions 1000000
    ISOTOPE_BENCH_DIR=/tmp/bench-scale .venv/bin/python benchmarks/access.py --questions 100000 \
        --engine postgresql    # the same index copied into PostgreSQL (pgserver), then measured

Every source gets an access list ``group:gN`` (N = its number modulo 100), so the
principal ``group:g7`` sees 1% of the sources and ``group:g0..g9`` 10%. Printed: hybrid
and questions-dense p50 with and without the principal (and their ratio), recall@10 of
the principal's question search against an exact search over what it may see, how many
searches returned fewer than k, and the bytes per question before and after the lists.
The lists are removed at the end (the scale benchmark's index is left as it was)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scale
from isotope.access import Principal, condition
from isotope.ann.exact import ExactIndex

GROUPS = 100


def lists(iso: Any, give: bool) -> float:
    """Give every source its list (or take them away); returns the seconds it took."""
    store = iso.store
    uris = [info.source.uri for info in store.sources()]
    started = time.perf_counter()
    by_group: dict[int, list[str]] = {}
    for n, uri in enumerate(sorted(uris)):
        by_group.setdefault(n % GROUPS, []).append(uri)
    with store.writer(60):
        for group, members in by_group.items():
            store.set_access(members, [f"group:g{group}"] if give else None)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--engine", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--url", help="a PostgreSQL server (default: start pgserver)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    synthesis = scale.Synthesis(scale.real_bank())
    path = scale.built_index(synthesis, args.questions)
    location: Any = path
    server = None
    if args.engine == "postgresql":
        import postgres as pgbench

        url, server = pgbench.server(args.url)
        location = pgbench.at_schema(url, f"scale{args.questions}")
        pgbench.ensure_copy(path, location)
    try:
        result = measure(path, location, synthesis, args.queries)
    finally:
        if server is not None:
            server.cleanup()
    result["engine"] = args.engine
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for key, value in result.items():
        print(f"{key:36} {value}")


def measure(path: Path, location: Any, synthesis: scale.Synthesis, n_queries: int
            ) -> dict[str, Any]:
    with scale.open_index(path, synthesis) as iso:
        synthesis.atoms = iso.store.counts()["atoms"]
    queries = [synthesis.query_text(i) for i in range(n_queries)]
    vectors = {q: synthesis.vector(q) for q in queries}
    principals = {"1%": Principal(groups=("g7",), strict=True),
                  "10%": Principal(groups=tuple(f"g{n}" for n in range(10)), strict=True)}
    result: dict[str, Any] = {}
    with scale.open_index(location, synthesis) as iso, \
            scale.open_index(path, synthesis) as embedded:
        store = iso.store
        result["questions"] = store.counts()["questions"]
        at_rest = (lambda: scale.resting_bytes(path)) if location == path else store.disk_size
        before = at_rest()
        result["set_lists_s"] = round(lists(iso, True), 2)
        if location != path:
            lists(embedded, True)  # (the exact search below reads the embedded copy)
        after = at_rest()
        if before is not None and after is not None:
            result["bytes_per_question_before"] = round(before / result["questions"], 1)
            result["bytes_per_question_with_lists"] = round(after / result["questions"], 1)
        try:
            for q in queries[:20]:  # warm
                iso.search(q, k=10)
            for mode, name in (("hybrid", "hybrid"), ("questions-dense", "dense")):
                plain = scale.timed(lambda q, m=mode: iso.search(q, k=10, mode=m), queries)
                result[f"{name}_p50_ms"] = scale.ms(plain, 50)
                for share, principal in principals.items():
                    shorts = 0

                    def asked(q: str, m: str = mode, w: Principal = principal) -> None:
                        nonlocal shorts
                        shorts += len(iso.search(q, k=10, mode=m, principal=w).results) < 10

                    times = scale.timed(asked, queries)
                    result[f"{name}_{share}_p50_ms"] = scale.ms(times, 50)
                    result[f"{name}_{share}_over_plain"] = round(
                        scale.ms(times, 50) / max(result[f"{name}_p50_ms"], 1e-9), 2)
                    result[f"{name}_{share}_fewer_than_k"] = shorts
            if location == path:  # (issue 64, item 21: the embedded index only)
                result.update(emails(iso, queries, principals["1%"]))
            # a server of many principals, each asking once: the allowed rows are copied
            # from the index file at every search (none kept for a next query)
            from isotope.ann import hnsw

            kept, hnsw.COPIES_BYTES = hnsw.COPIES_BYTES, 0
            try:
                cold = scale.timed(lambda q: iso.search(q, k=10, mode="hybrid",
                                                        principal=principals["10%"]), queries)
            finally:
                hnsw.COPIES_BYTES = kept
            result["hybrid_10%_uncached_p50_ms"] = scale.ms(cold, 50)
            result["hybrid_10%_uncached_over_plain"] = round(
                scale.ms(cold, 50) / max(result["hybrid_p50_ms"], 1e-9), 2)
            # recall@10 of the principal's question search against an exact search over
            # what it may see (the embedded copy's vectors, recomputed at float32)
            for share, (recalled, visible) in principal_recall(
                    store, embedded, synthesis, queries, vectors, principals).items():
                result[f"recall_at_10_{share}"] = recalled
                result[f"visible_chunks_{share}"] = visible
        finally:
            result["remove_lists_s"] = round(lists(iso, False), 2)
            if location != path:
                lists(embedded, False)
    return result


def emails(iso: Any, queries: list[str], principal: Principal) -> dict[str, Any]:
    """A principal's hybrid search when every source shown is an email with attachments
    (their names in its metadata, as the email loader keeps them): the names of those it
    may not see are left out, which reads the members of the shown sources only
    (``Store.members``; it once read every source twice a search). p50 with every source
    so marked, against the same searches unmarked, in this run."""
    plain = scale.timed(lambda q: iso.search(q, k=10, principal=principal), queries)
    marked = json.dumps(["minutes.txt", "budget.xlsx"])
    conn = iso.store._conn()
    with iso.store.writer(60):
        conn.execute("UPDATE sources SET metadata = json_set(metadata, '$.attachments', "
                     "json(?))", (marked,))
        conn.commit()
    try:
        shown = iso.search(queries[0], k=10, principal=principal).results
        assert shown and all(r.source_metadata.get("attachments") for r in shown)
        times = scale.timed(lambda q: iso.search(q, k=10, principal=principal), queries)
    finally:
        with iso.store.writer(60):
            conn.execute("UPDATE sources SET metadata = json_remove(metadata, "
                         "'$.attachments')")
            conn.commit()
    return {"hybrid_1%_p50_ms_same_run": scale.ms(plain, 50),
            "hybrid_1%_emails_p50_ms": scale.ms(times, 50),
            "hybrid_1%_emails_over_plain": round(scale.ms(times, 50) /
                                                 max(scale.ms(plain, 50), 1e-9), 2)}


_TRUTH: dict[int, Any] = {}


def principal_recall(store: Any, embedded: Any, synthesis: scale.Synthesis, queries: list[str],
                     vectors: dict[str, Any], principals: dict[str, Principal | None],
                     *, stored: bool = False) -> dict[str, tuple[float, int]]:
    """For each principal (None: no condition at all): recall@10 of ``store``'s question
    search against an exact search over what it may see in ``embedded`` (the scale index,
    its lists given; its vectors recomputed at float32), items compared by chunk and text
    (row numbers differ between copies); and how many chunks it may see (0: every one).
    ``stored``: also ``<share>_stored``, against an exact search over the vectors as the
    stores hold them (float16: the graph's own recall, without what float16 changes)."""
    if id(embedded) not in _TRUTH:  # (recomputing a million vectors takes minutes)
        exact = scale.exact_baseline(embedded, synthesis)["questions"]
        _TRUTH.clear()
        _TRUTH[id(embedded)] = {"": exact, "_stored": ExactIndex(
            exact.item_ids, exact.item_groups,
            exact.vectors.astype(np.float16).astype(np.float32))}
    truths = {tail: truth for tail, truth in _TRUTH[id(embedded)].items()
              if stored or not tail}
    conn = embedded.store._conn()

    def named(rows: list[int]) -> list[tuple[str, str]]:
        said = dict(((r, (c, t)) for r, c, t in conn.execute(
            "SELECT rowid, chunk_id, text FROM questions WHERE rowid IN "
            f"({','.join('?' * len(rows))})", rows))) if rows else {}
        return [said[r] for r in rows]

    said: dict[str, tuple[float, int]] = {}
    for share, principal in principals.items():
        made = condition(principal, control=True) if principal is not None else None
        allowed = embedded.store._allowed([made]) if made is not None else None
        found = []
        expected: dict[str, list[list[tuple[str, str]]]] = {tail: [] for tail in truths}
        for q in queries:
            hits = store.search("questions", vectors[q], 10, [made] if made else [])
            found.append([(h.chunk_id, h.text) for h in hits])
            for tail, truth in truths.items():
                expected[tail].append(named([int(i) for i, _, _ in
                                             truth.search(vectors[q], 10, allowed)]))
        for tail in truths:
            said[share + tail] = (scale.recall(found, expected[tail]),
                                  len(allowed) if allowed is not None else 0)
    return said


if __name__ == "__main__":
    main()
