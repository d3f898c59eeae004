"""A separate process that ingests a folder with the fake model (for the crash and
concurrency tests): ``python ingest_worker.py INDEX FOLDER [SECONDS_PER_CALL] [hnsw]
[force]`` (INDEX: a directory or a store URL; ``force``: ``ingest --force``).
With ``hnsw``, the vectors go to HNSW indexes, compacted after every few writes (so that
a kill lands in compactions too)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from isotope import Isotope

from conftest import FakeLLM


class SlowLLM(FakeLLM):
    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    def complete_batch(self, prompts, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(self.delay * len(prompts))
        return super().complete_batch(prompts, **kwargs)


def main() -> None:
    index, folder = sys.argv[1], sys.argv[2]
    delay = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    vector_index = sys.argv[4] if len(sys.argv) > 4 else "auto"
    if vector_index == "hnsw":
        from isotope.stores import sqlite_vectors

        sqlite_vectors.COMPACT_AFTER = 6
    location = index if "://" in index else Path(index)  # a store URL or a directory
    with Isotope.open(location, llm=SlowLLM(delay), cache=False, chunk_size=48,
                      chunk_overlap=0, threads=1, vector_index=vector_index) as iso:
        print("started", flush=True)
        report = iso.ingest(folder, force=sys.argv[5:6] == ["force"])
    import resource

    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"done {len(report.added)} {len(report.unchanged)} {len(report.errors)} "
          f"{peak_mb:.0f}", flush=True)


if __name__ == "__main__":
    main()
