"""The HTTP server under load (issue 14): ``isotope serve`` on loopback over the
300-passage SQuAD index of benchmarks/quality.py, searched by 1, 8 and 32 concurrent
clients, with and without an ingest running.

    .venv/bin/python benchmarks/serve.py [--passages 300] [--seconds 15] [--clients 1,8,32]
        [--workers 2 (default)]

Each client sends POST /search (hybrid, k=5) with the development questions in turn, on
its own keep-alive connection, for ``--seconds`` (bounded in time; every request has a
timeout). "With an ingest": another process meanwhile ingests the next passages into the
same index (chunks and atoms, questions later: no model), so searches meet a writer. The
server is started and stopped here; nothing leaves the machine. Targets on 2 cores: at
least 150 searches/s at 8 clients, p99 at most 150 ms, no failed request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from isotope.search import evaluation

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "eval" / "squad-dev"
OUT = ROOT / "benchmarks" / "out"

INGEST = """
import sys, time
from isotope import Isotope
from isotope.search import evaluation
passages = evaluation.read_jsonl(__import__("pathlib").Path(sys.argv[2]), ("pid", "text"))
start, seconds = int(sys.argv[3]), float(sys.argv[4])
deadline = time.monotonic() + seconds
n = 0
with Isotope.open(sys.argv[1], create=False, cache=False) as iso:
    while time.monotonic() < deadline:
        batch = passages[start + n * 5: start + n * 5 + 5]
        iso.ingest_chunks(evaluation.chunks_of(batch), source=f"load-{n % 4}",
                          questions="later")
        n += 1
print(n, flush=True)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def client(url: str, queries: list[str], deadline: float, offset: int
                 ) -> tuple[list[float], int]:
    """Search until ``deadline``: the times of the searches answered 200 (a failed request
    counts as a failure, never as a search), and the number of failures."""
    times, failures = [], 0
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        n = offset
        while time.monotonic() < deadline:
            started = time.perf_counter()
            try:
                reply = await http.post("/search", json={"query": queries[n % len(queries)],
                                                         "k": 5})
                ok = reply.status_code == 200
            except httpx.HTTPError:
                ok = False
            if ok:
                times.append(time.perf_counter() - started)
            else:
                failures += 1
            n += 1
    return times, failures


async def load(url: str, queries: list[str], clients: int, seconds: float
               ) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    started, cpu = time.perf_counter(), time.process_time()
    done = await asyncio.gather(*(client(url, queries, deadline, i * 97)
                                  for i in range(clients)))
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu
    times = sorted(t for d in done for t in d[0])
    failed = sum(d[1] for d in done)
    return {"clients": clients, "searches/s": round(len(times) / wall, 1),
            "p50 ms": round(1000 * statistics.median(times), 1) if times else None,
            "p99 ms": round(1000 * times[min(len(times) - 1, int(0.99 * len(times)))], 1)
            if times else None,
            "failed": failed, "requests": len(times) + failed,
            # The clients share the 2 cores with the server: the share they took.
            "client cores": round(cpu / wall, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--workers", type=int, default=2, help="isotope serve --workers")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    index = OUT / f"quality-{args.passages}-batched"
    if not (index / "isotope.db").exists():
        sys.exit(f"no index at {index}: run benchmarks/quality.py --passages {args.passages}")
    _, queries = evaluation.load(DATA / "passages.jsonl", DATA / "queries.jsonl", args.passages)
    questions = [q["question"] for q in queries]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "ISOTOPE_CACHE": "false"}
    server = subprocess.Popen([sys.executable, "-m", "isotope", "serve", "--index", str(index),
                               "--port", str(port), "--workers", str(args.workers)], env=env)
    rows = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        asyncio.run(load(url, questions[:50], 2, 3))  # warm
        for ingesting in (False, True):
            for clients in (int(c) for c in args.clients.split(",")):
                writer = None
                if ingesting:
                    writer = subprocess.Popen(
                        [sys.executable, "-c", INGEST, str(index), str(DATA / "passages.jsonl"),
                         str(args.passages), str(args.seconds + 5)],
                        stdout=subprocess.PIPE, text=True)
                    time.sleep(3)  # the writer's models loaded, writing
                row = asyncio.run(load(url, questions, clients, args.seconds))
                row["ingest running"] = ingesting
                if writer is not None:
                    out, _ = writer.communicate(timeout=120)
                    row["ingest batches"] = int(out.strip() or 0)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        with __import__("isotope").Isotope.open(index, create=False) as iso:
            for n in range(4):  # the load's sources leave the benchmark index as it was
                if iso.store.get_source(f"load-{n}"):
                    iso.delete(f"load-{n}")
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"\nisotope serve --workers {args.workers}, hybrid POST /search, {args.passages} "
          f"passages, {args.seconds:.0f} s per row\n")
    print("| clients | ingest running | searches/s | p50 ms | p99 ms | failed | requests | "
          "client cores |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['clients']} | {'yes' if r['ingest running'] else 'no'} | "
              f"{r['searches/s']} | {r['p50 ms']} | {r['p99 ms']} | {r['failed']} | "
              f"{r['requests']} | {r['client cores']} |")


if __name__ == "__main__":
    main()
