"""Read replicas (issue 30): a real primary and two streaming standbys made with
pg_basebackup (tests/replication.py). Searches are spread over the replicas, a standby
stopped under 8 searching clients fails no search, a search after a write sees it (read
your writes), a lagging standby is skipped, and `isotope status --json` shows each
replica's lag. The bundled embedder and the fake model's replies."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from isotope import Isotope
from isotope.embedders import Embedder
from isotope.errors import InvalidArgument
from replication import Cluster, Standby

from conftest import FakeLLM

FACTS = {
    "lighthouse": "The old lighthouse on Skerry Point was automated in 1987.",
    "bakery": "The harbour bakery sells cardamom buns from six in the morning.",
    "ferry": "The island ferry leaves the pier every ninety minutes in summer.",
}
_SCHEMAS = iter(range(1, 10_000))


@pytest.fixture
def index(replicated: Cluster, tmp_path: Path) -> str:
    """A fresh index on the primary, its location naming both standbys, with three
    documents, replayed by both."""
    schema = f"r{next(_SCHEMAS)}"
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in FACTS.items():
        (docs / f"{name}.md").write_text(f"# {name.title()}\n\n{text}\n")
    with Isotope.open(f"{replicated.primary_url}&schema={schema}", llm=FakeLLM(),
                      cache=False) as iso:
        iso.ingest(docs)
    location = replicated.location(schema)
    replicated.caught_up()
    return location


def _opened(location: str, embedder: Embedder, **settings: Any) -> Isotope:
    return Isotope.open(location, embedder=embedder, llm=FakeLLM(), cache=False, **settings)


def _transactions(cluster: Cluster, standby: Standby) -> int:
    return int(cluster.sql(standby, "SELECT xact_commit + xact_rollback FROM "
                                    "pg_stat_database WHERE datname = 'postgres'")[0][0])


@pytest.fixture
def paused(replicated: Cluster) -> Iterator[list[Standby]]:
    """Standbys whose replay a test pauses (resumed after it)."""
    held: list[Standby] = []
    yield held
    for standby in held:
        replicated.sql(standby, "SELECT pg_wal_replay_resume()")
    replicated.caught_up()


def test_searches_are_spread_over_the_replicas(replicated: Cluster, index: str,
                                               embedder: Embedder) -> None:
    before = [_transactions(replicated, s) for s in replicated.standbys]
    with _opened(index, embedder) as iso:
        for _ in range(40):
            found = iso.search("When was the lighthouse automated?", k=2, mode="hybrid")
            assert found.results[0].chunk.source.endswith("lighthouse.md")
    time.sleep(1.5)  # (a server process counts its transactions when it ends)
    after = [_transactions(replicated, s) for s in replicated.standbys]
    served = [b - a for a, b in zip(before, after, strict=True)]
    assert all(n >= 15 for n in served), served  # each took about half of the 40
    with _opened(index, embedder) as iso:
        shown = iso.status().replicas
        assert [r["healthy"] for r in shown] == [True, True]
        assert all(r["lag_s"] is not None and r["lag_s"] < 5 for r in shown)
        assert all("socket" in r["url"] for r in shown)


@contextmanager
def _searching(iso: Isotope) -> Iterator[tuple[list[int], list[BaseException]]]:
    """8 threads searching until the block ends (then joined): the searches each has
    done, and every failure."""
    failures: list[BaseException] = []
    done = [0] * 8
    stop = threading.Event()

    def client(n: int) -> None:
        while not stop.is_set():
            try:
                found = iso.search("Which bakery sells buns?", k=2, mode="hybrid")
                assert found.results[0].chunk.source.endswith("bakery.md")
                done[n] += 1
            except BaseException as exc:
                failures.append(exc)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    try:
        yield done, failures
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        assert not any(t.is_alive() for t in threads)


def test_a_standby_stopped_under_8_searching_clients_fails_no_search(
        replicated: Cluster, index: str, embedder: Embedder) -> None:
    with _opened(index, embedder) as iso:
        try:
            with _searching(iso) as (done, failures):
                stopped_at = sum(done)
                replicated.stop(replicated.standbys[0])
                time.sleep(2.0)
            assert failures == []
            assert sum(done) > stopped_at + 8  # searches went on without it
            shown = iso.status().replicas
            assert [r["healthy"] for r in shown] == [False, True]
            assert shown[0]["error"] and shown[0]["lag_s"] is None
        finally:
            replicated.start(replicated.standbys[0])
    replicated.caught_up()


def _processes(cluster: Cluster, standby: Standby) -> list[int]:
    """The standby's postmaster and every process it started."""
    postmaster = int((standby.data / "postmaster.pid").read_text().split()[0])
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == postmaster:
            children.append(int(stat.parent.name))
    return [postmaster, *children]


def test_a_hung_standby_under_8_searching_clients_fails_no_search(
        replicated: Cluster, index: str, embedder: Embedder,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A standby that answers nothing (its processes stopped with SIGSTOP: the kernel
    still takes connections and acknowledges what is sent) is cut off after
    ``ANSWER_WITHIN`` seconds and each search caught on it is made again elsewhere."""
    import os
    import signal

    import isotope.stores.postgres_replicas as replicas

    monkeypatch.setattr(replicas, "ANSWER_WITHIN", 2.0)
    hung: list[int] = []
    with _opened(index, embedder) as iso:
        try:
            with _searching(iso) as (done, failures):
                hung += _processes(replicated, replicated.standbys[0])  # (its searches')
                for pid in hung:
                    os.kill(pid, signal.SIGSTOP)
                time.sleep(2.5)
                stopped_at = sum(done)
                time.sleep(2.0)
            assert failures == []
            assert sum(done) > stopped_at + 8  # searches went on without it
            shown = iso.status().replicas
            assert [r["healthy"] for r in shown] == [False, True]
            assert shown[0]["error"]
        finally:
            for pid in hung:
                os.kill(pid, signal.SIGCONT)
    replicated.caught_up()


def test_a_standby_cut_off_from_the_primary_is_skipped(
        replicated: Cluster, index: str, embedder: Embedder, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A standby whose WAL receiver stops (a network split) has replayed all it received,
    so its replay says lag 0; once the primary (which answers) has written past it, its
    lag counts from when it was seen so, and past ``replica_max_lag`` no search reads it:
    a search finds what only the primary and the other standby hold."""
    import isotope.stores.postgres as postgres
    import isotope.stores.postgres_replicas as replicas

    cut = replicated.standbys[0]
    conninfo = replicated.sql(cut, "SHOW primary_conninfo")[0][0]
    assert conninfo

    def receiving() -> bool:
        return bool(replicated.sql(cut, "SELECT count(*) FROM pg_stat_wal_receiver")[0][0])

    replicated.sql(cut, "ALTER SYSTEM SET primary_conninfo = ''")
    replicated.sql(cut, "SELECT pg_reload_conf()")
    try:
        deadline = time.monotonic() + 30
        while receiving():
            assert time.monotonic() < deadline, "the WAL receiver did not stop"
            time.sleep(0.1)
        with _opened(index, embedder, replica_max_lag=0.5) as iso:
            shown = iso.status().replicas  # (not behind the primary: as good as any)
            assert [r["healthy"] for r in shown] == [True, True]
            assert "not receiving WAL" in shown[0]["error"] and shown[1]["error"] is None
            new = tmp_path / "more"
            new.mkdir()
            (new / "museum.md").write_text("# Museum\n\nThe maritime museum shows a kayak.\n")
            with _opened(index, embedder) as writer:
                writer.ingest(new)
            postgres._WRITTEN.clear()  # (as another process: no write of its own to wait for)
            replicated.caught_up_but(cut)
            deadline = time.monotonic() + 20
            while (shown := iso.status().replicas)[0]["healthy"]:
                assert "not receiving WAL" in shown[0]["error"]  # (said while it is fine)
                assert time.monotonic() < deadline, shown
                time.sleep(0.2)
            assert [r["healthy"] for r in shown] == [False, True]
            assert shown[0]["lag_s"] > 0.5
            assert "not receiving WAL from the primary" in shown[0]["error"]
            monkeypatch.setattr(replicas, "PROBE_EVERY", 600.0)  # (as status said)
            before = [_transactions(replicated, s) for s in replicated.standbys]
            for _ in range(20):
                found = iso.search("Which museum shows a kayak?", k=1, mode="chunks-dense")
                assert found.results[0].chunk.source.endswith("museum.md")
        time.sleep(1.5)
        served = [_transactions(replicated, s) - b
                  for s, b in zip(replicated.standbys, before, strict=True)]
        # the searches all found what the cut-off standby does not hold, and read the
        # other standby (the first one's count holds the probes of the status calls
        # above: a server process may count its transactions when it ends)
        assert served[1] >= 15, served
    finally:
        escaped = conninfo.replace("'", "''")
        replicated.sql(cut, f"ALTER SYSTEM SET primary_conninfo = '{escaped}'")
        replicated.sql(cut, "SELECT pg_reload_conf()")
    replicated.caught_up()


def test_a_search_after_a_write_sees_it(replicated: Cluster, index: str, tmp_path: Path,
                                        embedder: Embedder, paused: list[Standby]) -> None:
    """Read your writes (a dense search: the replicas' own reads): with one standby's
    replay paused, a search right after an ingest
    finds the new document every time (the other standby once it has replayed the write,
    or the primary); with both paused, the primary after ``replica_wait``."""
    new = tmp_path / "more"
    new.mkdir()
    with _opened(index, embedder, replica_wait=0.5) as iso:
        for standby in replicated.standbys[:1]:
            replicated.sql(standby, "SELECT pg_wal_replay_pause()")
            paused.append(standby)
        for n in range(3):
            (new / f"museum{n}.md").write_text(
                f"# Museum {n}\n\nThe maritime museum number {n} shows a whaling boat.\n")
            iso.ingest(new)
            for _ in range(4):  # each on another replica in turn
                found = iso.search(f"Which museum number {n} shows a whaling boat?", k=1,
                                   mode="chunks-dense")
                assert found.results[0].chunk.source.endswith(f"museum{n}.md")
        replicated.sql(replicated.standbys[1], "SELECT pg_wal_replay_pause()")
        paused.append(replicated.standbys[1])
        (new / "museum9.md").write_text("# Museum 9\n\nThe ninth museum shows a kayak.\n")
        iso.ingest(new)
        started = time.monotonic()
        found = iso.search("Which museum shows a kayak?", k=1, mode="chunks-dense")
        assert found.results[0].chunk.source.endswith("museum9.md")
        assert time.monotonic() - started < 5  # the wait is bounded


def test_a_lagging_standby_is_skipped(replicated: Cluster, index: str, tmp_path: Path,
                                      embedder: Embedder, paused: list[Standby]) -> None:
    """A standby whose replay is paused while the primary writes falls behind; past
    ``replica_max_lag`` no search reads it, even one that did not write (another
    process: it does not wait for any write of its own)."""
    lagging = replicated.standbys[0]
    replicated.sql(lagging, "SELECT pg_wal_replay_pause()")
    paused.append(lagging)
    new = tmp_path / "more"
    new.mkdir()
    (new / "museum.md").write_text("# Museum\n\nThe maritime museum shows a kayak.\n")
    with _opened(index, embedder) as writer:
        writer.ingest(new)
    time.sleep(1.2)
    import isotope.stores.postgres as postgres

    postgres._WRITTEN.clear()  # (as another process: no write of its own to wait for)
    with _opened(index, embedder, replica_max_lag=1.0) as iso:
        for _ in range(10):
            found = iso.search("Which museum shows a kayak?", k=1, mode="chunks-dense")
            assert found.results[0].chunk.source.endswith("museum.md")
        shown = iso.status().replicas
        assert [r["healthy"] for r in shown] == [False, True]
        assert shown[0]["lag_s"] > 1.0 and shown[0]["error"] is None


def test_replicas_from_the_setting_and_status_json(replicated: Cluster, index: str,
                                                    tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The read_replicas setting (ISOTOPE_READ_REPLICAS, a JSON list or comma-separated),
    `isotope status --json` with each replica's url, healthy and lag_s; an SQLite index
    refuses the setting."""
    import json

    from typer.testing import CliRunner

    from isotope.cli import app

    primary = index.split("&replica=")[0]
    monkeypatch.setenv("ISOTOPE_READ_REPLICAS", ",".join(
        s.url for s in replicated.standbys))
    monkeypatch.setenv("ISOTOPE_QUESTION_MODEL", "fake/echo")
    result = CliRunner().invoke(app, ["status", "-i", primary, "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)["replicas"]
    assert [r["healthy"] for r in shown] == [True, True]
    assert [r["url"].split("socket")[1] for r in shown] == ["1", "2"]
    assert all(isinstance(r["lag_s"], float | int) for r in shown)
    shown = CliRunner().invoke(app, ["status", "-i", primary]).stdout
    assert shown.count("read replica") == 2 and shown.count("healthy, lag") == 2, shown
    monkeypatch.setenv("ISOTOPE_READ_REPLICAS", json.dumps([replicated.standbys[0].url]))
    result = CliRunner().invoke(app, ["status", "-i", primary, "--json"])
    assert len(json.loads(result.stdout)["replicas"]) == 1
    with pytest.raises(InvalidArgument, match="read_replicas are for an index in PostgreSQL"):
        Isotope.open(tmp_path / "embedded", llm=FakeLLM(), cache=False,
                     read_replicas=[replicated.standbys[0].url])


class _SlowLLM(FakeLLM):
    def complete_batch(self, prompts, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(0.05 * len(prompts))
        return super().complete_batch(prompts, **kwargs)


def test_the_primary_restarted_during_an_ingest(replicated: Cluster, index: str,
                                                tmp_path: Path, embedder: Embedder) -> None:
    """The ingest in flight fails with one clear line and leaves no source half written;
    searches on the replicas go on while the primary is away; the next ingest finishes
    the folder."""
    import subprocess

    from isotope.errors import IsotopeError

    folder = tmp_path / "many"
    folder.mkdir()
    for n in range(12):
        (folder / f"harbour{n}.md").write_text(
            f"# Harbour {n}\n\nBerth {n} of the harbour takes boats of {n + 3} metres. "
            f"Its crane lifts {n + 1} tonnes.\n")
    import isotope.search.fitted

    reader = _opened(index, embedder)
    reader.search("Which bakery sells buns?", k=1)
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "kiosk.md").write_text("# Kiosk\n\nThe kiosk sells maps.\n")
    reader.ingest(tmp_path / "own")  # (a write of the reader's own: it reads its writes)
    failed: list[BaseException] = []

    def ingest() -> None:
        try:
            with Isotope.open(index, embedder=embedder, llm=_SlowLLM(), cache=False) as iso:
                iso.ingest(folder)
        except BaseException as exc:  # what the user sees
            failed.append(exc)

    writer = threading.Thread(target=ingest)
    writer.start()
    time.sleep(1.0)
    data = str(replicated.primary_socket)  # (pgserver keeps its data where its socket is)
    import shlex

    started_with = shlex.split((Path(data) / "postmaster.opts").read_text())[1:]
    at = started_with.index("-D")
    options = shlex.join(started_with[:at] + started_with[at + 2:])
    subprocess.run(replicated._as_server(replicated.bin / "pg_ctl", "-D", data, "-m", "fast",
                                         "-w", "stop"), check=True, capture_output=True,
                   timeout=120)
    try:
        writer.join(timeout=120)
        isotope.search.fitted.FITTED_FOR = 0.0  # (the fitted weights are read at every search)
        for _ in range(5):  # the primary is away: searches go on
            found = reader.search("Which bakery sells buns?", k=1, mode="hybrid")
            assert found.results[0].chunk.source.endswith("bakery.md")
    finally:
        isotope.search.fitted.FITTED_FOR = 10.0
        log = replicated.base / "primary-restarted.log"
        replicated._owned(log, folder=False)
        subprocess.run(replicated._as_server(replicated.bin / "pg_ctl", "-D", data, "-o",
                                             options, "-l", log, "-w", "start"),
                       check=True, capture_output=True, timeout=120)
        reader.close()
    assert len(failed) == 1 and isinstance(failed[0], IsotopeError), failed
    said = str(failed[0])
    assert "\n" not in said and "Traceback" not in said, said
    assert "is the server running" in said.lower() or "try again" in said, said
    with _opened(index, embedder) as iso:
        assert iso.check() == []  # no source half written
        done = iso.ingest(folder)
        assert not done.errors
        assert iso.status().counts["sources"] == len(FACTS) + 13


def test_a_replicas_password_is_never_shown() -> None:
    """In the index URL (`?replica=` a URL-encoded URL) or the setting: masked wherever
    the location is shown, and taken out of any message that quotes it."""
    from urllib.parse import quote

    from isotope.redaction import redact
    from isotope.stores import describe
    from isotope.stores.postgres_schema import replicas_in

    location = ("postgresql://me:first-secret@db/knowledge?schema=h&replica="
                + quote("postgresql://me:second-secret@r1:5433/knowledge", safe="")
                + "&replica=r2:5434")
    shown = describe(location)
    assert "secret" not in shown and "r1:5433" in shown and "r2:5434" in shown
    said = redact(f"failed at {location}: second-secret", location)
    assert "secret" not in said
    written = ("postgresql://me:first-secret@db/knowledge?schema=h&replica="
               "postgresql://me:second-secret@r1:5433/knowledge")  # (not URL-encoded)
    shown = describe(written)
    assert "secret" not in shown and shown.startswith("postgresql://me:***@db/")
    assert "secret" not in redact(f"at {written}: first-secret, second-secret", written)
    assert replicas_in(location) == ["postgresql://me:second-secret@r1:5433/knowledge",
                                     "postgresql://me:first-secret@r2:5434/knowledge"]


def test_a_replica_that_is_not_one_of_this_index_is_left_out(
        replicated: Cluster, index: str, postgres_server: str, embedder: Embedder) -> None:
    """A server that is not a standby (the primary itself, as a promoted standby is; a
    server of its own) and a standby's database without the index were counted healthy
    at lag 0 (issue 42, item 13): a revoked document stayed visible through one, and
    searches failed on the other. Each is left out, and status says why."""
    primary = index.split("&replica=")[0]
    standby = replicated.standbys[0]
    other_db = standby.url.replace("/postgres?", "/template1?")
    named = [replicated.primary_url, postgres_server, other_db]
    with _opened(primary, embedder, read_replicas=named) as iso:
        for _ in range(12):
            found = iso.search("When was the lighthouse automated?", k=2, mode="hybrid")
            assert found.results[0].chunk.source.endswith("lighthouse.md")
        lighthouse = found.results[0].chunk.source
        iso.set_access(lighthouse, ["user:keeper"])
        seen = iso.search("When was the lighthouse automated?", k=3, principal="user:eve")
        assert all(r.chunk.source != lighthouse for r in seen.results)
        shown = iso.status().replicas
    assert [r["healthy"] for r in shown] == [False, False, False]
    assert "not a standby" in shown[0]["error"] and "not a standby" in shown[1]["error"]
    assert "does not hold this index" in shown[2]["error"]
    with _opened(index, embedder) as iso:  # (the real standbys still serve)
        assert [r["healthy"] for r in iso.status().replicas] == [True, True]


def test_a_write_by_another_process_is_read_by_this_one(
        replicated: Cluster, index: str, tmp_path: Path, embedder: Embedder,
        paused: list[Standby]) -> None:
    """Read your writes across processes (issue 42, item 14: with `isotope serve
    --workers 2`, the worker that did not write searched a lagging replica): a write by
    another process of this machine is waited for as this process's own are."""
    import subprocess
    import sys

    for standby in replicated.standbys:
        replicated.sql(standby, "SELECT pg_wal_replay_pause()")
        paused.append(standby)
    new = tmp_path / "more"
    new.mkdir()
    (new / "kayak.md").write_text("# Kayak\n\nThe harbour museum lends a red kayak.\n")
    with _opened(index, embedder, replica_wait=0.3) as iso:
        iso.search("warm up", k=1)  # (the replicas probed, healthy: paused at no lag)
        done = subprocess.run([sys.executable, "-m", "isotope", "ingest", str(new),
                               "--index", index, "--questions", "later"],
                              capture_output=True, text=True)  # (no model called)
        assert done.returncode == 0, done.stderr
        found = iso.search("Which museum lends a red kayak?", k=1, mode="chunks-dense")
        assert found.results[0].chunk.source.endswith("kayak.md")
