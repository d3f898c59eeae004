"""What a file in an ingested folder may not change about who sees it (issue 42, items
1-5 and 7: found by an adversarial run with write access to the folder and a user key):
a link takes the list of the file it points to, front matter never names a source's path,
container or list, a list set by hand holds, rules refuse syntax they do not have, and
key lines and keys files fail closed. Real SQLite store, bundled embedder; the model's
reply is the fake."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from isotope import Isotope
from isotope.access import AccessError, read_rules, rules_for
from isotope.embedders import Embedder
from isotope.errors import SettingsError
from isotope.server.auth import Keys
from isotope.settings import ServerSettings

from conftest import EXAMPLES, FakeLLM

SALARY = "The salary of the chief tapir keeper is ninety thousand crowns."
BOB = "user:bob"


def _folder(root: Path, rules: str = "** = public\nhr/** = group:hr\n") -> Path:
    (root / "hr").mkdir(parents=True)
    (root / "d").mkdir()
    (root / "hr" / "pay.md").write_text(f"# Pay\n\n{SALARY}\n")
    (root / "d" / "handbook.md").write_text("# Handbook\n\nThe canteen opens at nine.\n")
    (root / ".isotope-access").write_text(rules)
    return root


def _open(path: Path, embedder: Embedder, **settings: object) -> Isotope:
    return Isotope.open(path, embedder=embedder, llm=FakeLLM(), cache=False,
                        access_control=True, **settings)


def _bob_sees_salary(iso: Isotope) -> bool:
    found = iso.search("What is the salary of the chief tapir keeper?", k=10, principal=BOB)
    return any("tapir" in r.chunk.text for r in found.results)


def _lists_of_salary(iso: Isotope) -> list[list[str] | None]:
    return [s.source.access for s in iso.sources(check_files=False)
            if any("tapir" in a.text for c in iso.store.stored_chunks(s.source.uri).values()
                   for a in c.atoms)]


def test_a_link_takes_the_list_of_the_file_it_points_to(tmp_path: Path,
                                                        embedder: Embedder) -> None:
    docs = _folder(tmp_path / "docs")
    with _open(tmp_path / "index", embedder) as iso:
        iso.ingest(docs)
        assert _lists_of_salary(iso) == [["group:hr"]] and not _bob_sees_salary(iso)
        # a link to the HR file, in a folder the rules make public, sorting first
        (docs / "d" / "0-readme.md").symlink_to(docs / "hr" / "pay.md")
        iso.sync(docs)
        assert _lists_of_salary(iso) and all(
            listed == ["group:hr"] for listed in _lists_of_salary(iso))
        assert not _bob_sees_salary(iso)
    # a link to a file outside the folder: no rule of the folder speaks for it (a "**"
    # line made it public); a "#" in a file's name is part of its path
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "credentials.txt").write_text("The vault passphrase is tangerine kayak.\n")
    (docs / "d" / "creds.txt").symlink_to(outside / "credentials.txt")
    (docs / "hr" / "minutes#1.md").write_text("# Minutes\n\nThe okapi bonus is secret.\n")
    with _open(tmp_path / "index", embedder) as iso:
        iso.sync(docs)
        assert iso.get_access(str(docs / "d" / "creds.txt")) == []
        assert iso.get_access(str(docs / "hr" / "minutes#1.md")) == ["group:hr"]
        found = iso.search("What is the vault passphrase?", k=10, principal=BOB).results
        assert not any("tangerine" in r.chunk.text for r in found)
    # a linked folder sorting before hr/, on a first ingest: its files are hr's
    other = _folder(tmp_path / "other")
    (other / "a-hr").symlink_to(other / "hr", target_is_directory=True)
    with _open(tmp_path / "index2", embedder) as iso:
        iso.ingest(other)
        assert _lists_of_salary(iso) and all(
            listed == ["group:hr"] for listed in _lists_of_salary(iso))
        assert not _bob_sees_salary(iso)


def test_front_matter_names_no_path_container_or_list(tmp_path: Path,
                                                      embedder: Embedder) -> None:
    docs = _folder(tmp_path / "docs")
    (docs / "hr" / "merger.md").write_text(
        "---\nfile: merger-notes.pdf\ncontainer: d/handbook.md\naccess_by_hand: true\n"
        "---\n# Merger\n\nThe tapir zoo merges with the okapi park in May.\n")
    (docs / "loose.md").write_text(
        "---\nfrom: bob\nto: bob\n---\n# Loose\n\nThe okapi vault code is 4711.\n")
    (docs / ".isotope-access").write_text("hr/** = group:hr\nd/** = public\n")
    with _open(tmp_path / "index", embedder, email_access=True) as iso:
        report = iso.ingest(docs)
        merger = iso.store.get_source(str(docs / "hr" / "merger.md"))
        assert merger is not None and merger.access == ["group:hr"]
        assert not {"file", "container", "access_by_hand"} & set(merger.metadata)
        assert any("only isotope sets" in w.message for w in report.warnings)
        # a Markdown file's from/to are not an email's: it gets no list (admin only)
        loose = iso.store.get_source(str(docs / "loose.md"))
        assert loose is not None and loose.access is None
        found = iso.search("When do the tapir zoo and the okapi park merge?", k=10,
                           principal=BOB)
        assert not any("okapi" in r.chunk.text for r in found.results)
        again = iso.sync(docs)  # nothing flips between missing and added
        assert again.removed == [] and again.added == [] and again.replaced == []
        iso.delete(str(docs / "d" / "handbook.md"))  # the "container" it named
        assert iso.has_source(str(docs / "hr" / "merger.md"))


def test_a_list_set_by_hand_holds_until_set_again(tmp_path: Path,
                                                  embedder: Embedder) -> None:
    docs = _folder(tmp_path / "docs")
    shutil.copy(EXAMPLES / "formats" / "offsite-planning.eml", docs / "d" / "offsite.eml")
    with _open(tmp_path / "index", embedder) as iso:
        iso.ingest(docs)
        attachment = next(s.source.uri for s in iso.sources(check_files=False)
                          if "#" in s.source.uri)
        assert iso.get_access(attachment) == ["public"]
        iso.set_access(attachment, ["user:ceo"])
        iso.set_access(str(docs / "hr" / "pay.md"), ["public"])  # (a file the rules list)
        iso.sync(docs)  # unchanged: the email's list and the rules do not undo them
        assert iso.get_access(attachment) == ["user:ceo"]
        assert iso.get_access(str(docs / "hr" / "pay.md")) == ["public"]
        (docs / "hr" / "pay.md").write_text(f"# Pay\n\n{SALARY} Raised in May.\n")
        iso.sync(docs)  # changed: the hand-set list still holds
        assert iso.get_access(str(docs / "hr" / "pay.md")) == ["public"]
        iso.set_access(str(docs / "hr" / "pay.md"), None)  # removed: the rules again
        iso.sync(docs)
        assert iso.get_access(str(docs / "hr" / "pay.md")) == ["group:hr"]
        # an attachment one may not see is not named by its email's metadata either
        shown = next(i for i in iso.sources(principal=BOB, check_files=False)
                     if i.source.uri.endswith("offsite.eml"))
        name = attachment.split("#", 1)[1]
        assert all(name not in str(a) for a in shown.source.metadata["attachments"])
        assert any(name in str(a) for a in iso.store.get_source(  # type: ignore[union-attr]
            shown.source.uri).metadata["attachments"])
        found = iso.search("offsite hotel Lisbon", k=5, principal=BOB).results
        assert found and all(name not in str(r.source_metadata.get("attachments", []))
                             for r in found)
        iso.ingest(docs, allow=["group:staff"])  # lists given at ingest set it again
        assert iso.get_access(attachment) == ["group:staff"]
        iso.sync(docs)
        assert iso.get_access(attachment) == ["public"]


def test_a_link_changed_after_its_file_was_read_gives_the_list_of_what_was_read(
        tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """The list was given by the link's real path resolved after the file was read: a
    link to the HR file, pointed at the handbook between the read and the list, made the
    salary public. The list is that of the very file read (the open's own path)."""
    from isotope.ingest.pipeline import Pipeline

    docs = _folder(tmp_path / "docs")
    link = docs / "d" / "0-readme.md"
    link.symlink_to(docs / "hr" / "pay.md")
    read = Pipeline.read

    def read_then_swap(self: Pipeline, path: Path) -> object:
        done = read(self, path)
        if path.name == link.name:
            link.unlink()
            link.symlink_to(docs / "d" / "handbook.md")
        return done

    monkeypatch.setattr(Pipeline, "read", read_then_swap)
    with _open(tmp_path / "index", embedder) as iso:
        iso.ingest(docs)
        assert _lists_of_salary(iso) and all(
            listed == ["group:hr"] for listed in _lists_of_salary(iso))
        assert not _bob_sees_salary(iso)


@pytest.mark.parametrize("same_text", [False, True])
def test_a_list_set_by_hand_is_for_the_file_it_was_set_on(tmp_path: Path, embedder: Embedder,
                                                          same_text: bool) -> None:
    """A file whose list was set by hand (``public``), then replaced by a link to an HR
    file, kept the hand-set list: the salary was public. The mark says which file it was
    set for (its real path); a link to another file is not that file, so the rules
    speak again, whether the text changed (an ingest reads it again) or not (same text:
    the sync's unchanged sources)."""
    docs = _folder(tmp_path / "docs")
    note = docs / "d" / "note.md"
    note.write_text((docs / "hr" / "pay.md").read_text() if same_text else "# Note\n\nHi.\n")
    with _open(tmp_path / "index", embedder) as iso:
        iso.ingest(docs)
        iso.set_access(str(note), ["public", "user:ceo"])
        iso.sync(docs)
        assert iso.get_access(str(note)) == ["public", "user:ceo"]  # (held: the same file)
        note.unlink()
        note.symlink_to(docs / "hr" / "pay.md")
        iso.sync(docs)
        assert iso.get_access(str(note)) == ["group:hr"]
        assert not _bob_sees_salary(iso)
        stored = iso.store.get_source(str(note))
        assert stored is not None and not stored.access_by_hand  # (the mark went)


def test_a_list_set_by_hand_by_an_older_isotope_holds_on_a_member(
        tmp_path: Path, embedder: Embedder) -> None:
    """A mark from before the mark said what for (``true``) was carried on as the
    member's own name (``...eml#agenda.txt``), which is never its file's real path: the
    next sync dropped the list set by hand and the rules made the attachment public."""
    docs = _folder(tmp_path / "docs")
    email = docs / "d" / "offsite.eml"
    shutil.copy(EXAMPLES / "formats" / "offsite-planning.eml", email)
    with _open(tmp_path / "index", embedder) as iso:
        iso.ingest(docs)
        attachment = next(s.source.uri for s in iso.sources(check_files=False)
                          if "#" in s.source.uri)
        iso.store.set_access([attachment], ["user:ceo"],
                             by_hand={attachment: True})  # type: ignore[dict-item]
        email.write_text(email.read_text().replace("Day 2: hackathon", "Day 2: kayaks"))
        iso.sync(docs)  # the attachment changed: made again, the mark carried
        iso.sync(docs)  # unchanged: the mark read again
        assert iso.get_access(attachment) == ["user:ceo"]


def test_a_file_replaced_while_it_is_opened_is_not_labelled_by_a_stale_path(
        tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """The list comes from the path the opened file has; a file saved over while it was
    opened reads back as ``hr/pay.md (deleted)``, which the rules do not match (a "**"
    line made it public): such a read is refused, to be ingested again."""
    from isotope import files

    docs = _folder(tmp_path / "docs")
    found = files.opened_path
    monkeypatch.setattr(files, "opened_path", lambda handle, path: (
        Path(f"{found(handle, path)} (deleted)") if Path(path).name == "pay.md"
        else found(handle, path)))
    with _open(tmp_path / "index", embedder) as iso:
        report = iso.ingest(docs)
        assert [Path(e.path).name for e in report.errors] == ["pay.md"]
        assert "replaced while it was read" in report.errors[0].message
        assert not _bob_sees_salary(iso)


@pytest.mark.parametrize("line", ["hr/[0-9]*.md = group:hr", r"hr\pay.md = group:hr",
                                  "{hr,pay}/** = group:hr", "!public/** = group:hr"])
def test_rules_refuse_pattern_syntax_they_do_not_have(tmp_path: Path, line: str) -> None:
    rules = tmp_path / ".isotope-access"
    rules.write_text(f"** = public\n{line}\n")
    with pytest.raises(AccessError, match=rf"{rules}, line 2: .*\? \(any one character\)"):
        read_rules(rules)


@pytest.mark.parametrize("fields", ["groups=,", "groups=hr,", "user=bob groups=,,",
                                    "projects=,"])
def test_a_key_line_with_an_empty_field_is_refused(tmp_path: Path, fields: str) -> None:
    keys = tmp_path / "keys"
    keys.write_text(f"{'k' * 20} read {fields}\n")
    with pytest.raises(SettingsError, match=f"{keys}.*names an empty"):
        Keys.from_settings(ServerSettings(api_keys_file=keys))


def test_an_edit_of_the_same_length_with_the_old_time_is_read(tmp_path: Path) -> None:
    """A revoked key, or a changed rule, takes effect even when the file keeps its size
    and its modification time is set back."""
    keys = tmp_path / "keys"
    keys.write_text(f"{'a' * 20} read user=bob\n")
    before = keys.stat()
    read = Keys.from_settings(ServerSettings(api_keys_file=keys))
    assert read.fresh().scope("a" * 20) == "read"
    time.sleep(0.02)  # (past a coarse clock's tick: the change time moves)
    keys.write_text(f"{'b' * 20} read user=bob\n")
    os.utime(keys, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert keys.stat().st_size == before.st_size
    assert read.fresh().scope("a" * 20) is None and read.fresh().scope("b" * 20) == "read"
    docs = _folder(tmp_path / "docs", "hr/** = group:hr\n")
    rules = docs / ".isotope-access"
    was = rules.stat()
    found = rules_for(docs)
    assert found is not None and found.match("hr/pay.md") == ["group:hr"]
    time.sleep(0.02)
    rules.write_text("hr/** = group:xx\n")
    os.utime(rules, ns=(was.st_atime_ns, was.st_mtime_ns))
    found = rules_for(docs)
    assert found is not None and found.match("hr/pay.md") == ["group:xx"]


def _email(path: Path, attachments: dict[str, str]) -> None:
    from email.message import EmailMessage

    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = ("alice@example.com",
                                                          "bob@example.com", "Board")
    message["Message-ID"] = "<board-1@example.com>"
    message.set_content("The board papers are attached.")
    for name, text in attachments.items():
        message.add_attachment(text.encode(), maintype="text", subtype="plain",
                               filename=name)
    path.write_bytes(bytes(message))


def test_a_new_member_of_a_container_set_by_hand_takes_its_list(
        tmp_path: Path, embedder: Embedder) -> None:
    """An attachment new in an email whose list was set by hand took the rules' list
    (found by review): a container's hand-set list holds for its new members too."""
    docs = _folder(tmp_path / "docs")
    mail = docs / "d" / "board.eml"
    _email(mail, {"budget.txt": "The tapir budget doubles in May."})
    with _open(tmp_path / "index", embedder) as iso:
        iso.ingest(docs)
        iso.set_access(str(mail), ["user:ceo"])
        _email(mail, {"budget.txt": "The tapir budget doubles in May.",
                      "merger.txt": "The okapi merger is signed on Friday."})
        iso.sync(docs)
        members = [s.source for s in iso.sources(check_files=False)
                   if s.source.uri.startswith(str(mail) + "#")]
        assert len(members) == 2 and all(m.access == ["user:ceo"] for m in members)
        found = iso.search("When is the okapi merger signed?", k=10, principal=BOB).results
        assert not any("okapi" in r.chunk.text for r in found)


def test_latex_takes_in_no_file_of_another_list(tmp_path: Path, embedder: Embedder) -> None:
    r"""A public .tex file with ``\input{../hr/pay.md}`` took in the salary and made it
    public (found by review): an input or a .bib of another list is left out, with a
    warning; one of the same list is read as before."""
    docs = _folder(tmp_path / "docs")
    (docs / "d" / "intro.tex").write_text("The canteen serves okapi stew on Fridays.\n")
    (docs / "d" / "notes.tex").write_text(
        "\\documentclass{article}\\begin{document}\n\\input{../hr/pay.md}\n"
        "\\input{intro}\nNotes of the week.\n\\end{document}\n")
    with _open(tmp_path / "index", embedder) as iso:
        report = iso.ingest(docs)
        assert any("another access list" in w.message for w in report.warnings)
        assert iso.get_access(str(docs / "d" / "notes.tex")) == ["public"]
        texts = " ".join(a.text for c in iso.store.stored_chunks(
            str(docs / "d" / "notes.tex")).values() for a in c.atoms)
        assert "tapir" not in texts and "okapi" in texts
        assert not _bob_sees_salary(iso)
