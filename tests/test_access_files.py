"""What a file in an ingested folder may not change about who sees it (issue 42, items
1-5 and 7: found by an adversarial run with write access to the folder and a user key):
a link takes the list of the file it points to, front matter never names a source's path,
container or list, a list set by hand holds, rules refuse syntax they do not have, and
key lines and keys files fail closed. Real SQLite store, bundled embedder; the model's
reply is the fake."""

from __future__ import annotations

import dataclasses
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


# -- issue 64, items 1-2: the list comes from the very file read ----------------------
def _swap_after_reading(monkeypatch: pytest.MonkeyPatch, name: str, swap: object) -> None:
    """Make the ingest's read of the file called ``name`` be followed at once by
    ``swap()``: the deterministic form of a swapper racing a sync."""
    from isotope.ingest.pipeline import Pipeline

    read = Pipeline.read

    def read_then_swap(self: Pipeline, path: Path) -> object:
        done = read(self, path)
        if path.name == name:
            swap()  # type: ignore[operator]
        return done

    monkeypatch.setattr(Pipeline, "read", read_then_swap)


def _replace(path: Path, *, link_to: Path | None = None, text: str = "") -> None:
    """``path`` made, by a rename over it (as a swapper does), a link or a regular file."""
    spare = path.with_name(path.name + ".new")
    if link_to is not None:
        spare.symlink_to(link_to)
    else:
        spare.write_text(text)
    os.replace(spare, path)


@pytest.mark.parametrize("then", ["regular", "link elsewhere"])
def test_an_unchanged_link_swapped_during_a_sync_keeps_the_list_of_what_was_read(
        tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch,
        then: str) -> None:
    """``d/memo.md -> hr/pay.md`` (``group:hr``), swapped for a regular file (or a link out
    of the folder) just after a sync read it: its text was unchanged, and its list was
    worked out from the path resolved again, the regular file's (``public``): the salary
    was public. The list is that of the file read."""
    docs = _folder(tmp_path / "docs")
    memo = docs / "d" / "memo.md"
    memo.symlink_to(docs / "hr" / "pay.md")
    outside = tmp_path / "outside.md"
    outside.write_text("# Outside\n\nThe lift is out of order.\n")
    with _open(tmp_path / "index", embedder) as iso:
        iso.ingest(docs)
        assert iso.get_access(str(memo)) == ["group:hr"]
        _swap_after_reading(monkeypatch, memo.name, lambda: _replace(
            memo, text="# Memo\n\nLunch is at noon.\n") if then == "regular" else
            _replace(memo, link_to=outside))
        report = iso.sync(docs)
        assert str(memo) in report.unchanged
        assert iso.get_access(str(memo)) == ["group:hr"]
        assert not _bob_sees_salary(iso)
        monkeypatch.undo()  # (the next sync reads what is there now: its own list)
        iso.sync(docs)
        assert iso.get_access(str(memo)) == (["public"] if then == "regular" else [])
        assert not _bob_sees_salary(iso)


def test_a_list_set_by_hand_holds_only_for_the_file_read(
        tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """``d/note.md`` set ``public`` by hand, replaced by a link to ``hr/pay.md``, and put
    back as a regular file just after the sync read the salary through the link: the
    hand-set list was judged from the path resolved again (the regular file it was set
    for), so it held and the salary was public."""
    docs = _folder(tmp_path / "docs")
    note = docs / "d" / "note.md"
    note.write_text("# Note\n\nHi.\n")
    with _open(tmp_path / "index", embedder) as iso:
        iso.ingest(docs)
        iso.set_access(str(note), ["public"])
        _replace(note, link_to=docs / "hr" / "pay.md")
        _swap_after_reading(monkeypatch, note.name,
                            lambda: _replace(note, text="# Note\n\nHi.\n"))
        iso.sync(docs)
        assert iso.get_access(str(note)) == ["group:hr"]
        assert not _bob_sees_salary(iso)


def _mbox(path: Path, body: str) -> None:
    path.write_text(f"From a@example.com Mon Jan  1 00:00:00 2024\nFrom: a@example.com\n"
                    f"To: b@example.com\nSubject: Pay\nMessage-ID: <pay-1@example.com>\n\n"
                    f"{body}\n")


def test_a_mailbox_link_swapped_while_its_messages_are_read_keeps_their_list(
        tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """``d/box.mbox -> hr/box.mbox`` pointed at a public mailbox once its messages were
    read: the messages' list came from the path resolved again (public). The mailbox is
    opened once; its messages are read through that handle and take its list."""
    from isotope import loaders

    docs = _folder(tmp_path / "docs")
    _mbox(docs / "hr" / "box.mbox", SALARY)
    _mbox(docs / "d" / "public.mbox", "The canteen opens at nine.")
    box = docs / "d" / "box.mbox"
    box.symlink_to(docs / "hr" / "box.mbox")
    loader = loaders.loader_for(box)
    assert loader is not None and loader.members is not None
    members = loader.members

    def swapping(path: Path, *args: object, **kwargs: object) -> object:
        for member in members(path, *args, **kwargs):  # type: ignore[misc]
            if path.name == box.name:
                _replace(box, link_to=docs / "d" / "public.mbox")
            yield member

    for ext in loader.extensions:
        monkeypatch.setitem(loaders._REGISTRY, ext,
                            dataclasses.replace(loader, members=swapping))
    with _open(tmp_path / "index", embedder) as iso:
        iso.ingest(docs)
        lists = {s.source.uri: s.source.access for s in iso.sources(check_files=False)
                 if s.source.uri.startswith(str(box) + "#")}
        assert lists and all(listed == ["group:hr"] for listed in lists.values())
        assert not _bob_sees_salary(iso)


def test_a_hard_link_is_one_file_with_the_strictest_list(tmp_path: Path,
                                                         embedder: Embedder) -> None:
    """``ln hr/pay.md d/copy.md``, then a sync: the HR text was stored as ``d/copy.md``,
    public. Names of one file (device and inode) get the strictest of their lists, a
    list set by hand on one name included; a name outside the folders ingested cannot
    be seen, so such a file is for administrators only, with a warning."""
    docs = _folder(tmp_path / "docs")
    copy = docs / "d" / "copy.md"
    os.link(docs / "hr" / "pay.md", copy)
    with _open(tmp_path / "index", embedder) as iso:
        report = iso.sync(docs)  # (one file: stored once, under the name found first)
        assert iso.get_access(str(copy)) == ["group:hr"]
        assert any(w.path == str(copy) and "hard link" in w.message
                   for w in report.warnings)
        assert not _bob_sees_salary(iso)
        iso.set_access(str(copy), ["public", "user:bob"])  # (by hand, on one name)
        iso.sync(docs)
        assert iso.get_access(str(copy)) == ["group:hr"] and not _bob_sees_salary(iso)
    with _open(tmp_path / "index2", embedder) as iso:  # only d/: hr/pay.md not seen
        report = iso.sync(docs / "d")
        assert iso.get_access(str(copy)) == []
        assert any(w.path == str(copy) and "2 names" in w.message for w in report.warnings)
        assert not _bob_sees_salary(iso)


def test_strictest_list_of_several_names() -> None:
    from isotope.access import strictest

    assert strictest([["public"], ["group:hr"]]) == ["group:hr"]
    assert strictest([["group:hr", "user:bob"], ["group:hr"]]) == ["group:hr"]
    assert strictest([["group:hr"], ["user:bob"]]) == []
    assert strictest([None, ["group:hr"]]) == [] and strictest([None, None]) is None
    assert strictest([["public"], ["public"]]) == ["public"]


def test_a_swapper_racing_syncs_never_gets_the_salary_a_public_list(
        tmp_path: Path, embedder: Embedder) -> None:
    """The race itself, bounded: a thread renames a regular file and a link to the HR
    file over ``d/memo.md`` every 2 ms while syncs run (1 to 2 syncs of 15 stored the
    salary under ``public``; 40 here). Whatever each sync read, the salary keeps
    ``group:hr``."""
    import threading

    docs = _folder(tmp_path / "docs")
    memo = docs / "d" / "memo.md"
    memo.write_text("# Memo\n\nLunch is at noon.\n")
    stop = threading.Event()

    def swapper() -> None:
        flip = False
        while not stop.is_set():
            if flip:
                _replace(memo, text="# Memo\n\nLunch is at noon.\n")
            else:
                _replace(memo, link_to=docs / "hr" / "pay.md")
            flip = not flip
            time.sleep(0.002)

    thread = threading.Thread(target=swapper, daemon=True)
    with _open(tmp_path / "index", embedder) as iso:
        iso.ingest(docs)
        thread.start()
        try:
            for _ in range(40):
                iso.sync(docs, force=True)
                assert _lists_of_salary(iso) and all(
                    listed == ["group:hr"] for listed in _lists_of_salary(iso))
                assert not _bob_sees_salary(iso)
        finally:
            stop.set()
            thread.join()


def test_hard_links_changed_between_the_walk_and_the_read_are_for_administrators(
        tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by review: the names of a file were counted as the walk found them. With
    ``/srv/hr/pay.md`` linked as ``d/a.md`` and ``d/b.md`` and ``d/b.md`` removed before
    ``d/a.md`` was read, the two names found matched the link count and ``d/a.md`` was
    stored public. Each name is checked again to be that file, and the count again."""
    from isotope.ingest import pipeline

    outside = tmp_path / "srv" / "hr"
    outside.mkdir(parents=True)
    (outside / "pay.md").write_text(f"# Pay\n\n{SALARY}\n")
    shared = tmp_path / "shared"
    (shared / "d").mkdir(parents=True)
    (shared / ".isotope-access").write_text("** = public\n")
    os.link(outside / "pay.md", shared / "d" / "a.md")
    os.link(outside / "pay.md", shared / "d" / "b.md")
    read = pipeline.Pipeline.read

    def unlink_then_read(self: pipeline.Pipeline, path: Path) -> object:
        if path.name == "a.md":
            (shared / "d" / "b.md").unlink()
        return read(self, path)

    monkeypatch.setattr(pipeline.Pipeline, "read", unlink_then_read)
    with _open(tmp_path / "index", embedder) as iso:
        report = iso.sync(shared)
        assert iso.get_access(str(shared / "d" / "a.md")) == []
        assert any("hard links" in w.message for w in report.warnings)
        assert not _bob_sees_salary(iso)
    # a name made a hard link of the HR file after the walk found it a file of its own
    docs = _folder(tmp_path / "docs")
    (docs / "d" / "a.md").write_text("# A\n\nThe canteen opens at nine.\n")
    walked = pipeline.discover

    def walk_then_link(*args: object, **kwargs: object) -> object:
        done = walked(*args, **kwargs)  # type: ignore[arg-type]
        (docs / "d" / "a.md").unlink()
        os.link(docs / "hr" / "pay.md", docs / "d" / "a.md")
        return done

    monkeypatch.setattr(pipeline.Pipeline, "read", read)
    monkeypatch.setattr(pipeline, "discover", walk_then_link)
    with _open(tmp_path / "index2", embedder) as iso:
        iso.sync(docs)
        assert iso.get_access(str(docs / "d" / "a.md")) == ["group:hr"]
        assert not _bob_sees_salary(iso)


def test_a_new_link_takes_the_list_of_the_file_read_not_of_its_path_resolved_again(
        tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by review: a new source's stored namesake (a source an older isotope stored
    under its resolved path) was looked up by the path resolved after the read. With no
    rules file, ``hr/`` ingested ``--allow group:hr`` and ``d/`` ``--allow public``, a new
    ``d/memo.md -> hr/pay.md`` pointed at ``d/public.md`` just after it was read took
    ``public``, with the salary."""
    docs = tmp_path / "docs"
    (docs / "hr").mkdir(parents=True)
    (docs / "d").mkdir()
    (docs / "hr" / "pay.md").write_text(f"# Pay\n\n{SALARY}\n")
    (docs / "d" / "public.md").write_text("# Public\n\nThe canteen opens at nine.\n")
    memo = docs / "d" / "memo.md"
    with _open(tmp_path / "index", embedder) as iso:
        iso.ingest(docs / "hr", allow=["group:hr"])
        iso.ingest(docs / "d", allow=["public"])
        memo.symlink_to(docs / "hr" / "pay.md")
        _swap_after_reading(monkeypatch, memo.name,
                            lambda: _replace(memo, link_to=docs / "d" / "public.md"))
        iso.sync(docs / "d")
        assert _lists_of_salary(iso) and all(
            listed == ["group:hr"] for listed in _lists_of_salary(iso))
        assert not _bob_sees_salary(iso)


def test_a_list_set_by_hand_is_for_the_file_whose_text_is_stored(
        tmp_path: Path, embedder: Embedder) -> None:
    """Found by review: ``access set`` bound the list to the path resolved when it was
    run. ``d/memo.md -> d/lunch.md`` ingested, then pointed at ``hr/pay.md`` by the
    attacker, then set ``public`` by hand (the administrator looking at the lunch text
    in the index): the mark named ``hr/pay.md``, so the next sync kept ``public`` for
    the salary. The mark is the file the stored text was read from."""
    docs = _folder(tmp_path / "docs")
    (docs / "d" / "zz-lunch.md").write_text("# Lunch\n\nLunch is served at noon.\n")
    memo = docs / "d" / "memo.md"  # (found first: the lunch file is ingested as it)
    memo.symlink_to(docs / "d" / "zz-lunch.md")
    with _open(tmp_path / "index", embedder) as iso:
        iso.sync(docs)
        assert iso.get_access(str(memo)) == ["public"]
        _replace(memo, link_to=docs / "hr" / "pay.md")
        iso.set_access(str(memo), ["public", "user:bob"])
        iso.sync(docs)
        assert iso.get_access(str(memo)) == ["group:hr"]
        assert not _bob_sees_salary(iso)


@pytest.mark.parametrize("race", ["input swapped after its check", "document swapped after "
                                  "its read", "input a hard link"])
def test_latex_decides_inputs_from_the_files_read(tmp_path: Path, embedder: Embedder,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  race: str) -> None:
    r"""Found by review: LaTeX judged its inputs by paths resolved again. A public
    ``d/doc.tex`` took in the salary when its ``\input{part}`` was made a link to the HR
    file between the check and the read, when the document itself was pointed into hr/
    after the ingest read it (its ``\input{../hr/pay}`` then looked like the same list),
    or when the input was a hard link of the HR file. Each input is read first and judged
    by the file read; the document by its own file as read; a hard link is left out."""
    from isotope.loaders import latex

    docs = _folder(tmp_path / "docs")
    (docs / "hr" / "pay.tex").write_text(f"{SALARY}\n")
    (docs / "hr" / "other.tex").write_text("Other HR notes.\n")
    doc = docs / "d" / "doc.tex"
    part = docs / "d" / "part.tex"
    part.write_text("The canteen serves okapi stew on Fridays.\n")
    body = {"input swapped after its check": "\\input{part}",
            "document swapped after its read": "\\input{../hr/pay}",
            "input a hard link": "\\input{copy}"}[race]
    doc.write_text(f"\\documentclass{{article}}\\begin{{document}}\n{body}\nNotes of the "
                   "week.\n\\end{document}\n")
    if race == "input a hard link":
        os.link(docs / "hr" / "pay.tex", docs / "d" / "copy.tex")
    elif race == "input swapped after its check":
        checked = latex.same_list

        def check_then_swap(real: Path, other: Path, root: Path) -> bool:
            said = checked(real, other, root)
            if other.name == "part.tex" and not part.is_symlink():
                _replace(part, link_to=docs / "hr" / "pay.tex")
            return said

        monkeypatch.setattr(latex, "same_list", check_then_swap)
    else:
        _swap_after_reading(monkeypatch, doc.name,
                            lambda: _replace(doc, link_to=docs / "hr" / "other.tex"))
    with _open(tmp_path / "index", embedder) as iso:
        iso.ingest(docs)
        assert iso.get_access(str(doc)) == ["public"]
        texts = " ".join(a.text for c in iso.store.stored_chunks(str(doc)).values()
                         for a in c.atoms)
        assert "tapir" not in texts and "Notes of the week" in texts


def _plain(root: Path) -> Path:
    """hr/pay.md and d/zz-public.md, no rules file."""
    (root / "hr").mkdir(parents=True)
    (root / "d").mkdir()
    (root / "hr" / "pay.md").write_text(f"# Pay\n\n{SALARY}\n")
    (root / "d" / "zz-public.md").write_text("# Public\n\nThe canteen opens at nine.\n")
    return root


def _given_apart(iso: Isotope, root: Path) -> tuple[Path, Path]:
    """:func:`_plain` with ``d/memo.md -> d/zz-public.md``, ``hr/`` ingested ``--allow
    group:hr`` and ``d/`` ``--allow public``: the folder and the link."""
    docs = _plain(root)
    memo = docs / "d" / "memo.md"
    memo.symlink_to(docs / "d" / "zz-public.md")
    iso.ingest(docs / "hr", allow=["group:hr"])
    iso.ingest(docs / "d", allow=["public"])
    return docs, memo


def test_what_a_second_review_found_gives_no_public_salary(
        tmp_path: Path, embedder: Embedder) -> None:
    """Found by a second review, each a public salary before its fix: (1) a list set by
    hand on ready-made chunks named like a file held for a link planted at that name;
    (2) a source stored before ``read_as`` existed, its link pointed at the HR file and
    then set public by hand, bound the mark to the HR file; (3) a list from ``--allow``
    followed the name to another file at a sync without it; (4) ``--allow public`` took
    in a link out of the folder given."""
    docs = _folder(tmp_path / "one")
    note = docs / "d" / "note.md"
    with _open(tmp_path / "i1", embedder) as iso:  # (1)
        iso.ingest_chunks(["Lunch is served at noon."], source=str(note))
        iso.set_access(str(note), ["public"])
        note.symlink_to(docs / "hr" / "pay.md")
        iso.sync(docs)
        assert iso.get_access(str(note)) == ["group:hr"] and not _bob_sees_salary(iso)
    with _open(tmp_path / "i2", embedder) as iso:  # (2)
        docs, memo = _given_apart(iso, tmp_path / "two")
        conn = iso.store._conn()  # type: ignore[attr-defined]
        with iso.store.writer():
            conn.execute("UPDATE sources SET metadata = json_remove(metadata, '$.read_as')")
            conn.commit()
        _replace(memo, link_to=docs / "hr" / "pay.md")
        iso.set_access(str(memo), ["public"])
        iso.sync(docs / "d")
        assert iso.get_access(str(memo)) != ["public"] and not _bob_sees_salary(iso)
    with _open(tmp_path / "i3", embedder) as iso:  # (3)
        docs, memo = _given_apart(iso, tmp_path / "three")
        _replace(memo, link_to=docs / "hr" / "pay.md")
        report = iso.sync(docs / "d")
        assert iso.get_access(str(memo)) == [] and not _bob_sees_salary(iso)
        assert any(w.path == str(memo) and "another now" in w.message
                   for w in report.warnings)
    docs = _plain(tmp_path / "four")
    (docs / "d" / "memo.md").symlink_to(docs / "hr" / "pay.md")
    with _open(tmp_path / "i4", embedder) as iso:  # (4)
        iso.sync(docs / "d", allow=["public"])
        assert iso.get_access(str(docs / "d" / "memo.md")) == []
        assert iso.get_access(str(docs / "d" / "zz-public.md")) == ["public"]
        assert not _bob_sees_salary(iso)
