"""Crashes and concurrency, with real processes: an ingest killed with SIGKILL at random
moments (while storing sources or while generating their questions), queries from another
process during an ingest, and two ingests at once. The
store, embedder and processes are real; only the model's replies are faked."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from isotope import Isotope
from isotope.embedders import Embedder
from isotope.errors import IndexLocked

import support
from conftest import FakeLLM

WORKER = Path(__file__).resolve().parent / "ingest_worker.py"
TOPICS = ["billing", "routing", "login", "search", "reports", "alerts", "backups", "metrics",
          "caching", "queues", "storage", "email", "payments", "maps", "chat", "uploads",
          "exports", "imports", "audits", "quotas", "themes", "plugins", "webhooks", "tokens"]


def _corpus(folder: Path) -> Path:
    folder.mkdir()
    for n, topic in enumerate(TOPICS):
        (folder / f"{topic}.md").write_text(
            f"# The {topic} service\n\nThe {topic} service was started in {2000 + n} by team "
            f"{n}. It runs on {n + 2} servers in the Oslo data centre.\n\nIts on-call rota "
            f"changes every {n + 3} days. Alerts for {topic} go to channel {topic}-ops.\n\n"
            f"The {topic} database is backed up every {n + 1} hours to cold storage.\n")
    return folder


def _open(index: Path, embedder: Embedder, llm: FakeLLM | None = None) -> Isotope:
    return Isotope.open(index, embedder=embedder, llm=llm or FakeLLM(), cache=False,
                        chunk_size=48, chunk_overlap=0)


Content = dict[str, dict[str, tuple[bool, list[str]]]]


def _content(iso: Isotope) -> Content:
    """Per source file name, per chunk text: whether the chunk has its questions yet, and
    its question texts, sorted."""
    conn = support.connection(iso)
    content: Content = {}
    for info in iso.sources():
        content[Path(info.source.uri).name] = {
            text: (bool(enriched), sorted(q for (q,) in conn.execute(
                "SELECT text FROM questions WHERE chunk_id = ?", (chunk_id,))))
            for chunk_id, text, enriched in conn.execute(
                "SELECT id, text, enriched FROM chunks WHERE source=?", (info.source.uri,))}
    return content


def _worker(index: Path, folder: Path, delay: float = 0.0,
            vector_index: str = "auto", force: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(WORKER), str(index), str(folder), str(delay),
                             vector_index, *(["force"] if force else [])],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("vector_index", ["auto", "hnsw"])
def test_sigkill_at_random_moments_never_corrupts_and_a_rerun_completes(
    tmp_path: Path, embedder: Embedder, vector_index: str
) -> None:
    """With ``hnsw`` the worker compacts its vectors into HNSW indexes every few writes,
    so kills land in compactions too (the checks here compact back to exact ones)."""
    corpus = _corpus(tmp_path / "corpus")
    with _open(tmp_path / "reference", embedder) as ref:
        ref.ingest(corpus)
        expected = _content(ref)
        atoms_of = {Path(i.source.uri).name: i.atoms for i in ref.sources()}
    index = tmp_path / "crashed"
    rng = random.Random(7)
    deadline = time.monotonic() + 600
    stored_counts = []
    waiting_runs = 0
    for run in range(20):
        assert time.monotonic() < deadline, f"crash runs took too long (run {run})"
        worker = _worker(index, corpus, delay=0.02, vector_index=vector_index)
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "started", worker.stderr
        # half the kills early, while sources are stored; the others while questions are
        time.sleep(rng.uniform(0.0, 0.8) if run % 2 else rng.uniform(0.5, 4.0))
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        with _open(index, embedder) as iso:
            assert iso.check() == [], f"run {run}"
            content = _content(iso)
            for name, chunks in content.items():
                # a stored source is whole: all its chunks; each chunk has all its
                # questions, or waits for them with none (the window in flight is lost)
                assert chunks.keys() == expected[name].keys(), f"run {run}: {name}"
                for text, (enriched, questions) in chunks.items():
                    assert questions == (expected[name][text][1] if enriched else []), \
                        f"run {run}: {name}"
                # searchable at once, before its questions
                top = iso.search(next(iter(chunks)), k=3, mode="chunks-bm25").results
                assert any(name in r.chunk.source for r in top), f"run {run}"
            # a question only this source has (the fake model words some questions the
            # same for every source: "What is said about Its on-call rota ...?")
            asked = [(name, q) for name, chunks in content.items()
                     for _, qs in chunks.values() for q in qs if Path(name).stem in q]
            if asked:  # a stored question is found by its own text
                name, question = asked[0]
                found = iso.search(question, k=5, mode="questions-dense").results
                if vector_index == "hnsw" and not any(name in r.chunk.source for r in found):
                    # An approximate index may miss one of 24 near-copies (the sources'
                    # questions differ by a word): the crash-safety claim is that the
                    # vector is stored, so fold the vectors into an exact index and ask
                    # again (seen once in a few full runs; the message below says more).
                    iso.store.set_vector_index("exact")
                    iso.compact()
                    found = iso.search(question, k=5, mode="questions-dense").results
                assert any(name in r.chunk.source for r in found), (
                    f"run {run}: {question!r} of {name} not in "
                    f"{[(Path(r.chunk.source).name, r.score) for r in found]}; matched "
                    f"{[m.text for r in found[:2] for m in r.matched_questions]}; "
                    f"vectors {iso.store.get_meta('vectors')}")
            stored_counts.append(len(content))
            waiting_runs += any(not e for chunks in content.values()
                                for e, _ in chunks.values())
            # forget some sources, so the next run has work to be killed in
            for info in rng.sample(iso.sources(), k=len(content) // 2):
                iso.delete(info.source.uri)
    assert sum(0 < n < len(TOPICS) for n in stored_counts) >= 2, stored_counts  # mid-store
    assert waiting_runs >= 5, waiting_runs  # killed while generating questions
    llm = FakeLLM()
    with _open(index, embedder, llm) as iso:
        before = {Path(i.source.uri).name for i in iso.sources()}
        conn = support.connection(iso)
        waiting_atoms = conn.execute("SELECT COUNT(*) FROM atoms a JOIN chunks c ON "
                                     "c.id = a.chunk_id WHERE c.enriched = 0").fetchone()[0]
        report = iso.ingest(corpus)  # stores what is missing, enriches what waits
        assert report.ok and len(report.unchanged) == len(before)
        assert llm.calls == waiting_atoms + sum(
            n for name, n in atoms_of.items() if name not in before)
        assert _content(iso) == expected
        assert iso.check() == []


def test_queries_from_another_process_during_an_ingest_never_fail(
    tmp_path: Path, embedder: Embedder
) -> None:
    corpus = _corpus(tmp_path / "corpus")
    index = tmp_path / "index"
    with _open(index, embedder) as iso:
        iso.ingest(corpus / "billing.md")
    worker = _worker(index, corpus, delay=0.05)
    seen: set[int] = set()
    queries = 0
    with _open(index, embedder) as iso:
        while worker.poll() is None:
            response = iso.search("How often is the database backed up?", k=5)
            committed = {i.source.uri for i in iso.sources()}
            assert response.results
            assert {r.chunk.source for r in response.results} <= committed
            assert all(r.chunk.text for r in response.results)
            seen.add(len(committed))
            queries += 1
    assert worker.returncode == 0, worker.stderr.read() if worker.stderr else ""
    assert queries >= 10 and len(seen) > 2  # queries ran while sources were arriving
    with _open(index, embedder) as iso:
        assert len(iso.sources()) == len(TOPICS) and iso.check() == []


def test_a_second_ingest_fails_clearly_while_another_process_writes(
    tmp_path: Path, embedder: Embedder
) -> None:
    corpus = _corpus(tmp_path / "corpus")
    index = tmp_path / "index"
    worker = _worker(index, corpus, delay=0.05)
    assert worker.stdout is not None and worker.stdout.readline().strip() == "started"
    lock = index / "write.lock"
    for _ in range(100):
        if lock.exists() and lock.read_text().strip() == str(worker.pid):
            break
        time.sleep(0.05)
    with _open(index, embedder) as iso:
        with pytest.raises(IndexLocked, match=f"another process \\(pid {worker.pid}\\)"):
            iso.ingest(corpus)
        worker.wait(timeout=300)
        assert worker.returncode == 0
        assert len(iso.sources()) == len(TOPICS) and iso.check() == []
        assert iso.ingest(corpus).unchanged  # free again


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL")
def test_check_finds_damage_and_repair_rebuilds_the_indexes(
    tmp_path: Path, embedder: Embedder
) -> None:
    corpus = _corpus(tmp_path / "corpus")
    with _open(tmp_path / "index", embedder) as iso:
        iso.ingest(corpus)
        iso.search("Who started the billing service?")  # writes the vector cache
        conn = support.connection(iso)
        conn.execute("PRAGMA foreign_keys=OFF")
        conn.execute("DELETE FROM atoms WHERE rowid IN (SELECT rowid FROM atoms LIMIT 2)")
        conn.execute("INSERT INTO mentions(entity, name, type, atom_id, chunk_id) VALUES "
                     "('billing', 'Billing', 'thing', 'gone', 'gone')")  # (a graph row)
        conn.execute("INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES "
                     "('delete', 1, 'x')")
        problems = iso.check()
        damaged = [p for p in problems if "questions without their atom" in p]
        assert damaged and "(sources: " in damaged[0]  # named, to be redone
        assert any("keyword index of chunks" in p for p in problems)
        assert any(p.startswith("mentions row") for p in problems)
        conn.execute("PRAGMA foreign_keys=ON")
        repaired = iso.repair()
        assert repaired.reingested and repaired.reingested[0] in damaged[0]
        assert repaired.problems == [] and not repaired.removed
        assert iso.check(repair=True) == []
