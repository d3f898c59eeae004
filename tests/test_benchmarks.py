"""The benchmarks print figures of the run that prints them (issue 42, item 25): the same
command gives the same synthetic data in every process (benchmarks/scale.py seeded its
query noise with Python's per-process ``hash``)."""

from __future__ import annotations

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
