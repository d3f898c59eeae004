"""A broken shared cache never breaks a command: work goes on uncached, with one warning.

The cache (``cache_dir/cache.db``) is shared by every index of the user and is safe to
delete, so a cache that cannot be opened, read or written is bypassed, never fatal. All of
these tests go through a real ``Isotope`` (SQLite store, bundled MiniLM embedder); the
language model is conftest's fake.
"""

from __future__ import annotations

import logging
import random
import sqlite3
import threading
from pathlib import Path

import pytest

from isotope import Isotope
from isotope.embedders import Embedder
from isotope.errors import ProviderError
from isotope.providers import LLM
from isotope.providers.cache import Cache

from conftest import FakeLLM

QUESTION = "How many vacation days do new employees get?"


def _cache_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "isotope.providers.cache" and r.levelno == logging.WARNING]


def _ingest_and_search(index: Path, examples: Path, embedder: Embedder,
                       llm: LLM | None = None, **settings: object) -> tuple[int, int]:
    """Ingest the examples into a new index, check that search finds the handbook, and
    return (questions, atoms)."""
    with Isotope.open(index, embedder=embedder, llm=llm or FakeLLM(),  # type: ignore[arg-type]
                      **settings) as iso:
        report = iso.ingest(examples)
        assert report.ok and len(report.added) == 4, report
        assert report.questions > 0 and report.embedded + report.embedding_cache_hits > 0
        top = iso.search(QUESTION, k=1).results[0]
        assert top.chunk.source.endswith("handbook.md")
        assert iso.status().counts["questions"] == report.questions
        return report.questions, report.atoms


def _populate(tmp_path: Path, examples: Path, embedder: Embedder) -> tuple[Path, int]:
    """A cache filled by one ingest, closed (checkpointed: no -wal file left), and the
    number of questions of that ingest."""
    questions, _ = _ingest_and_search(tmp_path / "first", examples, embedder)
    db = tmp_path / "cache" / "cache.db"
    assert db.stat().st_size > 20 * 4096
    assert not Path(f"{db}-wal").exists()
    return db, questions


def test_a_cache_with_a_garbage_header_is_bypassed_with_one_warning_naming_it(
    tmp_path: Path, embedder: Embedder, examples: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "cache" / "cache.db"
    db.parent.mkdir()
    garbage = b"this is no SQLite file\n" * 1000
    db.write_bytes(garbage)
    llm = FakeLLM()
    _, atoms = _ingest_and_search(tmp_path / "idx", examples, embedder, llm)
    assert llm.calls >= atoms  # every reply computed
    warnings = _cache_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert str(db) in warnings[0] and "file is not a database" in warnings[0]
    assert "safe" in warnings[0] and f"rm {db}" in warnings[0]
    assert db.read_bytes() == garbage  # the broken file is left alone
    # A second index in the same process (another Cache object) warns once more, no more.
    _ingest_and_search(tmp_path / "idx2", examples, embedder)
    assert len(_cache_warnings(caplog)) == 2


def test_a_cache_dir_that_is_a_regular_file_is_bypassed_with_one_warning(
    tmp_path: Path, embedder: Embedder, examples: Path, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    regular = tmp_path / "notes.txt"
    regular.write_text("my notes\n")
    monkeypatch.setenv("ISOTOPE_CACHE_DIR", str(regular))
    _ingest_and_search(tmp_path / "idx", examples, embedder)
    warnings = _cache_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert str(regular / "cache.db") in warnings[0]
    assert f"{regular} is not a directory" in warnings[0]
    assert "rm" not in warnings[0]  # deleting the user's file would not be safe
    assert regular.read_text() == "my notes\n"


def test_a_cache_under_a_regular_file_is_bypassed_too(
    tmp_path: Path, embedder: Embedder, examples: Path, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    regular = tmp_path / "notes.txt"
    regular.write_text("my notes\n")
    monkeypatch.setenv("ISOTOPE_CACHE_DIR", str(regular / "isotope"))
    _ingest_and_search(tmp_path / "idx", examples, embedder)
    warnings = _cache_warnings(caplog)
    assert len(warnings) == 1 and f"{regular} is not a directory" in warnings[0], warnings


def test_a_cache_db_that_is_a_directory_is_bypassed(
    tmp_path: Path, embedder: Embedder, examples: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "cache" / "cache.db"
    db.mkdir(parents=True)
    _ingest_and_search(tmp_path / "idx", examples, embedder)
    warnings = _cache_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert "unable to open database file" in warnings[0] and f"rm -r {db}" in warnings[0]


def test_a_half_corrupt_cache_still_lets_the_work_complete(
    tmp_path: Path, embedder: Embedder, examples: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db, questions = _populate(tmp_path, examples, embedder)
    data = bytearray(db.read_bytes())
    page = 4096
    pages = len(data) // page
    rng = random.Random(0)
    for number in range(pages // 3, 2 * pages // 3):  # the middle third of the b-trees
        data[number * page : (number + 1) * page] = rng.randbytes(page)
    db.write_bytes(bytes(data))
    # The same questions as with a sound cache: nothing garbled was taken from it.
    assert _ingest_and_search(tmp_path / "second", examples, embedder)[0] == questions
    warnings = _cache_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert str(db) in warnings[0] and "malformed" in warnings[0]
    assert f"rm {db}" in warnings[0]


def test_a_read_only_cache_is_bypassed_with_one_warning_and_left_unchanged(
    tmp_path: Path, embedder: Embedder, examples: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A read-only cache, made so by SQLite itself: byte 18 of the header (the file
    format's "write version") set above 2 means "read this file, never write it" for every
    SQLite, whatever the permissions (chmod would not stop the root user the tests may run
    as). Opening and reading work; the first write fails with "attempt to write a readonly
    database"."""
    db, _ = _populate(tmp_path, examples, embedder)
    data = bytearray(db.read_bytes())
    data[18] = 3
    db.write_bytes(bytes(data))
    llm = FakeLLM()
    # Three questions per atom: replies the cache lacks, which it then cannot store.
    _ingest_and_search(tmp_path / "second", examples, embedder, llm, questions_per_atom=3)
    assert llm.calls > 0
    warnings = _cache_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert str(db) in warnings[0] and "readonly" in warnings[0]
    assert db.read_bytes() == bytes(data)


def test_opening_listing_and_status_never_touch_the_cache(
    tmp_path: Path, embedder: Embedder, examples: Path
) -> None:
    cache_dir = tmp_path / "cache"
    with Isotope.open(tmp_path / "idx", embedder=embedder, llm=FakeLLM()) as iso:
        assert iso.sources() == []
        assert iso.status().counts["sources"] == 0
        assert iso.check() == []
    with Isotope.open(tmp_path / "idx", embedder=embedder, llm=FakeLLM()) as iso:
        iso.sources()
        iso.status()
    assert not cache_dir.exists()


def test_commands_that_need_no_cache_do_not_warn_about_a_broken_one(
    tmp_path: Path, embedder: Embedder, examples: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with Isotope.open(tmp_path / "idx", embedder=embedder, llm=FakeLLM(), cache=False) as iso:
        iso.ingest(examples)
    db = tmp_path / "cache" / "cache.db"
    db.parent.mkdir()
    db.write_bytes(b"\0garbage" * 512)
    with Isotope.open(tmp_path / "idx", embedder=embedder, llm=FakeLLM()) as iso:
        assert len(iso.sources()) == 4
        assert iso.status().counts["sources"] == 4
        iso.delete(iso.sources()[0].source.uri)
        assert len(iso.sources()) == 3
    assert _cache_warnings(caplog) == []


class Failing(FakeLLM):
    def complete_batch(self, prompts, **kwargs):  # type: ignore[no-untyped-def]
        raise ProviderError("HTTP 401: bad key")


def test_errors_of_the_model_still_propagate_through_a_broken_cache(
    tmp_path: Path, embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "cache" / "cache.db"
    db.parent.mkdir()
    db.write_bytes(b"garbage" * 1000)
    with Isotope.open(tmp_path / "idx", embedder=embedder, llm=Failing()) as iso:
        llm = iso.llm()
        with pytest.raises(ProviderError, match="bad key"):
            llm.complete_batch([[{"role": "user", "content": "hello"}]])
        assert llm.stats.hits == 0 and llm.stats.misses == 1  # the failed read: a miss
        assert llm.cached([[{"role": "user", "content": "hello"}]]) == [False]
    assert len(_cache_warnings(caplog)) == 1


def test_stats_count_a_failed_read_as_a_miss(
    tmp_path: Path, embedder: Embedder, examples: Path
) -> None:
    db, _ = _populate(tmp_path, examples, embedder)
    with Isotope.open(tmp_path / "second", embedder=embedder, llm=FakeLLM()) as iso:
        texts = ["first text to embed", "second text to embed"]
        iso.embedder.embed(texts)  # now cached
        stats = iso.embedder.stats  # type: ignore[attr-defined]
        assert (stats.hits, stats.misses) == (0, 2)
        iso.embedder.embed(texts)
        assert (stats.hits, stats.misses) == (2, 2)
        assert iso.cache is not None
        iso.cache.close()
        db.write_bytes(b"garbage" * 2000)  # broken under the running process
        vectors = iso.embedder.embed(texts)
        assert (stats.hits, stats.misses) == (2, 4)
        assert vectors.shape == (2, 384) and abs(float((vectors[0] ** 2).sum()) - 1) < 1e-3


def test_threads_sharing_a_broken_cache_warn_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "cache.db"
    db.write_bytes(b"garbage" * 1000)
    cache = Cache(db)
    assert not db.with_name("cache.db-wal").exists()
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(20):
                assert cache.get_embeddings(["a", "b"]) == {}
                cache.put_replies([("k", "text", 0, 0)])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cache.close()
    assert errors == []
    assert len(_cache_warnings(caplog)) == 1


def test_a_valid_sqlite_file_of_another_shape_is_bypassed(
    tmp_path: Path, embedder: Embedder, examples: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Someone else's database at the cache's path: tables of the same names, other
    columns."""
    db = tmp_path / "cache" / "cache.db"
    db.parent.mkdir()
    conn = sqlite3.connect(db)
    conn.executescript("CREATE TABLE replies (id INTEGER); CREATE TABLE embeddings (id INTEGER);")
    conn.close()
    _ingest_and_search(tmp_path / "idx", examples, embedder)
    warnings = _cache_warnings(caplog)
    assert len(warnings) == 1 and "no such column" in warnings[0], warnings


def test_every_command_works_with_a_garbage_cache(
    tmp_path: Path, examples: Path, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The adversarial run's report: ``isotope list``, ``status``, ``query`` and ``ingest``
    gave tracebacks with a garbage cache.db."""
    from typer.testing import CliRunner

    from isotope.cli import app

    monkeypatch.setenv("ISOTOPE_QUESTION_MODEL", "fake/echo")
    monkeypatch.setenv("ISOTOPE_ANSWER_MODEL", "fake/echo")
    db = tmp_path / "cache" / "cache.db"
    db.parent.mkdir()
    db.write_bytes(b"garbage" * 1000)
    runner = CliRunner()
    index = str(tmp_path / "idx")
    for args in (["ingest", str(examples), "--plain"], ["list"],
                 ["status"], ["query", QUESTION], ["query", QUESTION, "--raw", "--json"]):
        result = runner.invoke(app, [*args, "--index", index])
        assert result.exit_code == 0, (args, result.output, result.exception)
        assert "Traceback" not in result.output
    assert "handbook.md" in result.stdout
    warnings = _cache_warnings(caplog)
    assert warnings and all(str(db) in w for w in warnings)
