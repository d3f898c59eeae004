"""A corpus of at least 30 hostile files (tests/hostile.py): each gets a clear per-file
error or is ingested correctly, the rest of the corpus is ingested, nothing stored before
is lost, and memory stays bounded for a 100 MB file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hostile import BIG_MB, UNREADABLE, build, unreadable_as_user
from isotope import Isotope
from isotope.embedders import Embedder
from test_reliability import WORKER, _content

import support
from conftest import FakeLLM


def test_every_hostile_file_gets_a_clear_outcome_and_nothing_is_lost(
    tmp_path: Path, embedder: Embedder, examples: Path
) -> None:
    cases = build(tmp_path / "hostile")
    assert len(cases) >= 30
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM(),
                      cache=False) as iso:
        assert iso.ingest(examples).ok
        before = _content(iso)
        report = iso.ingest(tmp_path / "hostile")
        errors = {e.path: e.message for e in report.errors}
        warnings = {}
        for w in report.warnings:
            warnings[w.path] = warnings.get(w.path, "") + w.message + "\n"
        skipped = {s.path: s.message for s in report.skipped}
        added = set(report.added)
        conn = support.connection(iso)
        for case in cases:
            path = tmp_path / "hostile" / case.path
            if case.name == UNREADABLE and os.geteuid() == 0:
                continue  # root reads it: checked as a user below
            if case.outcome == "error":
                assert str(path) in errors, (case.name, sorted(errors))
                assert case.match in errors[str(path)], (case.name, errors[str(path)])
            elif case.outcome == "skipped":
                assert case.match in skipped.get(str(path), ""), case.name
            elif case.outcome == "ingested":
                uri = str(path.resolve())
                assert uri in added, (case.name, errors.get(str(path)))
                texts = [t for (t,) in conn.execute(
                    "SELECT text FROM chunks WHERE source=?", (uri,))]
                assert texts and all(t.strip() for t in texts), case.name
                assert case.match in " ".join(texts), case.name
                assert case.warning in warnings.get(str(path), ""), (case.name, warnings)
                assert "root:x:0:0" not in " ".join(texts)  # nothing read from outside
            elif case.outcome == "members":  # a mailbox: streamed, member by member
                assert errors.get(f"{path}#message-1", "").startswith(
                    "a member over the max_file_mb limit"), (case.name, sorted(errors))
                small = f"{path}#small@example.com"
                assert small in added, (case.name, sorted(added))
                texts = [t for (t,) in conn.execute(
                    "SELECT text FROM chunks WHERE source=?", (small,))]
                assert case.match in " ".join(texts), case.name
        assert len(report.added) == len(added)  # the link loop repeated nothing
        assert len(added) == sum(c.outcome in ("ingested", "members") for c in cases) + (
            os.geteuid() == 0)  # (root read the unreadable one)
        after = _content(iso)
        assert {k: after[k] for k in before} == before  # nothing stored before is lost
        assert iso.check() == []
        top = iso.search("How many vacation days do new employees get?", k=1).results[0]
        assert Path(top.chunk.source).name == "handbook.md"


def test_an_unreadable_file_is_an_error_as_a_user(tmp_path: Path) -> None:
    """The hostile corpus's unreadable file, ingested as a user who may not read it (as
    root, through an unprivileged user: root reads every file)."""
    folder = tmp_path / "unreadable"
    folder.mkdir()
    (folder / "readable.md").write_text("The lift is serviced every March by Oskar.\n")
    (folder / "secret.md").write_text("The vault code is 4412.\n")
    (folder / "secret.md").chmod(0)
    assert "Permission denied" in unreadable_as_user(folder)


def _peak_rss(index: Path, folder: Path) -> tuple[int, float]:
    done = subprocess.run([sys.executable, str(WORKER), str(index), str(folder)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    fields = done.stdout.splitlines()[-1].split()  # done ADDED UNCHANGED ERRORS PEAK_MB
    return int(fields[3]), float(fields[4])


def test_memory_stays_bounded_for_a_100_mb_file(tmp_path: Path) -> None:
    small, big = tmp_path / "small", tmp_path / "big"
    small.mkdir()
    big.mkdir()
    (small / "note.txt").write_text("A single small note about the zebra archive.\n")
    (big / "note.txt").write_text("A single small note about the zebra archive.\n")
    with open(big / "huge.txt", "wb") as fh:
        fh.truncate(BIG_MB * 1_000_000 + 1)  # sparse: as large as it gets, instantly
    _, baseline = _peak_rss(tmp_path / "a", small)
    errors, peak = _peak_rss(tmp_path / "b", big)
    assert errors == 1  # the huge file, reported; the note is ingested
    assert peak < baseline + 32, (peak, baseline)
    print(f"peak RSS: {peak:.0f} MB with the {BIG_MB} MB file, {baseline:.0f} MB without")
