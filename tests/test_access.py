"""Who may see what (issue 28): a permissions matrix over real indexes (the SQLite store
and a real PostgreSQL server), the bundled embedder and the real pipeline; only the
model's reply is the deterministic fake (one test goes through the real local model).

Three principals (an administrator, a user in group finance, a user in no group) against
six sources: public, one user's, a group's (from the rules file), one without a list,
an email (its sender and recipients), and one whose list changes mid-test; every search
mode, ask, the questions view, sources, counts, chunks by id."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from isotope import Isotope
from isotope.access import ADMIN, AccessError, Principal, read_rules
from isotope.embedders import Embedder
from isotope.errors import SourceNotFound
from isotope.search.filters import FilterError
from isotope.search.retrieval import MODES

from conftest import EXAMPLES, FakeLLM, location_of

FACTS = {
    "handbook": ("handbook.md", "The cafeteria serves blueberry waffles every Monday "
                 "morning.", "When does the cafeteria serve blueberry waffles?"),
    "alice": ("private/alice.md", "Alice keeps the spare vault key in the orchid drawer.",
              "Where is the spare vault key kept?"),
    "budget": ("finance/budget.md", "The zeppelin budget of the finance department is "
               "forty million crowns.", "How large is the zeppelin budget?"),
    "loose": ("loose.txt", "The quokka parade starts at the harbour at noon.",
              "When does the quokka parade start?"),
    "changing": ("changing.md", "The marimba rehearsal moved to the basement studio.",
                 "Where is the marimba rehearsal now?"),
    "mail": ("mail/offsite.eml", "", "Which hotel in Lisbon do we stay at for the offsite?"),
}
SECRET = {"handbook": "waffles", "alice": "orchid", "budget": "zeppelin", "loose": "quokka",
          "changing": "marimba", "mail": "almada"}
RULES = """# the last matching line wins
*.md = public
private/** = user:alice
finance/** = group:finance
"""
BOB = Principal("bob@example.com", ("finance",))
EVE = Principal("eve")
SEES = {
    # with access control on: a source without a list is the administrator's only
    "admin": set(FACTS),
    "bob": {"handbook", "budget", "mail", "changing"},
    "eve": {"handbook", "changing"},
}
PRINCIPALS = {"admin": ADMIN, "bob": BOB, "eve": EVE}


def _docs(folder: Path) -> Path:
    for name, (path, text, _) in FACTS.items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if name == "mail":
            shutil.copy(EXAMPLES / "formats" / "offsite-planning.eml", target)
        else:
            target.write_text(f"# {name.title()}\n\n{text}\n")
    (folder / ".isotope-access").write_text(RULES)
    return folder


def _name(source: str) -> str:
    """Which of FACTS a source (or an email's attachment) is."""
    for name, (path, _, _) in FACTS.items():
        if source.split("#", 1)[0].endswith(path):
            return name
    raise AssertionError(f"unknown source {source}")


def _everything_seen(iso: Isotope, principal: Principal | None, mode: str) -> set[str]:
    """Every source a principal's searches in ``mode`` reach, by any query, with every
    text a result carries (chunk, matched questions and atoms) checked for the secrets
    of the sources it may not see."""
    seen: set[str] = set()
    texts: list[str] = []
    for _, _, query in FACTS.values():
        for secret_query in [query, *SECRET.values()]:
            response = iso.search(secret_query, k=20, mode=mode, principal=principal)
            for result in response.results:
                seen.add(_name(result.chunk.source))
                texts.append(result.chunk.text)
                texts += [f"{q.text} {q.atom}" for q in result.matched_questions]
    hidden = set(FACTS) - seen
    for text in texts:
        for name in hidden:
            assert SECRET[name] not in text.lower(), (mode, name, text)
    return seen



@pytest.fixture
def guarded(every_location: str, tmp_path: Path, embedder: Embedder) -> Iterator[Isotope]:
    """The matrix's index, on every engine (PostgreSQL with each keyword engine)."""
    iso = Isotope.open(every_location, embedder=embedder, llm=FakeLLM(), cache=False,
                       access_control=True, email_access=True, graph=True)
    iso.ingest(_docs(tmp_path / "docs"))
    yield iso
    iso.close()


def test_the_matrix_every_mode_sees_only_what_it_may(guarded: Isotope) -> None:
    iso = guarded
    lists = {_name(s.source.uri): s.source.access for s in iso.sources(check_files=False)}
    assert lists["handbook"] == ["public"] and lists["changing"] == ["public"]
    assert lists["alice"] == ["user:alice"]  # (the last matching rule wins)
    assert lists["budget"] == ["group:finance"]
    assert lists["loose"] is None
    assert "user:bob@example.com" in (lists["mail"] or [])
    for name, principal in PRINCIPALS.items():
        for mode in MODES:
            seen = _everything_seen(iso, principal, mode)
            assert seen <= SEES[name], (name, mode, seen - SEES[name])
            if mode.endswith("dense") or mode == "hybrid":
                assert seen == SEES[name], (name, mode)  # nothing visible is lost either
    # the list changes mid-test: at once, for every path, with no model call
    calls = iso.llm(iso.settings.question_model).usage.calls
    changed = iso.set_access("*/changing.md", ["group:hr"])
    assert [_name(u) for u in changed] == ["changing"]
    assert iso.get_access(changed[0]) == ["group:hr"]
    assert iso.llm(iso.settings.question_model).usage.calls == calls
    for mode in MODES:
        assert "changing" not in _everything_seen(iso, EVE, mode)
        assert "changing" not in _everything_seen(iso, BOB, mode)
    assert "changing" in _everything_seen(iso, Principal("hank", ("hr",)), "hybrid")


KEYWORD_MODES = (*(m for m in MODES if m.endswith("bm25")), "hybrid")


@pytest.fixture(params=["postgresql", "postings"])
def ranked(request: pytest.FixtureRequest, tmp_path: Path, embedder: Embedder,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Isotope, list[str]]]:
    """The matrix's index on PostgreSQL, its keyword searches made as a large index makes
    them (issue 64): test-sized data always scored the few chunks a principal may see
    exactly, so the access condition of the ranked scan was never checked. With
    ``EXACT_CHUNKS`` 0 pg_textsearch's index scan ranks and keeps the rows that meet the
    conditions; with ``RARE_POSTINGS`` 0 the postings engine scores the items of the
    rarest term first. Yields the index and how each filtered keyword search went."""
    import isotope.stores.postgres as postgres
    from isotope.stores import postgres_keywords, postgres_sql

    monkeypatch.setattr(postgres_sql, "EXACT_CHUNKS", 0)
    monkeypatch.setattr(postgres_keywords, "RARE_POSTINGS", 0)
    ran: list[str] = []
    real_rows = postgres.PostgresStore._rows

    def rows(self: Any, sql: str, params: Any = None, **options: Any) -> Any:
        if "MATERIALIZED" in sql:  # (pg_textsearch's scan, kept where it meets them)
            ran.append("ranked")
        elif "OFFSET 0" in sql:  # (the rows that meet them, scored exactly)
            ran.append("exact")
        elif "c.item IN (SELECT t.row" in sql:  # (postings, with conditions)
            ran.append("pruned" if len(params["rare"]) < len(params["terms"]) else "all")
        return real_rows(self, sql, params, **options)

    monkeypatch.setattr(postgres.PostgresStore, "_rows", rows)
    iso = Isotope.open(location_of(request, tmp_path), embedder=embedder, llm=FakeLLM(),
                       cache=False, access_control=True, email_access=True)
    iso.ingest(_docs(tmp_path / "docs"))
    yield iso, ran
    iso.close()


def test_the_ranked_keyword_scan_sees_only_what_it_may(
        ranked: tuple[Isotope, list[str]]) -> None:
    """The keyword modes of the matrix on PostgreSQL's ranked path (each engine's): what
    a principal may not see is never found, what it may see is not lost, before and after
    a list changes."""
    iso, ran = ranked
    engine = iso.store.keyword_engine  # type: ignore[attr-defined]
    for name, principal in PRINCIPALS.items():
        for mode in KEYWORD_MODES:
            seen = _everything_seen(iso, principal, mode)
            assert seen <= SEES[name], (engine, name, mode, seen - SEES[name])
            assert seen == SEES[name], (engine, name, mode)  # (each found by its words)
    iso.set_access("*/changing.md", ["group:hr"])
    for mode in KEYWORD_MODES:
        assert "changing" not in _everything_seen(iso, EVE, mode)
        assert "changing" not in _everything_seen(iso, BOB, mode)
        assert "changing" in _everything_seen(iso, Principal("hank", ("hr",)), mode)
    # the path a large index takes, never the exact one
    way = "ranked" if engine == "pg_textsearch" else "pruned"
    assert way in ran and "exact" not in ran, (engine, sorted(set(ran)))


def test_never_fewer_than_k_when_k_are_visible(guarded: Isotope) -> None:
    visible = {name: sum(1 for s in guarded.sources(check_files=False, principal=principal)
                         for _ in range(s.chunks)) for name, principal in PRINCIPALS.items()}
    for name, principal in PRINCIPALS.items():
        for mode in ("questions-dense", "atoms-dense", "chunks-dense", "hybrid"):
            found = guarded.search("anything at all", k=20, mode=mode,
                                   principal=principal).results
            assert len(found) == visible[name], (name, mode)
            assert len(guarded.search("anything", k=2, mode=mode,
                                      principal=principal).results) == 2


def test_ask_answers_and_cites_only_what_the_asker_may_see(guarded: Isotope) -> None:
    query = FACTS["budget"][2]
    bob = guarded.ask(query, principal=BOB)
    assert "zeppelin" in (bob.answer or "").lower()
    assert all(_name(bob.results[c - 1].chunk.source) in SEES["bob"] for c in bob.citations)
    eve = guarded.ask(query, principal=EVE)
    assert "zeppelin" not in (eve.answer or "").lower()
    assert all(_name(r.chunk.source) in SEES["eve"] for r in eve.results)
    # an answer over given results drops those the principal may not see
    given = guarded.search(query, principal=BOB)
    answered = guarded.answer(given, principal=EVE)
    assert "zeppelin" not in (answered.answer or "").lower()
    assert all(_name(r.chunk.source) in SEES["eve"] for r in answered.results)


def test_questions_sources_counts_and_chunks_by_id(guarded: Isotope) -> None:
    iso = guarded
    chunk_of = {_name(r.chunk.source): r.chunk.id for r in iso.search(
        "anything", k=20, mode="chunks-dense").results}
    for person, principal in PRINCIPALS.items():
        names = {_name(s.source.uri) for s in iso.sources(check_files=False,
                                                          principal=principal)}
        assert names == SEES[person]
        infos = iso.sources(check_files=False, principal=principal)
        counts = iso.counts(principal=principal)
        assert counts["sources"] == sum(1 for s in infos if s.chunks)
        assert counts["chunks"] == sum(s.chunks for s in infos)
        assert counts["questions"] == sum(s.questions for s in infos) > 0
        sample = iso.questions(sample=1_000, principal=principal)
        assert {_name(q.source) for q in sample} <= SEES[person]
        for name, chunk_id in chunk_of.items():
            if name in SEES[person]:
                assert iso.chunk_questions(chunk_id, principal=principal).chunk.id == chunk_id
                assert iso.questions(chunk_id=chunk_id, principal=principal)
            else:  # the same answer as an id that does not exist
                assert _not_found(iso, chunk_id, principal) == _not_found(
                    iso, "chunk-that-does-not-exist", principal).replace(
                        "chunk-that-does-not-exist", chunk_id)
        for name, (path, _, _) in FACTS.items():
            uri = next(s.source.uri for s in iso.sources(check_files=False)
                       if s.source.uri.endswith(path))
            assert iso.has_source(uri, principal=principal) == (name in SEES[person])
    # the owner sees how many sources have no list (fail closed: only administrators)
    assert iso.counts()["sources_without_access"] == 1


def _not_found(iso: Isotope, chunk_id: str, principal: Principal) -> str:
    """What the chunk view and the questions of a chunk say of ``chunk_id`` (both must
    refuse it, saying the same)."""
    with pytest.raises(SourceNotFound) as view:
        iso.chunk_questions(chunk_id, principal=principal)
    with pytest.raises(SourceNotFound) as questions:
        iso.questions(chunk_id=chunk_id, principal=principal)
    assert str(view.value) == str(questions.value)
    return str(view.value)


def test_filters_only_narrow_what_a_principal_sees(guarded: Isotope) -> None:
    iso = guarded
    for filters in ({"source": "*"}, {"source": "*/private/alice.md"},
                    {"access": "user:eve"}, {"access": ["public", "user:alice"]},
                    {"type": ["markdown", "text", "email"]}):
        try:
            found = iso.search("vault key orchid drawer", k=20, mode="hybrid",
                               filters=filters, principal=EVE).results
        except FilterError as exc:  # ("access" is no metadata key: nothing matched it)
            assert "has the key 'access'" in str(exc) and "orchid" not in str(exc)
            continue
        assert {_name(r.chunk.source) for r in found} <= SEES["eve"], filters
    with pytest.raises(FilterError):  # the access condition's own key cannot be named
        iso.search("key", filters={"\x00access": [True, "user:alice"]}, principal=EVE)


def test_access_control_off_keeps_unlisted_sources_open(location: str, tmp_path: Path,
                                                        embedder: Embedder) -> None:
    with Isotope.open(location, embedder=embedder, llm=FakeLLM(), cache=False) as iso:
        iso.ingest(_docs(tmp_path / "docs"))
        # a local index without access control: the owner and today's users see all
        assert {_name(r.chunk.source) for r in iso.search("x", k=20).results} == set(FACTS)
        # a principal still sees unlisted sources, and lists still restrict theirs
        seen = _everything_seen(iso, EVE, "hybrid")
        assert seen == {"handbook", "changing", "loose", "mail"}


def test_allow_at_ingest_overrides_rules_and_unchanged_files_follow_the_rules(
        tmp_path: Path, embedder: Embedder) -> None:
    docs = _docs(tmp_path / "docs")
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM(),
                      cache=False) as iso:
        report = iso.ingest(docs, allow=["group:staff", "user:zed"])
        assert all(s.source.access == ["group:staff", "user:zed"]
                   for s in iso.sources(check_files=False)), report
        # again without --allow: nothing changed, so nothing is ingested (no model call),
        # and every source takes the rules file's list
        calls = iso.llm(iso.settings.question_model).usage.calls
        again = iso.ingest(docs)
        assert not again.added and not again.replaced
        assert iso.llm(iso.settings.question_model).usage.calls == calls
        lists = {_name(s.source.uri): s.source.access
                 for s in iso.sources(check_files=False)}
        assert lists["budget"] == ["group:finance"] and lists["loose"] == [
            "group:staff", "user:zed"]  # (no rule: it keeps its list)
        # the rules file changes; the next sync applies it
        (docs / ".isotope-access").write_text(RULES + "finance/** = group:board\n")
        iso.sync(docs)
        assert iso.get_access(str(docs / "finance" / "budget.md")) == ["group:board"]
        # a list removed: the source has none
        iso.set_access(str(docs / "loose.txt"), None)
        assert iso.get_access(str(docs / "loose.txt")) is None


def test_bad_lists_rules_and_principals_are_clear_errors(tmp_path: Path,
                                                         embedder: Embedder) -> None:
    for bad in ("admin", "user:", "group:a b", "role:hr"):
        with pytest.raises(AccessError, match="public, user:NAME or group:NAME"):
            Principal.parse(bad)
    with pytest.raises(AccessError, match="two users"):
        Principal.parse("user:x,user:y")
    rules = tmp_path / ".isotope-access"
    rules.write_text("ok/** = public\nhr/** group:hr\n")
    with pytest.raises(AccessError, match=r"line 2: .* a rule is GLOB = ENTRY"):
        read_rules(rules)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nThe lamp is green.\n")
    (docs / ".isotope-access").write_text("** = wizard:merlin\n")
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM()) as iso:
        iso.ingest_chunks(["Kept before."], source="kept")
        with pytest.raises(AccessError, match="public, user:NAME or group:NAME"):
            iso.ingest_chunks(["x"], source="other", allow=["role:hr"])
        with pytest.raises(AccessError, match=str(docs / ".isotope-access")):
            iso.ingest(docs)
        assert [s.source.uri for s in iso.sources(check_files=False)] == ["kept"]


@pytest.mark.llm
def test_a_principal_through_the_real_local_model(tmp_path: Path, embedder: Embedder) -> None:
    """The same promise with the bundled model writing the questions and the answer."""
    docs = _docs(tmp_path / "docs")
    with Isotope.open(tmp_path / "index", embedder=embedder, cache=False,
                      access_control=True) as iso:
        iso.ingest([docs / "finance", docs / "handbook.md"])
        response = iso.ask(FACTS["budget"][2], principal=EVE)
        assert "zeppelin" not in (response.answer or "").lower()
        assert {_name(r.chunk.source) for r in response.results} <= {"handbook"}
        assert any(r.matched_questions for r in iso.search(
            FACTS["budget"][2], principal=BOB).results)


def test_the_audit_log_says_who_searched_what(location: str, tmp_path: Path,
                                              embedder: Embedder) -> None:
    import json
    import time

    from typer.testing import CliRunner

    from isotope.cli import app

    with Isotope.open(location, embedder=embedder, llm=FakeLLM(), cache=False,
                      access_control=True, email_access=True, audit_log=True) as iso:
        iso.ingest(_docs(tmp_path / "docs"))
        assert iso.audit_log() == []  # (an ingest is not a search)
        found = iso.search(FACTS["budget"][2], principal=BOB)
        iso.ask(FACTS["handbook"][2], principal=EVE)
        iso.search("anything")
        newest, asked, first = iso.audit_log()
        assert (first.principal, first.query, first.mode) == (
            "user:bob@example.com,group:finance", FACTS["budget"][2], "hybrid")
        assert first.chunk_ids == [r.chunk.id for r in found.results]
        assert asked.principal == "user:eve" and newest.principal == "owner"
        assert first.at < asked.at <= newest.at
    # the CLI shows it; entries older than audit_days are dropped at the next search
    shown = CliRunner().invoke(app, ["audit", "--json", "--index", location, "-n", "2"])
    assert shown.exit_code == 0, shown.output
    assert [e["principal"] for e in json.loads(shown.stdout)] == ["owner", "user:eve"]
    with Isotope.open(location, embedder=embedder, llm=FakeLLM(), cache=False,
                      audit_log=True, audit_days=1e-6) as iso:
        time.sleep(0.2)
        iso.search("again")
        assert [e.query for e in iso.audit_log()] == ["again"]
    with Isotope.open(location, embedder=embedder, llm=FakeLLM(), cache=False) as iso:
        iso.search("not logged")  # (off by default)
        assert [e.query for e in iso.audit_log()] == ["again"]


def test_members_follow_their_container_and_rules_apply_to_files_seen_again(
        tmp_path: Path, embedder: Embedder) -> None:
    """Found by review: an email's attachment kept its old list when the email's changed;
    a file first ingested by its own path ignored its folder's rules file later; a rules
    pattern with a leading / matched in every folder; ask skipped the check for a list
    changed while it answered; deleting an email removed an attachment one may not see."""
    docs = _docs(tmp_path / "docs")
    mail = docs / "mail" / "offsite.eml"
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM(), cache=False,
                      access_control=True) as iso:
        iso.ingest(docs, allow=["public"])
        attachment = next(s.source.uri for s in iso.sources(check_files=False)
                          if "#" in s.source.uri)
        iso.set_access(str(mail), ["user:ceo"])
        assert iso.get_access(attachment) == ["user:ceo"]
        iso.ingest(docs, allow=["group:staff"])  # nothing changed: the lists do
        assert iso.get_access(attachment) == ["group:staff"]
        # a member one may not see: its container is not deleted for one
        iso.store.set_access([attachment], ["user:ceo"])
        with pytest.raises(Exception, match="may not see"):
            iso.delete(str(mail), principal="group:staff")
        assert iso.has_source(attachment)
    with Isotope.open(tmp_path / "other", embedder=embedder, llm=FakeLLM(), cache=False,
                      access_control=True) as iso:
        iso.ingest(docs / "finance" / "budget.md")  # by its own path: no rules file there
        assert iso.get_access(str(docs / "finance" / "budget.md")) is None
        iso.ingest(docs)  # the folder: its rules file applies to the file seen again
        assert iso.get_access(str(docs / "finance" / "budget.md")) == ["group:finance"]
    rules = tmp_path / "rules" / ".isotope-access"
    rules.parent.mkdir()
    rules.write_text("hr/** = group:hr\n/readme.md = public\n")
    read = read_rules(rules)
    assert read.match("readme.md") == ["public"] and read.match("hr/readme.md") == [
        "group:hr"]


def test_ask_declines_when_the_list_changes_while_it_answers(tmp_path: Path,
                                                             embedder: Embedder) -> None:
    class Changing(FakeLLM):
        def stream(self, prompt: Any, **options: Any) -> Iterator[str]:
            reply = self.complete(prompt, **options)
            yield reply[:5]
            iso.set_access("*/finance/budget.md", ["group:board"])
            yield reply[5:]

    iso = Isotope.open(tmp_path / "index", embedder=embedder, llm=Changing(), cache=False,
                       access_control=True)
    with iso:
        iso.ingest(_docs(tmp_path / "docs"))
        answered = iso.ask(FACTS["budget"][2], principal=BOB)
        assert answered.answer_kind == "declined" and answered.citations == []
        assert "budget" not in {_name(r.chunk.source) for r in answered.results}


def test_the_command_line_sets_shows_and_searches_as(tmp_path: Path, embedder: Embedder,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from typer.testing import CliRunner

    from isotope.cli import app

    monkeypatch.setenv("ISOTOPE_QUESTION_MODEL", "fake/echo")
    monkeypatch.setenv("ISOTOPE_ANSWER_MODEL", "fake/echo")
    docs = _docs(tmp_path / "docs")
    index = str(tmp_path / "index")
    run = CliRunner().invoke
    done = run(app, ["ingest", str(docs / "loose.txt"), "--index", index, "--allow",
                     "group:zoo", "--json"])
    assert done.exit_code == 0, done.output
    shown = run(app, ["access", "show", str(docs / "loose.txt"), "--index", index, "--json"])
    assert json.loads(shown.stdout)["access"] == ["group:zoo"]
    asked = ["query", FACTS["loose"][2], "--raw", "--json", "--index", index]
    assert json.loads(run(app, [*asked, "--as", "user:eve"]).stdout)["results"] == []
    assert json.loads(run(app, [*asked, "--as", "user:eve,group:zoo"]).stdout)["results"]
    changed = run(app, ["access", "set", "*/loose.txt", "--allow", "public", "--index", index,
                        "--json"])
    assert json.loads(changed.stdout)["access"] == ["public"], changed.output
    assert json.loads(run(app, [*asked, "--as", "user:eve"]).stdout)["results"]
    listed = run(app, ["list", "--index", index, "--as", "user:eve", "--json"])
    assert [s["access"] for s in json.loads(listed.stdout)] == [["public"]]
    bad = run(app, ["access", "set", "*/loose.txt", "--allow", "wizard:merlin", "--index",
                    index])
    assert bad.exit_code != 0 and "public, user:NAME or group:NAME" in bad.output
    for command in (["access", "--help"], ["access", "set", "--help"], ["audit", "--help"]):
        assert run(app, command).exit_code == 0
