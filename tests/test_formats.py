"""Email, LaTeX and Word documents end to end: ingested through the loader registry,
their metadata filterable with --where and shown in results. The real store and
embedder; the fake model (conftest) writes the questions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from isotope import Isotope
from isotope.cli import app
from isotope.embedders import Embedder
from isotope.errors import LoaderError

from conftest import FakeLLM

runner = CliRunner()


def test_the_formats_are_ingested_searchable_and_filterable(
        tmp_path: Path, embedder: Embedder, formats: Path) -> None:
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM()) as iso:
        report = iso.ingest(formats)
        assert report.ok and report.warnings == []
        assert report.skipped == []  # references.bib is read with the paper, not skipped
        assert sorted(Path(a).name for a in report.added) == [
            "offsite-planning.eml", "offsite-planning.eml#agenda.txt", "robot-navigation.tex",
            "support.mbox#dock-1@example.com", "support.mbox#dock-2@example.com",
            "support.mbox#dock-3@example.com", "visitor-policy.docx"]
        # a text attachment is its own source, linked to its message
        agenda = iso.search("What happens on day 2 of the offsite?", k=1).results[0]
        assert agenda.chunk.source.endswith("offsite-planning.eml#agenda.txt")
        assert agenda.source_metadata["container"] == str(formats / "offsite-planning.eml")
        found = iso.search("What is the daily budget for the Lisbon offsite?", k=1)
        top = found.results[0]
        assert Path(top.chunk.source).name == "offsite-planning.eml"
        assert top.source_metadata["from"] == "alice@example.com"  # shown with the result
        only = iso.search("budget", filters={"from": "alice@example.com",
                                             "date": {"gte": "2024-01-01"}})
        assert {Path(r.chunk.source).name for r in only.results} == {"offsite-planning.eml"}
        assert iso.search("budget", filters={"date": {"gte": "2025-01-01"}}).results == []
        assert iso.search("budget", filters={"to": "bob@example.com"}).results

        # a query about a cited work finds the chunk that cites it
        cited = iso.search("Who studied lithium-ion ageing in warehouse fleets?", k=1)
        chunk = cited.results[0].chunk
        assert Path(chunk.source).name == "robot-navigation.tex"
        assert "okafor2021" in chunk.metadata["cite_keys"]
        assert any(w["authors"] == ["Okafor, Chidi", "Müller, Lena"]
                   for w in chunk.metadata["cites"])
        assert iso.search("charger", filters={"cite_keys": "okafor2021"}).results

        word = iso.search("When is the building open on Saturday?", k=1).results[0]
        assert Path(word.chunk.source).name == "visitor-policy.docx"
        assert iso.search("hours", filters={"author": "Facilities Team"}).results


def test_cli_where_on_email_headers_and_warnings_named(
        tmp_path: Path, formats: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("ISOTOPE_QUESTION_MODEL", "fake/echo")
    (formats / "broken.tex").write_text("\\section{Open\nThe lift is out of order.\n")
    index = str(tmp_path / "index")
    done = runner.invoke(app, ["ingest", str(formats), "--index", index, "--plain"])
    assert done.exit_code == 0, done.output
    assert "warning:" in done.stderr and "broken.tex: unbalanced braces" in done.stderr
    found = json.loads(runner.invoke(app, [
        "query", "budget per day", "--raw", "--index", index, "--json",
        "--where", "from=alice@example.com", "--where", "date>=2024-01-01"]).stdout)
    assert [Path(r["chunk"]["source"]).name for r in found["results"]] == [
        "offsite-planning.eml"]
    none = json.loads(runner.invoke(app, [
        "query", "budget per day", "--raw", "--index", index, "--json",
        "--where", "from=bob@example.com"]).stdout)
    assert none["results"] == []


def test_one_real_model_run_over_a_latex_paper(tmp_path: Path, embedder: Embedder,
                                               formats: Path) -> None:
    """The bundled offline model writes the questions of the LaTeX paper: the math and the
    citations reach it and its questions are stored."""
    import pytest

    pytest.importorskip("llama_cpp")
    with Isotope.open(tmp_path / "index", embedder=embedder) as iso:
        report = iso.ingest(formats / "robot-navigation.tex")
        assert report.ok and report.questions > 0
        shown = iso.questions(formats / "robot-navigation.tex")
        assert any(q.kept for q in shown)


def test_a_mailbox_is_a_source_per_message_kept_in_step(
        tmp_path: Path, embedder: Embedder, formats: Path) -> None:
    box = formats / "support.mbox"
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM()) as iso:
        report = iso.ingest(box)
        assert sorted(report.added) == [f"{box}#dock-{n}@example.com" for n in (1, 2, 3)]
        assert report.ok
        found = iso.search("How do I get the robot to find its dock?", k=1).results[0]
        assert found.chunk.source == f"{box}#dock-2@example.com"
        assert found.source_metadata["thread"] == "<dock-1@example.com>"
        assert found.source_metadata["container"] == str(box)
        # the quoted question of message 1 is not indexed again in the replies
        texts = [r.chunk.text for r in iso.search("drives past its charging dock", k=5,
                                                 mode="chunks-bm25").results]
        assert sum("drives past its charging dock" in t for t in texts) == 1
        thread = iso.search("dock", filters={"thread": "<dock-1@example.com>"}, k=10)
        assert len({r.chunk.source for r in thread.results}) == 3
        assert {i.state for i in iso.sources()} == {"current"}

        # a message appended: only it is new; one removed: its source goes
        text = box.read_text()
        box.write_text(text + "\nFrom dave@example.com Tue Jun  4 08:00:00 2024\n"
                       "From: dave@example.com\nSubject: Spare dock\nMessage-ID: <dock-4@"
                       "example.com>\n\nDo you sell a spare dock for the Orbit R2?\n")
        assert {i.state for i in iso.sources()} == {"current"}  # each message is as it was
        again = iso.ingest(box)
        assert again.added == [f"{box}#dock-4@example.com"] and len(again.unchanged) == 3
        first = text.index("From support@example.com")
        box.write_text(text[first:])
        third = iso.ingest(box)
        assert sorted(third.removed) == [f"{box}#dock-1@example.com",
                                         f"{box}#dock-4@example.com"]
        assert len(iso.sources()) == 2 and iso.check() == []
        iso.delete(box)  # the mailbox: all its messages
        assert iso.sources() == []


def test_a_large_mailbox_streams_in_bounded_memory(tmp_path: Path) -> None:
    """2,000 messages and one 80 MB message (over max_file_mb here: reported): the
    ingest's peak memory stays near that of a 20-message mailbox."""
    from test_hostile import _peak_rss

    def mailbox(folder: Path, messages: int, huge: bool) -> None:
        folder.mkdir()
        with open(folder / "archive.mbox", "w") as fh:
            for n in range(messages):
                fh.write(f"From x@example.com Mon Jun  3 10:00:00 2024\nFrom: u{n % 7}@example"
                         f".com\nSubject: note {n}\nMessage-ID: <m{n}@example.com>\n\nThe "
                         f"zebra archive note {n} says shelf {n % 50} holds box {n}.\n\n")
            if huge:
                fh.write("From x@example.com Mon Jun  3 10:00:00 2024\nSubject: huge\n\n")
                line = "a long line of the huge message " * 30 + "\n"
                fh.write(line * (80_000_000 // len(line)))
    mailbox(tmp_path / "small", 20, False)
    mailbox(tmp_path / "big", 2_000, True)
    errors, baseline = _peak_rss(tmp_path / "a", tmp_path / "small")
    assert errors == 0
    errors, peak = _peak_rss(tmp_path / "b", tmp_path / "big")
    assert errors == 1  # the huge message, reported; the 2,000 others ingested
    assert peak < baseline + 64, (peak, baseline)


def test_an_attachment_follows_its_message(tmp_path: Path, embedder: Embedder,
                                           formats: Path) -> None:
    mail = formats / "offsite-planning.eml"
    original = mail.read_text()
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM()) as iso:
        iso.ingest(mail)
        assert {Path(i.source.uri).name for i in iso.sources()} == {
            "offsite-planning.eml", "offsite-planning.eml#agenda.txt"}
        assert {i.state for i in iso.sources()} == {"current"}
        mail.write_text(original.split("--b1\nContent-Type: text/plain; charset=utf-8; name")[0]
                        + "--b1--\n")  # the attachment taken out
        report = iso.ingest(mail)
        assert report.replaced == [str(mail)] and report.removed == [f"{mail}#agenda.txt"]
        mail.write_text(original)
        iso.ingest(mail)
        mail.unlink()
        assert {i.state for i in iso.sources()} == {"missing"}
        removed = iso.sync(formats, force=True).removed
        assert f"{mail}#agenda.txt" in removed and str(mail) in removed
        assert all("offsite" not in i.source.uri for i in iso.sources())


def test_a_mailbox_by_thread(tmp_path: Path, embedder: Embedder, formats: Path) -> None:
    box = formats / "support.mbox"
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM(),
                      mail_sources="thread") as iso:
        report = iso.ingest(box)
        assert report.added == [f"{box}#thread-dock-1@example.com"]
        source = iso.sources()[0].source
        assert source.loader == "email-thread"
        assert source.metadata["from"] == ["carol@example.com", "support@example.com"]
        assert source.metadata["message_ids"] == [
            "<dock-1@example.com>", "<dock-2@example.com>", "<dock-3@example.com>"]
        assert source.metadata["date"] == "2024-06-03T10:02:11+00:00"
        assert source.metadata["date_last"] == "2024-06-03T12:40:05+00:00"
        text = " ".join(c.text for c in iso.store.get_chunks(
            [r.chunk.id for r in iso.search("dock", k=10).results]).values())
        assert text.count("drives past its charging dock") == 1  # quotes left out
        assert "Support, 2024-06-03T11:15:40+00:00:" in text
        assert iso.search("dock", filters={"from": "support@example.com"}).results
        assert iso.ingest(box).unchanged == [f"{box}#thread-dock-1@example.com"]


def test_members_go_with_their_container_and_an_emptied_mailbox_keeps_them(
        tmp_path: Path, embedder: Embedder, formats: Path) -> None:
    mail = (formats / "offsite-planning.eml").read_text()
    box = formats / "support.mbox"
    # message 2 of the mailbox carries the offsite email's attachment
    text = box.read_text()
    attached = mail.split("\n\n", 1)[1]
    boundary_headers = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"b1\"\n"
    second = text.index("From support@example.com")
    third = text.index("From carol@example.com", second)
    message = text[second:third].replace("In-Reply-To:", boundary_headers + "In-Reply-To:", 1)
    message = message.split("\n\n", 1)[0] + "\n\n" + attached + "\n"
    box.write_text(text[:second] + message + text[third:])
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM()) as iso:
        iso.ingest(box)
        attachment = f"{box}#dock-2@example.com#agenda.txt"
        assert attachment in {i.source.uri for i in iso.sources()}
        # message 2 leaves the mailbox: its attachment goes with it
        box.write_text(text[:second] + text[third:])
        report = iso.ingest(box)
        assert set(report.removed) == {f"{box}#dock-2@example.com", attachment}
        # a mailbox emptied (compacting, rewriting): nothing removed, an error says why
        box.write_text("")
        emptied = iso.ingest(box)
        assert emptied.removed == [] and len(iso.sources()) == 2
        assert "none removed" in emptied.errors[0].message
        box.write_text(text)
        iso.ingest(box)
        iso.delete(box)  # the mailbox, its messages and their attachments
        assert iso.sources() == []


def _mailbox(ids: list[str]) -> str:
    return "".join(
        f"From carol@example.com Mon Jun  3 10:0{n}:11 2024\nFrom: carol@example.com\n"
        f"Subject: Note {n}\nMessage-ID: <{m}@example.com>\n\nThe dock opens at {n} "
        "in the morning for deliveries of parts.\n\n" for n, m in enumerate(ids))


def test_a_mailbox_rewritten_with_other_messages_keeps_the_stored_ones(
        tmp_path: Path, embedder: Embedder) -> None:
    """A mailbox whose every message is new (rewritten, or another file put in its place)
    stores the new ones and removes none of the old without --force: the messages stored
    in this run do not count as held before it. Progress names every message, also the
    unchanged ones."""
    box = tmp_path / "notes.mbox"
    box.write_text(_mailbox([f"old-{n}" for n in range(6)]))
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM()) as iso:
        assert len(iso.ingest(box).added) == 6
        box.write_text(_mailbox([f"new-{n}" for n in range(6)]))
        report = iso.ingest(box)
        assert report.removed == [] and len(report.added) == 6
        assert "holds 0 of the 6 messages" in report.errors[0].message
        assert len(iso.sources()) == 12
        forced = iso.ingest(box, force=True)
        assert len(forced.removed) == 6 and len(iso.sources()) == 6
        loads: list[str] = []
        again = iso.ingest(box, progress=lambda p: loads.append(p.source)
                           if p.stage == "load" else None)
        assert len(again.unchanged) == 6
        assert loads == [str(box), *(f"{box}#new-{n}@example.com" for n in range(6))]


SPOOFED = """From: =?utf-8?b?Y2VvQGNvbXBhbnkuY29t?= <attacker@evil.example>
To: =?utf-8?q?Bob?= <bob@example.com>, =?utf-8?b?Y2VvQGNvbXBhbnkuY29t?=
Cc: "Eve, Jr" <eve@example.com>
Subject: Wire the money today
Message-ID: <spoof@evil.example>

Please wire the quarterly payment to the new account before noon.
"""


def test_an_encoded_display_name_never_becomes_the_sender(tmp_path: Path,
                                                          embedder: Embedder) -> None:
    """Issue 24: the address is parsed first and only the display name decoded, for From,
    To and Cc, so an encoded word cannot pose as an address."""
    mail = tmp_path / "mail"
    mail.mkdir()
    (mail / "spoof.eml").write_text(SPOOFED)
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM()) as iso:
        report = iso.ingest(mail)
        stored = iso.sources()[0].source.metadata
        assert stored["from"] == "attacker@evil.example"
        assert stored["from_name"] == "ceo@company.com"  # shown as the name it is
        assert stored["to"] == ["bob@example.com"] and stored["cc"] == ["eve@example.com"]
        assert any("no valid address" in w.message for w in report.warnings)
        assert iso.search("wire the payment", filters={"from": "ceo@company.com"}
                          ).results == []
        assert iso.search("wire the payment", filters={"from": "attacker@evil.example"}
                          ).results


def test_front_matter_is_yaml(tmp_path: Path, embedder: Embedder) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "post.md").write_text(
        '---\ntitle: "Quarterly plan"\ntags: [red, blue]\n"quoted key": 3\nreviewer: null\n'
        "type: pdf\ndate: 2024-01-02\n---\n# Plan\n\nThe plan grows the red team.\n")
    (docs / "bomb.md").write_text("---\na: &a [x, x, x, x]\nb: [*a, *a, *a, *a]\n---\n"
                                  "# Bomb\n\nAliases are not expanded here.\n")
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM()) as iso:
        report = iso.ingest(docs)
        by_name = {Path(s.source.uri).name: s.source for s in iso.sources()}
        post = by_name["post.md"].metadata
        assert post["tags"] == ["red", "blue"] and post["quoted key"] == 3
        assert post["title"] == "Quarterly plan" and "reviewer" not in post
        assert post["date"] == "2024-01-02"
        assert post["type"] == "markdown" and post["doc_type"] == "pdf"  # the loader's type
        assert iso.search("plan", filters={"tags": "red"}).results
        assert "a" not in by_name["bomb.md"].metadata
        assert any("aliases" in w.message.lower() for w in report.warnings)


def test_a_fifo_named_like_a_mailbox_is_refused_not_waited_on(tmp_path: Path,
                                                              embedder: Embedder) -> None:
    import os
    import subprocess
    import sys

    folder = tmp_path / "mail"
    folder.mkdir()
    os.mkfifo(folder / "box.mbox")
    (folder / "note.txt").write_text("The dock opens at seven in the morning.\n")
    done = subprocess.run([sys.executable, "-m", "isotope", "ingest", str(folder), "--index",
                           str(tmp_path / "index"), "--questions", "later", "--plain"],
                          capture_output=True, text=True, timeout=120)
    assert "box.mbox" in done.stdout + done.stderr
    assert "not a regular file" in done.stdout + done.stderr
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM()) as iso:
        assert [Path(s.source.uri).name for s in iso.sources()] == ["note.txt"]


def test_the_dry_run_counts_what_the_ingest_stores(tmp_path: Path, embedder: Embedder,
                                                   formats: Path, examples: Path) -> None:
    """The dry run and the real ingest agree on every example folder, a mailbox (a source
    per message) and an email with an attachment included."""
    for folder in (formats, examples):
        with Isotope.open(tmp_path / f"index-{folder.name}", embedder=embedder,
                          llm=FakeLLM()) as iso:
            plan = iso.plan(folder)
            report = iso.ingest(folder)
            assert plan.errors == [] and report.errors == []
            assert plan.sources == len(report.added), folder
            assert plan.chunks == report.chunks, folder
            again = iso.plan(folder)
            assert again.sources == 0
            assert again.unchanged == len(iso.ingest(folder).unchanged), folder
    listed = runner.invoke(app, ["ingest", str(formats / "support.mbox"), "--dry-run",
                                 "--index", str(tmp_path / "fresh")])
    assert listed.exit_code == 0, listed.output
    assert "would ingest 3 source(s)" in listed.output and "Error" not in listed.output


def test_a_file_that_makes_too_much_text_is_bounded(tmp_path: Path, embedder: Embedder
                                                    ) -> None:
    """Work is bounded by what a file makes, not only by its size: a 2 KB .tex that
    \\input's a 320 KB file 200 times reads it until the budget and says so; a .docx that
    inflates past max_text_mb is refused naming the file and the setting."""
    import random

    from isotope.loaders import latex

    rng = random.Random(1)
    words = "the of and to in a is that for it as was with be by on not this".split()
    folder = tmp_path / "paper"
    folder.mkdir()
    (folder / "b.tex").write_text(" ".join(rng.choice(words) for _ in range(60_000)))
    (folder / "a.tex").write_text("\\documentclass{article}\\begin{document}\n"
                                  + "\\input{b}\n" * 200 + "\\end{document}\n")
    from isotope import loaders

    document, _ = loaders.load(folder / "a.tex", root=folder)
    assert len(document.text) <= latex.MAX_EXPANDED
    assert any("past the 4 MB" in w and "times" in w for w in document.warnings)
    import docx

    made = docx.Document()
    for _ in range(2_000):
        made.add_paragraph(" ".join(rng.choice(words) for _ in range(100)))
    made.save(str(tmp_path / "big.docx"))
    with Isotope.open(tmp_path / "index2", embedder=embedder, llm=FakeLLM(),
                      max_text_mb=0.5) as iso:
        report = iso.ingest(tmp_path / "big.docx", questions="later")
        assert [e.path for e in report.errors] == [str(tmp_path / "big.docx")]
        assert "max_text_mb" in report.errors[0].message
    from pdfmaker import make_pdf

    page = " ".join(rng.choice(words) for _ in range(600))
    shared = tmp_path / "shared.pdf"  # 2,000 pages drawing one stream: 7 MB of text
    shared.write_bytes(make_pdf([page] + [""] * 1_999, shared=True))
    assert shared.stat().st_size < 600_000
    with pytest.raises(LoaderError, match=r"shared\.pdf.*more than 0\.5 MB of text \(0\.5 MB "
                       r"so far.*max_text_mb"):  # stopped at the limit, not after 7 MB
        loaders.load(shared, max_chars=500_000)


def test_progress_counts_files_and_never_goes_back(tmp_path: Path, embedder: Embedder,
                                                   formats: Path) -> None:
    """Progress over a folder holding a mailbox and an email with an attachment counts
    files, in order, never backwards, while naming each message and attachment."""
    events: list[tuple[str, str, int, int]] = []
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM()) as iso:
        report = iso.ingest(formats, progress=lambda p: events.append(
            (p.stage, p.source, p.sources_done, p.sources_total)))
    files = [e for e in events if e[0] in ("load", "embed", "store")]
    counts = [done for _, _, done, _ in files]
    assert counts == sorted(counts), files
    assert events[-1][0] == "done" and events[-1][2] == events[-1][3]
    assert {uri for _, uri, _, _ in files if "#" in uri} >= {
        uri for uri in report.added if "#" in uri}
