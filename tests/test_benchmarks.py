"""The benchmarks print figures of the run that prints them (issue 42, item 25): the same
command gives the same synthetic data in every process (benchmarks/scale.py seeded its
query noise with Python's per-process ``hash``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE = """
import sys
import numpy as np
sys.path.insert(0, "benchmarks")
import scale
rng = np.random.default_rng(1)
bank = (["a sentence."] * 8, rng.normal(size=(8, 384)).astype("float32"),
        ["a question?"] * 8, rng.normal(size=(8, 384)).astype("float32"))
synthesis = scale.Synthesis(bank)
synthesis.atoms = 5
query = synthesis.query_text(3)
print(repr(np.round(synthesis.vector(query), 5).tolist()[:8]))
"""


def test_the_scale_benchmarks_queries_are_the_same_in_every_process() -> None:
    seen = set()
    for seed in ("1", "2", "3"):
        done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True,
                              text=True, env={**os.environ, "PYTHONHASHSEED": seed},
                              timeout=120)
        assert done.returncode == 0, done.stderr
        seen.add(done.stdout)
    assert len(seen) == 1, seen


def test_the_two_hop_questions_keep_their_rules() -> None:
    """benchmarks/graph.py's 60 questions (issue 46): each answering passage shares no
    content word with its question, and the check catches one that does."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import graph

    passages, items = graph.load()
    assert len(items) == 60 and sum(i["cross_article"] for i in items) == 30
    assert graph.check(passages, items) == 0
    by_pid = {str(p["pid"]): p for p in passages}
    item = dict(items[0])
    word = sorted(graph.content_words(by_pid[str(item["second_pid"])]["text"]))[0]
    item["question"] = item["question"].rstrip("?") + f" {word}s?"  # (a plural counts)
    assert any("shares" in p for p in graph.problems(item, by_pid))


def test_results_md_is_made_from_the_kept_runs_alone(tmp_path: Path) -> None:
    """benchmarks/RESULTS.md is what ``benchmarks/current.py render`` makes of the outputs
    kept in benchmarks/current/ (issue 67): a figure typed into it by hand, or an area's
    output kept without rendering again, fails here; it has a section per area and stays
    under 500 lines; a kept output's figures, command, commit and date reach its table."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import current

    made = current.render()
    assert made == (ROOT / "benchmarks" / "RESULTS.md").read_text(), (
        "RESULTS.md differs from its rendering: python benchmarks/current.py render")
    assert len(made.splitlines()) < 500
    assert all(f"## {area.title}\n" in made for area in current.AREAS)
    kept = {"area": "access", "commit": "abc1234", "date": "2026-12-08", "seconds": [12.0],
            "commands": ["python benchmarks/access.py --json"],
            "outputs": [{"questions": 962091, "hybrid_p50_ms": 31.25,
                         "principals": [{"share": "1%", "p50_ms": 40.5}]}]}
    original = current.KEPT
    current.KEPT = tmp_path
    try:
        (tmp_path / "access.json").write_text(json.dumps(kept))
        made = current.render()
    finally:
        current.KEPT = original
    section = made.split("## Access control\n", 1)[1].split("\n## ", 1)[0]
    assert "at commit `abc1234`" in section and "2026-12-08" in section
    assert "    python benchmarks/access.py --json" in section
    assert "| hybrid_p50_ms | 31.2 |" in section and "| 1% | 40.5 |" in section
    assert "Not yet run" in made.split("## Learning from use\n", 1)[1]
