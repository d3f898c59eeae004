"""What an adversarial run found (issue 16): wrong results, a wiped index, hangs and
tracebacks. Each test fails without its fix; everything is real but the model's reply."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from isotope import Chunk, Isotope
from isotope.cli import app
from isotope.embedders import Embedder
from isotope.errors import IndexDamaged, InvalidArgument, StoreError, SyncRefused

import support
from conftest import FakeLLM

runner = CliRunner()
ENV = {"ISOTOPE_QUESTION_MODEL": "fake/echo", "ISOTOPE_ANSWER_MODEL": "fake/echo"}
GARAGE = "The parking garage opens at six in the morning and closes at midnight."
POOL = "The swimming pool is heated to twenty-eight degrees all year round."
GYM = "The gym on the second floor has rowing machines and free weights."


def _open(index: Path, embedder: Embedder, **settings: object) -> Isotope:
    return Isotope.open(index, embedder=embedder, llm=FakeLLM(), **settings)


def _write(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def _ingested(tmp_path: Path, embedder: Embedder, files: dict[str, str],
              folder: str = "docs") -> tuple[Path, Path]:
    """A folder of ``files`` ingested into ``tmp_path/index``: (the folder, the index)."""
    docs = _write(tmp_path / folder, files)
    with _open(tmp_path / "index", embedder) as iso:
        iso.ingest(docs)
    return docs, tmp_path / "index"


def _top(iso: Isotope, query: str) -> str:
    return Path(iso.search(query, k=1).results[0].chunk.source).name


# -- 1. vectors belong to one database state -----------------------------------------
def _restored(tmp_path: Path, embedder: Embedder, *, compact: bool) -> tuple[Path, Path]:
    """An index that held a.txt, then a.txt and b.txt, then had its isotope.db of the
    first state copied back (vectors/ left as the second state made it)."""
    docs = _write(tmp_path / "docs", {"a.txt": GARAGE, "b.txt": POOL, "c.txt": GYM})
    index = tmp_path / "index"
    with _open(index, embedder) as iso:
        iso.ingest(docs / "a.txt")
        assert _top(iso, "When does the parking garage open?") == "a.txt"
        if compact:
            iso.compact()
    shutil.copy(index / "isotope.db", tmp_path / "aside.db")  # without vectors/
    with _open(index, embedder) as iso:
        iso.ingest(docs / "b.txt")
        iso.search("How warm is the swimming pool?")
        if compact:
            iso.compact()  # the files the copy names are gone
    shutil.copy(tmp_path / "aside.db", index / "isotope.db")
    return docs, index


def test_a_restored_database_never_reads_another_states_vectors(
    tmp_path: Path, embedder: Embedder
) -> None:
    docs, index = _restored(tmp_path, embedder, compact=False)
    with _open(index, embedder) as iso:
        iso.ingest(docs / "c.txt")  # a counter would now repeat b's generation
        assert _top(iso, "When does the parking garage open?") == "a.txt"
        assert {Path(i.source.uri).name for i in iso.sources()} == {"a.txt", "c.txt"}
        assert iso.check() == []


@pytest.mark.parametrize("damage", ["zeroed", "empty", "deleted"])
def test_damaged_vector_files_are_named_and_repair_embeds_them_again(
    tmp_path: Path, embedder: Embedder, damage: str
) -> None:
    docs = _write(tmp_path / "docs", {"a.txt": GARAGE, "b.txt": POOL})
    with _open(tmp_path / "index", embedder) as iso:
        iso.ingest(docs)
        iso.compact()  # the vectors leave the database for vectors/
        before = iso.search("When does the parking garage open?").results
    vectors = tmp_path / "index" / "vectors"
    for file in vectors.glob("questions-*.npy"):
        if damage == "zeroed" and file.name.endswith(".idx.npy"):
            continue  # the vectors only, ids intact: the file still loads
        if damage == "zeroed":  # the same size and shape: only the digest tells
            saved = np.load(file, mmap_mode="r+")
            saved[:] = 0
            saved.flush()
            del saved
        elif damage == "empty":  # a crash after the rename
            file.write_bytes(b"")
        else:
            file.unlink()
    with _open(tmp_path / "index", embedder) as iso:
        problems = iso.check()
        assert any("questions vectors" in p and "damaged" in p for p in problems), problems
        if damage != "zeroed":  # unreadable: a search says so, it never answers wrongly
            with pytest.raises(IndexDamaged, match="check --repair"):
                iso.search("When does the parking garage open?")
        report = iso.repair()
        assert report.problems == [] and not report.removed and not report.reingested
        after = iso.search("When does the parking garage open?").results
        assert [r.chunk.id for r in after] == [r.chunk.id for r in before]
        assert iso.check() == []


def test_a_restored_database_whose_vector_files_were_compacted_away_is_repaired(
    tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    from isotope.stores import sqlite_vectors

    monkeypatch.setattr(sqlite_vectors, "RETIRE_AFTER", 0.0)  # replaced files go at once
    _, index = _restored(tmp_path, embedder, compact=True)
    with _open(index, embedder) as iso:
        with pytest.raises(IndexDamaged, match="missing or damaged"):
            iso.search("When does the parking garage open?")
        assert iso.repair().problems == []
        assert _top(iso, "When does the parking garage open?") == "a.txt"
        assert {Path(i.source.uri).name for i in iso.sources()} == {"a.txt"}


# -- 2. sync never mass-deletes on an emptied or unmounted folder ------------------------
def test_sync_of_an_emptied_folder_refuses_and_removes_nothing(
    tmp_path: Path, embedder: Embedder
) -> None:
    mount, index = _ingested(tmp_path, embedder, {"a.txt": GARAGE, "b.txt": POOL}, "mnt")
    for file in mount.iterdir():  # unmounted: an empty directory remains
        file.unlink()
    result = runner.invoke(app, ["sync", str(mount), "--index", str(index)], env=ENV)
    assert result.exit_code == 1
    assert "would remove 2 of the 2 sources" in result.output and "--force" in result.output
    with _open(index, embedder) as iso:
        assert len(iso.sources()) == 2
        with pytest.raises(SyncRefused):
            iso.sync(mount)
        assert sorted(Path(u).name for u in iso.sync(mount, force=True).removed) == [
            "a.txt", "b.txt"]
        assert iso.sources() == []


def test_sync_refuses_to_empty_an_unmounted_subfolder(tmp_path: Path,
                                                      embedder: Embedder) -> None:
    files = {f"{n}.txt": f"{GYM} Room {n}." for n in range(6)}
    files.update({f"usb/{n}.txt": f"{POOL} Lane {n}." for n in range(2)})
    (tmp_path / "docs" / "usb").mkdir(parents=True)
    docs, _ = _ingested(tmp_path, embedder, files)
    for n in range(2):
        (docs / "usb" / f"{n}.txt").unlink()  # the drive mounted at usb/ is gone
    with _open(tmp_path / "index", embedder) as iso:
        with pytest.raises(SyncRefused, match="usb, now an empty folder"):
            iso.sync(docs)
        assert len(iso.sources()) == 8
        assert len(iso.sync(docs, force=True).removed) == 2


def test_sync_removes_a_few_deleted_files_without_force(
    tmp_path: Path, embedder: Embedder
) -> None:
    docs = _write(tmp_path / "docs", {f"{n}.txt": f"{GARAGE} Floor {n}." for n in range(6)})
    with _open(tmp_path / "index", embedder) as iso:
        iso.ingest(docs)
        (docs / "0.txt").unlink()
        (docs / "1.txt").unlink()
        assert len(iso.sync(docs).removed) == 2
        for n in range(2, 6):
            (docs / f"{n}.txt").unlink()
        with pytest.raises(SyncRefused, match="4 of the 4"):
            iso.sync(docs)


# -- 3. a source is the path it was reached by -------------------------------------------
def test_sources_are_the_paths_they_were_reached_by(tmp_path: Path, embedder: Embedder,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "r1", {"hotline.txt": "The support hotline number is 555-0101."})
    _write(tmp_path / "r2", {"hotline.txt": "The support hotline number is 555-0202."})
    (tmp_path / "current").symlink_to("r1")
    with _open(tmp_path / "index", embedder) as iso:
        iso.ingest("current")
        (tmp_path / "current").unlink()
        (tmp_path / "current").symlink_to("r2")
        report = iso.sync("current")
        assert report.replaced == [str(tmp_path / "current" / "hotline.txt")]
        infos = iso.sources()
        assert [(i.source.uri, i.state) for i in infos] == [
            (str(tmp_path / "current" / "hotline.txt"), "current")]
        hits = iso.search("What is the support hotline number?", k=5).results
        assert hits, "the index is empty"
        assert "555-0202" in hits[0].chunk.text
        assert all("555-0101" not in h.chunk.text for h in hits)
        found = iso.search("hotline number?", filters={"source": "current/*"}).results
        assert found and found[0].chunk.source.endswith("current/hotline.txt")

        # a link to a file outside the folder is a source of the folder; deleting the
        # link deletes the source
        _write(tmp_path / "outside", {"secret.txt": POOL})
        docs = _write(tmp_path / "docs", {"a.txt": GARAGE, "b.txt": GYM, "c.txt": "Lunch."})
        (docs / "link.txt").symlink_to("../outside/secret.txt")
        iso.ingest(docs)
        (docs / "link.txt").unlink()
        assert iso.sync(docs).removed == [str(docs / "link.txt")]
        iso.delete("current/hotline.txt")
        assert all("hotline" not in i.source.uri for i in iso.sources())


def test_sources_stored_under_resolved_paths_by_an_older_isotope_are_taken_over(
    tmp_path: Path, embedder: Embedder
) -> None:
    real = _write(tmp_path / "real", {"a.txt": GARAGE, "b.txt": POOL})
    (tmp_path / "docs").symlink_to("real")
    docs = tmp_path / "docs"
    with _open(tmp_path / "index", embedder) as iso:
        iso.ingest(real)  # what an older isotope stored for `ingest docs`
        (real / "b.txt").unlink()
        report = iso.sync(docs)
        assert sorted(report.replaced) == [str(docs / "a.txt")]
        assert report.removed == [str(real / "b.txt")]
        assert report.reused_chunks == 1  # nothing generated again
        assert [i.source.uri for i in iso.sources()] == [str(docs / "a.txt")]
        assert iso.check() == []


def test_a_symlinked_duplicate_is_ingested_once_and_the_report_counts_what_is_stored(
    tmp_path: Path, embedder: Embedder
) -> None:
    docs = _write(tmp_path / "docs", {"a.txt": GARAGE})
    (docs / "b.txt").symlink_to("a.txt")
    with _open(tmp_path / "index", embedder) as iso:
        report = iso.ingest(docs)
        assert report.added == [str(docs / "a.txt")]
        assert [s.path for s in report.skipped] == [str(docs / "b.txt")]
        assert "the same file as" in report.skipped[0].message
        assert report.questions == iso.status().counts["questions"] > 0


# -- 4. ingest_chunks in batches ---------------------------------------------------------
def test_ingest_chunks_without_a_source_keeps_every_batch(
    tmp_path: Path, embedder: Embedder
) -> None:
    with _open(tmp_path / "index", embedder) as iso:
        iso.ingest_chunks([GARAGE])
        iso.ingest_chunks([POOL])
        assert iso.status().counts["sources"] == 2
        assert _top(iso, "When does the parking garage open?") != _top(
            iso, "How warm is the swimming pool?")
        assert iso.ingest_chunks([POOL]).unchanged  # the same batch again: nothing new
        iso.ingest_chunks([GYM], source="batch")
        iso.ingest_chunks([Chunk(text=GYM + " It opens at seven.")], source="batch")
        assert iso.status().counts["sources"] == 3  # a named source is replaced


# -- 5. every read of a user file is guarded ----------------------------------------------
def _finishes(run: object, seconds: float = 30) -> object:
    result: list[object] = []
    worker = threading.Thread(target=lambda: result.append(run()), daemon=True)  # type: ignore[operator]
    worker.start()
    worker.join(seconds)
    assert result, "did not finish (it hangs reading a FIFO or a device)"
    return result[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs")
def test_list_does_not_read_a_fifo_or_a_device_that_replaced_a_file(
    tmp_path: Path, embedder: Embedder
) -> None:
    docs = _write(tmp_path / "docs", {"a.txt": GARAGE, "b.txt": POOL})
    with _open(tmp_path / "index", embedder, max_file_mb=1) as iso:
        iso.ingest(docs)
        (docs / "a.txt").unlink()
        os.mkfifo(docs / "a.txt")
        (docs / "b.txt").unlink()
        (docs / "b.txt").symlink_to("/dev/zero")
        infos = _finishes(lambda: iso.sources())
        assert {Path(i.source.uri).name: i.state for i in infos} == {  # type: ignore[attr-defined]
            "a.txt": "changed", "b.txt": "changed"}


# -- 6. check and a damaged database --------------------------------------------------------
def test_check_names_the_sources_that_lost_rows_and_repair_redoes_them(
    tmp_path: Path, embedder: Embedder
) -> None:
    docs, index = _ingested(tmp_path, embedder, {"a.txt": GARAGE, "b.txt": POOL})
    db = sqlite3.connect(index / "isotope.db")
    db.execute("PRAGMA foreign_keys=ON")  # the atom's questions go with it
    db.execute("DELETE FROM atoms WHERE chunk_id IN (SELECT id FROM chunks WHERE source "
               "LIKE '%a.txt')")
    db.commit()
    db.close()
    checked = runner.invoke(app, ["check", "--index", str(index)])
    assert checked.exit_code == 1 and "source lost rows" in checked.output
    assert str(docs / "a.txt") in checked.output and str(docs / "b.txt") not in checked.output
    with _open(index, embedder) as iso:
        assert iso.ingest(docs).unchanged  # an ingest skips it: the content did not change
        assert iso.ingest(docs / "a.txt", force=True).replaced == [str(docs / "a.txt")]
        assert iso.check() == []
        assert _top(iso, "When does the parking garage open?") == "a.txt"


def test_a_truncated_vector_neither_crashes_queries_nor_passes_check(
    tmp_path: Path, embedder: Embedder
) -> None:
    _, index = _ingested(tmp_path, embedder, {"a.txt": GARAGE, "b.txt": POOL})
    with _open(index, embedder) as iso:
        support.connection(iso).execute(
            "UPDATE vector_log SET vector = substr(vector, 1, 100) WHERE kind = 'questions' "
            "AND item IN (SELECT rowid FROM questions WHERE chunk_id IN "
            "(SELECT id FROM chunks WHERE source LIKE '%b.txt'))")
        assert _top(iso, "When does the parking garage open?") == "a.txt"
        problems = iso.check()
        assert any("no sound vector" in p and "b.txt" in p for p in problems), problems
    repaired = runner.invoke(app, ["check", "--repair", "--index", str(index)], env=ENV)
    assert repaired.exit_code == 0, repaired.output  # embedded again, nothing re-ingested
    with _open(index, embedder) as iso:
        assert iso.check() == []
        assert _top(iso, "How warm is the swimming pool?") == "b.txt"


def test_repair_removes_and_names_damaged_sources_it_cannot_ingest_again(
    tmp_path: Path, embedder: Embedder
) -> None:
    with _open(tmp_path / "index", embedder) as iso:
        iso.ingest_chunks([GARAGE], source="notes")
        iso.ingest_chunks([POOL], source="pool")
        support.connection(iso).execute("DELETE FROM atoms WHERE chunk_id IN (SELECT id FROM "
                                  "chunks WHERE source = 'notes')")
        report = iso.repair()
        assert report.removed == ["notes"] and report.problems == []
        assert [i.source.uri for i in iso.sources()] == ["pool"]


def test_a_damaged_database_gives_one_line_errors_and_check_reports_it(
    tmp_path: Path, embedder: Embedder
) -> None:
    _, index = _ingested(tmp_path, embedder, {f"{n}.txt": f"{GARAGE} Level {n}. " * 40
                                              for n in range(12)})
    db = index / "isotope.db"
    pages = db.stat().st_size // 4096
    with open(db, "r+b") as fh:  # garbage over one page in the middle (not the schema)
        fh.seek((pages // 2) * 4096)
        fh.write(os.urandom(4096))
    for command in (["check"], ["check", "--repair"], ["list"], ["status"],
                    ["query", "When does the parking garage open?", "--raw"]):
        result = runner.invoke(app, [*command, "--index", str(index)], env=ENV)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            import traceback
            traceback.print_exception(result.exception)
            raise AssertionError(command)
        if result.exit_code:
            assert "isotope.db" in result.output or "sqlite" in result.output, command
    checked = runner.invoke(app, ["check", "--index", str(index)])
    assert checked.exit_code == 1
    assert "damaged" in checked.output or "malformed" in checked.output


def test_a_read_only_command_never_writes_a_schema_into_an_empty_file(
    tmp_path: Path,
) -> None:
    index = tmp_path / "index"
    index.mkdir()
    (index / "isotope.db").write_bytes(b"")
    for command in (["check"], ["list"], ["status"], ["query", "x?", "--raw"]):
        result = runner.invoke(app, [*command, "--index", str(index)])
        assert result.exit_code == 1 and "not an isotope index" in result.output, command
    assert (index / "isotope.db").stat().st_size == 0


def test_disk_full_during_ingest_names_the_real_error_and_keeps_what_was_stored(
    tmp_path: Path, embedder: Embedder
) -> None:
    first = _write(tmp_path / "first", {"a.txt": GARAGE})
    more = _write(tmp_path / "more", {f"{n}.txt": f"{POOL} Lane {n}. " * 200
                                      for n in range(5)})
    with _open(tmp_path / "index", embedder) as iso:
        iso.ingest(first)
        conn = support.connection(iso)
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages + 2}")  # the disk fills up
        with pytest.raises(StoreError, match=r"full.*nothing of this write was stored"):
            iso.ingest(more)
        assert _top(iso, "When does the parking garage open?") == "a.txt"
        assert iso.check() == []


# -- 8. a read-only index answers -----------------------------------------------------------
def _read_only_mount_works(path: Path) -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount --bind {path} {path} && "
         f"mount -o remount,bind,ro {path} {path}"], capture_output=True)
    return probe.returncode == 0


def test_a_read_only_index_can_be_queried(tmp_path: Path, embedder: Embedder) -> None:
    _, index = _ingested(tmp_path, embedder, {"a.txt": GARAGE, "b.txt": POOL})
    assert not (index / "isotope.db-wal").exists()  # closed cleanly
    isotope = [sys.executable, "-m", "isotope"]
    query = [*isotope, "query", "When does the parking garage open?", "--raw", "--json",
             "--index", str(index)]
    env = {**os.environ, "ISOTOPE_CACHE": "false"}
    if _read_only_mount_works(index):  # root ignores file modes: a read-only mount
        script = (f"mount --bind {index} {index} && mount -o remount,bind,ro {index} "
                  f"{index} && exec \"$@\"")
        command = ["unshare", "-m", "sh", "-c", script, "sh", *query]
    elif os.geteuid() != 0:
        for path in (index, *index.iterdir()):
            path.chmod(0o555 if path.is_dir() else 0o444)
        command = query
    else:
        pytest.skip("no way to make a read-only folder here")
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["results"][0]["chunk"]["source"].endswith("a.txt")


# -- 9, 12. values that are refused with one line ----------------------------------------------
@pytest.fixture
def small_index(tmp_path: Path, embedder: Embedder) -> Path:
    docs = _write(tmp_path / "docs", {"a.txt": GARAGE, "b.txt": POOL, "c.txt": GYM,
                                      "d.txt": "Lunch is served from noon."})
    with _open(tmp_path / "index", embedder) as iso:
        iso.ingest(docs)
    return tmp_path / "index"


@pytest.mark.parametrize("args, message", [
    (["-k", "-1"], "from 1 to"),
    (["-k", "0"], "from 1 to"),
    (["-k", "99999999999999999999"], "from 1 to"),
])
def test_out_of_range_k_is_one_line(small_index: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["query", "When does the garage open?", "--raw", *args,
                                 "--index", str(small_index)], env=ENV)
    assert result.exit_code == 1 and message in result.output
    assert result.output.count("\n") == 1


def test_empty_queries_are_refused_and_undecodable_bytes_are_searched(
    small_index: Path, embedder: Embedder
) -> None:
    with _open(small_index, embedder) as iso:
        for query in ("", "   \n"):
            with pytest.raises(InvalidArgument, match="empty"):
                iso.search(query)
        # what a terminal in another encoding gives Python: lone surrogates
        assert _top(iso, "parking garage \udcff\udcfe open?") == "a.txt"
    huge = runner.invoke(app, ["query", "garage?", "--raw", "--where",
                               "page>=99999999999999999999", "--index", str(small_index)])
    assert huge.exit_code == 0 and "no results" in huge.output


def test_an_unexpected_error_is_one_line_and_v_shows_the_traceback(
    small_index: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from isotope import cli
    from isotope.index import Isotope as Index

    def broken(self: Index, **options: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(Index, "status", broken)
    monkeypatch.setattr(sys, "argv", ["isotope", "status", "--index", str(small_index)])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert "error: RuntimeError: a bug" in err and "-v" in err and "Traceback" not in err
    monkeypatch.setattr(sys, "argv", ["isotope", "-v", "status", "--index", str(small_index)])
    with pytest.raises(RuntimeError):
        cli.main()


# -- 10, 11. what a terminal shows ---------------------------------------------------------------
def test_control_characters_and_brackets_from_user_data_are_shown_as_they_are(
    tmp_path: Path, embedder: Embedder
) -> None:
    docs = _write(tmp_path / "docs", {
        "\x1b[2Jclear.txt": "The parking garage \x1b]0;pwned\x07 opens at six.",
        "[red]x.txt": POOL,
    })
    (docs / "[local]notes.txt").write_text(GYM)
    index = str(tmp_path / "index")
    with _open(tmp_path / "index", embedder):
        pass
    assert runner.invoke(app, ["ingest", str(docs), "--index", index], env=ENV).exit_code == 0
    listed = runner.invoke(app, ["list", "--index", index])
    shown = runner.invoke(app, ["query", "When does the parking garage open?", "--raw",
                                "--index", index])
    for output in (listed.output, shown.output):
        assert "\x1b" not in output and "\x07" not in output
    assert "\\x1b[2Jclear.txt" in listed.output and "[red]x.txt" in listed.output
    assert "\\x1b]0;pwned" in shown.output
    deleted = runner.invoke(app, ["delete", str(docs / "[local]notes.txt"), "--index", index])
    assert deleted.exit_code == 0 and "[local]notes.txt" in deleted.output
    gone = runner.invoke(app, ["delete", str(docs / "\x1b[2Jclear.txt"), "--index", index])
    assert gone.exit_code == 0 and "\x1b" not in gone.output


def test_emoji_codes_and_log_lines_are_shown_as_they_are(tmp_path: Path) -> None:
    docs = _write(tmp_path / "docs", {":warning:notes.txt": GARAGE, "\x1b]0;x\x07.txt": ""})
    index = str(tmp_path / "index")
    result = runner.invoke(app, ["ingest", str(docs), "--index", index], env=ENV)
    assert "\x1b" not in result.output and "\\x1b]0;x" in result.output  # the log line too
    listed = runner.invoke(app, ["list", "--index", index])
    assert ":warning:notes.txt" in listed.output


def test_eval_refuses_a_device_instead_of_reading_it_forever(tmp_path: Path) -> None:
    queries = _write(tmp_path, {"q.jsonl": '{"question": "Why?", "gold_pid": "1"}\n'})
    result = runner.invoke(app, ["eval", "/dev/zero", str(queries / "q.jsonl")])
    assert result.exit_code == 1 and "not a regular file" in result.output


def test_an_install_hint_keeps_its_brackets(small_index: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "litellm", None)  # as if not installed
    result = runner.invoke(app, ["query", "When does the garage open?", "--index",
                                 str(small_index)], env={"ISOTOPE_ANSWER_MODEL": "litellm/x"})
    assert result.exit_code == 1
    assert "pip install 'isotopedb[litellm]'" in result.output


def test_from_import_tells_a_broken_install_from_a_missing_one() -> None:
    from isotope.errors import IsotopeError, MissingDependency

    missing = MissingDependency.from_import(ModuleNotFoundError("no llama_cpp"), "x", "local")
    assert isinstance(missing, MissingDependency)
    broken = MissingDependency.from_import(
        ImportError("cannot import name 'Llama' from partially initialized module"), "x",
        "local")
    assert not isinstance(broken, MissingDependency) and isinstance(broken, IsotopeError)
    assert "run the command again" in str(broken)


# -- newcomer polish ------------------------------------------------------------------------------
def test_version_summary_lines_and_where_the_index_is(
    small_index: Path, tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    from isotope import __version__

    assert runner.invoke(app, ["--version"]).output.strip() == f"isotope {__version__}"
    docs = _write(tmp_path / "more", {"e.txt": "Parcels are left at the front desk."})
    result = runner.invoke(app, ["ingest", str(docs), "--index", str(small_index)], env=ENV)
    assert any(line.startswith("ingested 1 new") and line.endswith("skipped")
               for line in result.output.splitlines()), result.output
    with Isotope.open("notes", embedder=embedder, llm=FakeLLM()) as iso:
        where = str(tmp_path / "projects" / "notes")
        assert repr(iso) == f"Isotope(index={where!r}, project='notes')"
        assert iso.status().index == where and iso.status().project == "notes"
    status = runner.invoke(app, ["status", "--project", "notes"])
    assert "(project notes)" in status.output


def test_help_paragraphs_are_not_broken_mid_sentence() -> None:
    import inspect

    from isotope.cli import project_app

    for command in (*app.registered_commands, *project_app.registered_commands):
        assert command.callback is not None
        group = [] if command in app.registered_commands else ["project"]
        name = command.name or command.callback.__name__.rstrip("_").replace("_", "-")
        if group:
            name = name.removeprefix("project-")
        shown = runner.invoke(app, [*group, name, "--help"], env={"COLUMNS": "200"})
        assert shown.exit_code == 0, name
        lines = [" ".join(line.strip(" │").split()) for line in shown.output.splitlines()]
        for part in inspect.cleandoc(command.callback.__doc__ or "").split("\n\n"):
            paragraph = " ".join(part.split())
            if len(paragraph) < 150:
                assert paragraph in lines, (name, paragraph)


def _tmpfs_works() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1M tmpfs "
                            "/mnt"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _tmpfs_works(), reason="needs root and mount namespaces for a "
                    "small tmpfs of its own (a real full disk)")
def test_a_full_disk_during_compaction_is_one_line_and_loses_nothing(
        tmp_path: Path, embedder: Embedder) -> None:
    """A real full file system (a tmpfs of its own, filled up): `isotope compact` says
    so in one line naming the file (usearch says only "Failed to serialize"), and the
    index still answers and checks clean once space is freed."""
    docs = _write(tmp_path / "docs", {f"{n}.txt": f"{GARAGE} Level {n} has {n} spaces. "
                                      f"{POOL}" for n in range(12)})
    with _open(tmp_path / "index", embedder, vector_index="hnsw") as iso:
        iso.ingest(docs)
    size = sum(f.stat().st_size for f in (tmp_path / "index").rglob("*") if f.is_file())
    mount = tmp_path / "disk"
    mount.mkdir()
    python = f"{sys.executable} -m isotope"
    script = f"""
set -u
mount -t tmpfs -o size={size + 4 * 1024 * 1024} tmpfs {mount}
cp -r {tmp_path / 'index'} {mount}/index
dd if=/dev/zero of={mount}/filler bs=1k count=$(( $(df -k --output=avail {mount} \
    | tail -1) - 64 )) 2>/dev/null
ISOTOPE_VECTOR_INDEX=hnsw {python} compact --index {mount}/index
echo "compact-exit=$?"
dd if=/dev/zero of={mount}/more bs=64k 2>/dev/null
{python} status --index {mount}/index
echo "status-exit=$?"
rm {mount}/more
rm {mount}/filler
{python} query "When does the parking garage open?" --raw --json --index {mount}/index \
    > {tmp_path}/query.json
echo "query-exit=$?"
{python} check --index {mount}/index
echo "check-exit=$?"
"""
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "ISOTOPE_CACHE": "false"})
    said = done.stdout + done.stderr
    assert "compact-exit=1" in said, said
    assert "Traceback" not in said and "a bug in isotope" not in said, said
    error_lines = [line for line in said.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 2 and all("full" in line for line in error_lines), said
    assert ".npy" in error_lines[0] or ".usearch" in error_lines[0]  # the file it wrote
    assert "status-exit=1" in said and "damaged" not in said
    assert "query-exit=0" in said and "check-exit=0" in said, said
    found = json.loads((tmp_path / "query.json").read_text())
    assert found["results"] and "garage" in found["results"][0]["chunk"]["text"]


@pytest.mark.skipif(not _tmpfs_works(), reason="needs root and mount namespaces for a "
                    "small tmpfs of its own (a real full disk)")
def test_a_full_disk_during_an_upload_answers_507_and_keeps_nothing(
        tmp_path: Path, embedder: Embedder) -> None:
    """A real `isotope serve` whose disk fills up: an upload spooled by the form parser
    (over 1 MB) and one saved to the uploads folder both answer 507 in the API's form,
    nothing is left behind, and the server goes on answering."""
    pytest.importorskip("fastapi", reason="pip install 'isotopedb[server]'")
    _, index = _ingested(tmp_path, embedder, {"a.txt": GARAGE})
    mount, port = tmp_path / "disk", _free_port()
    mount.mkdir()
    client = f"""
import httpx, json, sys, time
url = "http://127.0.0.1:{port}"
for _ in range(300):
    try:
        httpx.get(url + "/health"); break
    except httpx.HTTPError:
        time.sleep(0.1)
for name, size in (("big.txt", 3_000_000), ("small.txt", 20_000)):
    r = httpx.post(url + "/ingest", files={{"files": (name, b"x " * (size // 2))}}, timeout=60)
    print(name, r.status_code, json.dumps(r.json()))
print("search", httpx.post(url + "/search", json={{"query": "garage"}}).status_code)
"""
    uploads = index / "uploads"
    uploads.mkdir()
    fill = ("dd if=/dev/zero of={}/.filler bs=1k count=$(( $(df -k --output=avail {} | "
            "tail -1) - 8 )) 2>/dev/null")
    script = f"""
set -u
mount -t tmpfs -o size=1M tmpfs {mount}
mount -t tmpfs -o size=1M tmpfs {uploads}
{fill.format(mount, mount)}
{fill.format(uploads, uploads)}
TMPDIR={mount} {sys.executable} -m isotope serve --index {index} --port {port} \
    2>{tmp_path}/serve.log &
server=$!
timeout 120 {sys.executable} -c '{client}'
kill $server; wait $server
echo "left: $(ls -A {mount} {uploads} | grep -v -x -e .filler -e '' -e '.*:' | tr '\n' ' ')"
"""
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "ISOTOPE_CACHE": "false"})
    said = done.stdout + done.stderr
    for name in ("big.txt", "small.txt"):
        line = next((ln for ln in said.splitlines() if ln.startswith(name)), said)
        assert " 507 " in line and "disk is full" in line, said
    assert "search 200" in said, said
    left = next(line for line in said.splitlines() if line.startswith("left:"))
    assert left.split() in (["left:"], ["left:", ".ses"]), said  # (.ses: onnxruntime's)
    assert "Traceback" not in (tmp_path / "serve.log").read_text()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.skipif(not _tmpfs_works(), reason="needs root and mount namespaces for a "
                    "read-only mount of its own")
def test_a_read_only_index_refuses_writes_in_one_line_and_says_what_waits(
        tmp_path: Path, embedder: Embedder) -> None:
    """On a read-only mount: a write is a StoreError naming the fix; an index whose WAL
    still holds writes, or whose schema is older, says so instead of failing later."""
    _, index = _ingested(tmp_path, embedder, {"a.txt": GARAGE, "b.txt": POOL})
    older = tmp_path / "older"
    shutil.copytree(index, older)
    with sqlite3.connect(older / "isotope.db") as conn:
        conn.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    waiting = tmp_path / "waiting"
    shutil.copytree(index, waiting)
    holder = sqlite3.connect(waiting / "isotope.db")  # a write left in the WAL
    holder.execute("PRAGMA journal_mode=WAL")
    holder.execute("PRAGMA wal_autocheckpoint=0")
    holder.execute("INSERT INTO meta(key, value) VALUES ('note', '1')")
    holder.commit()
    wal = (waiting / "isotope.db-wal").read_bytes()
    db = (waiting / "isotope.db").read_bytes()
    holder.close()  # (closing checkpoints: put the state with a waiting WAL back)
    (waiting / "isotope.db").write_bytes(db)
    (waiting / "isotope.db-wal").write_bytes(wal)  # (a copy without its -shm file)
    (waiting / "isotope.db-shm").unlink(missing_ok=True)
    python = f"{sys.executable} -m isotope"
    docs = tmp_path / "more"
    docs.mkdir()
    (docs / "c.txt").write_text(GYM)
    script = f"""
for d in {index} {older} {waiting}; do mount --bind $d $d && mount -o remount,bind,ro $d $d; done
{python} ingest {docs} --index {index} --questions later; echo "ingest-exit=$?"
{python} list --index {older}; echo "older-exit=$?"
{python} list --index {waiting}; echo "waiting-exit=$?"
"""
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "ISOTOPE_CACHE": "false"})
    said = done.stdout + done.stderr
    assert "Traceback" not in said, said
    assert "ingest-exit=1" in said and "read-only" in said and "writable folder" in said
    assert "older-exit=1" in said and "cannot be migrated in place" in said
    assert "waiting-exit=1" in said and "recent writes wait in isotope.db-wal" in said


def test_check_repair_touches_nothing_in_a_damaged_database(
        tmp_path: Path, embedder: Embedder) -> None:
    _, index = _ingested(tmp_path, embedder, {f"{n}.txt": f"{GARAGE} Level {n}. " * 40
                                              for n in range(12)})
    db = index / "isotope.db"
    pages = db.stat().st_size // 4096
    with open(db, "r+b") as fh:
        fh.seek((pages // 2) * 4096)
        fh.write(os.urandom(4096))
    before = {p.name: p.read_bytes() for p in index.rglob("*") if p.is_file()}
    result = runner.invoke(app, ["check", "--repair", "--index", str(index)], env=ENV)
    assert result.exit_code == 1
    after = {p.name: p.read_bytes() for p in index.rglob("*") if p.is_file()
             if not p.name.endswith(("-wal", "-shm"))}
    assert after == {k: v for k, v in before.items() if not k.endswith(("-wal", "-shm"))}


def test_repair_keeps_the_sources_of_a_folder_that_is_gone(tmp_path: Path,
                                                           embedder: Embedder) -> None:
    """A damaged source whose folder is unmounted is kept (``report.kept``), not removed
    as if its file were deleted."""
    mount, index = _ingested(tmp_path, embedder, {"a.txt": GARAGE, "b.txt": POOL}, "mnt")
    with _open(index, embedder) as iso:
        uri = next(i.source.uri for i in iso.sources() if i.source.uri.endswith("a.txt"))
        support.connection(iso).execute(
            "DELETE FROM atoms WHERE chunk_id IN (SELECT id FROM chunks WHERE source = ?)",
            (uri,))
        shutil.rmtree(mount)  # unmounted
        report = iso.repair()
        assert report.kept == [uri] and report.removed == []
        assert len(iso.sources()) == 2


def test_sync_refuses_to_remove_most_of_a_folder_over_four(tmp_path: Path,
                                                           embedder: Embedder) -> None:
    """More than half of a folder's sources (over 4) gone is refused; half is not."""
    docs = _write(tmp_path / "docs", {f"{n}.txt": f"{GARAGE} Floor {n}." for n in range(8)})
    with _open(tmp_path / "index", embedder) as iso:
        iso.ingest(docs)
        for n in range(5):  # 5 of 8
            (docs / f"{n}.txt").unlink()
        with pytest.raises(SyncRefused, match="5 of the 8"):
            iso.sync(docs)
        assert len(iso.sources()) == 8
        (docs / "0.txt").write_text(f"{GARAGE} Floor 0.")  # 4 of 8: half
        assert len(iso.sync(docs).removed) == 4


def test_an_unreadable_folder_is_not_taken_for_deleted(tmp_path: Path) -> None:
    """Its files cannot be seen, but they are not gone: sync removes nothing. Run as an
    unprivileged user (root reads every folder)."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="isotope-unreadable-"))
    try:
        base.chmod(0o777)
        (base / "docs" / "locked").mkdir(parents=True)
        _write(base / "docs", {f"locked/{n}.txt": f"{GARAGE} Room {n}."
                               for n in range(3)} | {"open.txt": POOL})
        for path in [base / "docs", *(base / "docs").rglob("*")]:
            path.chmod(0o777 if path.is_dir() else 0o666)
        code = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from isotope import Isotope
from conftest import FakeLLM
with Isotope.open({str(base / 'index')!r}, llm=FakeLLM(), cache=False) as iso:
    if sys.argv[1] == "ingest":
        iso.ingest({str(base / 'docs')!r}, questions="later")
    else:
        report = iso.sync({str(base / 'docs')!r}, questions="later")
        print("removed", len(report.removed), "sources", len(iso.sources()))
"""
        env = {**os.environ, "ISOTOPE_CACHE_DIR": str(base / "cache"), "HOME": str(base)}

        def run(step: str) -> subprocess.CompletedProcess[str]:
            command = [sys.executable, "-c", code, step]
            if os.geteuid() == 0:
                command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           *command]
            done = subprocess.run(command, capture_output=True, text=True, env=env,
                                  timeout=300)
            assert done.returncode == 0, done.stderr
            return done

        run("ingest")
        (base / "docs" / "locked").chmod(0)  # the user can no longer look inside
        assert "removed 0 sources 4" in run("sync").stdout
    finally:
        for path in base.rglob("*"):
            if path.is_dir():
                path.chmod(0o777)
        shutil.rmtree(base, ignore_errors=True)


# -- issue 64: files written at a path a user gives ---------------------------------------------
def test_a_file_written_at_a_user_s_path_follows_no_link_and_is_whole_or_absent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """:func:`isotope.files.write_atomically`, which every such writer uses: a link at the
    path is replaced, never written through; the mode is the replaced file's (else the
    umask's); a failed write leaves the old file and no temporary one."""
    from isotope import files

    victim = tmp_path / "victim"
    victim.write_text("not yours to write\n")
    target = tmp_path / "out.jsonl"
    target.symlink_to(victim)
    files.write_atomically(target, "first\n")
    assert not target.is_symlink() and target.read_text() == "first\n"
    assert victim.read_text() == "not yours to write\n"
    target.chmod(0o640)
    files.write_atomically(target, b"second\n")
    assert target.read_bytes() == b"second\n" and target.stat().st_mode & 0o777 == 0o640
    files.write_atomically(target, "private\n", private=True)
    assert target.stat().st_mode & 0o777 == 0o600

    def full(fd: int) -> None:  # (a full disk may say so only when flushed)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space"):
        files.write_atomically(target, "x" * 100_000)
    monkeypatch.undo()
    assert target.read_text() == "private\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl", "victim"]


def test_a_project_s_location_file_is_written_through_no_link(tmp_path: Path) -> None:
    """The file that holds a project's store URL (a password, maybe) was opened with
    O_CREAT|O_TRUNC, following a link planted at its name: the URL went wherever the link
    pointed. It is a private file of its own now."""
    from isotope import projects

    folder = tmp_path / "projects" / "remote"
    folder.mkdir(parents=True)
    (folder / projects.LOCATION_FILE).symlink_to(tmp_path / "elsewhere")  # (dangling)
    made = projects.create("remote", location=str(tmp_path / "store"))
    written = made / projects.LOCATION_FILE
    assert not (tmp_path / "elsewhere").exists()
    assert not written.is_symlink() and written.read_text() == f"{tmp_path / 'store'}\n"
    assert written.stat().st_mode & 0o777 == 0o600
