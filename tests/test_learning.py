"""An index that learns from its users (issue 29): the query log, feedback on results,
learned questions (auto, review, off), not-useful marks, what the log says. Real indexes
(the SQLite store and a real PostgreSQL server), the bundled embedder and the real
pipeline; only the model's reply is the deterministic fake (one test goes through the
real local model)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from isotope import Isotope
from isotope.access import Principal
from isotope.embedders import Embedder
from isotope.errors import InvalidArgument, SourceNotFound
from isotope.stores import VectorBackend

from conftest import FakeLLM, location_of

FACTS = {
    "lighthouse": "The old lighthouse on Skerry Point was automated in 1987 and its "
                  "keeper moved to the mainland.",
    "bakery": "The harbour bakery sells cardamom buns from six in the morning.",
    "ferry": "The island ferry leaves the pier every ninety minutes in summer.",
    "museum": "The maritime museum shows a whaling boat from 1850 in its main hall.",
}
# a question the fake model does not generate: only learning makes it a question
ASKED = "who used to look after the beacon before the machines took over"


def _docs(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in FACTS.items():
        (folder / f"{name}.md").write_text(f"# {name.title()}\n\n{text}\n")
    return folder


@pytest.fixture(params=["sqlite", "postgresql", "chroma", "postgresql-chroma"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Both engines, each with its vectors in Chroma too (a learned question is a vector
    added, a disabled one a vector deleted)."""
    return location_of(request, tmp_path)


@pytest.fixture
def logged(location: str, tmp_path: Path, embedder: Embedder) -> Iterator[Isotope]:
    iso = Isotope.open(location, embedder=embedder, llm=FakeLLM(), cache=False,
                       query_log=True)
    iso.ingest(_docs(tmp_path / "docs"))
    yield iso
    iso.close()


def _chunk_of(iso: Isotope, name: str) -> str:
    for info in iso.sources():
        if info.source.uri.endswith(f"{name}.md"):
            return iso.questions(info.source.uri)[0].chunk_id
    raise AssertionError(name)


def _asked(topic: str) -> str:
    """A query of the kill tests' corpus (tests/test_reliability.py) that no generated
    question says: only learning makes it a question of the topic's first chunk."""
    return f"which crew looks after the {topic} machines at night"


def _killed_index(index: Path, embedder: Embedder) -> Isotope:
    """The index the kill tests open, again after each kill (small chunks: a topic's
    first chunk is one sentence; the query log on)."""
    return Isotope.open(index, embedder=embedder, llm=FakeLLM(), cache=False,
                        chunk_size=48, chunk_overlap=0, query_log=True)


def _learn_first_chunks(iso: Isotope, topics: Sequence[str]) -> None:
    """Each topic's query searched and its source's first chunk marked useful (learned)."""
    for topic in topics:
        found = iso.search(_asked(topic), k=50, mode="hybrid")
        first = next(r.chunk.id for r in found.results
                     if r.chunk.source.endswith(f"{topic}.md") and r.chunk.index == 0)
        assert iso.feedback(found.query_id or "", first).learned == "learned"


def test_a_useful_mark_teaches_the_chunk_the_query(logged: Isotope) -> None:
    iso = logged
    first = iso.search(ASKED, k=4, mode="questions-dense")
    assert first.query_id and len(first.query_id) == 32
    entry = iso.audit_log(1)[0]
    assert entry.query_id == first.query_id and entry.query == ASKED
    assert entry.chunk_ids == [r.chunk.id for r in first.results]
    assert entry.scores == [r.score for r in first.results] and entry.latency_ms > 0
    assert entry.action == first.suggested_action

    target = _chunk_of(iso, "lighthouse")
    assert target in entry.chunk_ids
    done = iso.feedback(first.query_id, target, useful=True)
    assert done.learned == "learned" and done.question_id
    learned = [q for q in iso.questions(chunk_id=target) if q.origin == "user"]
    assert [q.text for q in learned] == [ASKED]

    again = iso.search(ASKED, k=4, mode="questions-dense")
    assert again.results[0].chunk.id == target
    fused = iso.search(ASKED + "?", k=4, mode="hybrid", explain=True)
    assert fused.results[0].chunk.id == target  # a confirmed question's chunk comes first
    assert again.results[0].score > 0.99  # the learned question itself matched
    # a learned question is someone's query: never shown as a matched question
    assert all(m.origin != "user" and m.text != ASKED
               for r in again.results for m in r.matched_questions)
    told = fused.results[0].explain
    assert told is not None and told["confirmed"] > 0
    # another user's search is not raised by it (issue 42: the raise told whether someone
    # had asked the query); a question added by hand is seen by all and raises for all
    theirs = iso.search(ASKED + "?", k=4, mode="hybrid", explain=True, principal="user:eve")
    assert all(r.explain["confirmed"] == 0 for r in theirs.results)  # type: ignore[index]
    # nor does the learned question itself match for them (it scored 1.0: the query)
    dense = iso.search(ASKED, k=4, mode="questions-dense", principal="user:eve")
    assert dense.results and dense.results[0].score < 0.99
    iso.add_question(target, "which family kept the skerry lamp lit", chunk_id=target)
    by_hand = iso.search("which family kept the skerry lamp lit?", k=4, mode="hybrid",
                         explain=True, principal="user:eve")
    assert by_hand.results[0].chunk.id == target
    assert by_hand.results[0].explain["confirmed"] > 0  # type: ignore[index]
    # marking it again (10,000 times) learns nothing twice and keeps one mark
    for _ in range(10_000):
        assert iso.feedback(first.query_id, target).learned == "learned"
    assert len([q for q in iso.questions(chunk_id=target) if q.origin == "user"]) == 1
    assert len(iso.store.feedback(query_id=first.query_id)) == 1


def test_review_holds_a_learned_question_until_approved(location: str, tmp_path: Path,
                                                        embedder: Embedder) -> None:
    with Isotope.open(location, embedder=embedder, llm=FakeLLM(), cache=False,
                      query_log=True, learn="review") as iso:
        iso.ingest(_docs(tmp_path / "docs"))
        target = _chunk_of(iso, "lighthouse")
        found = iso.search(ASKED, k=4)
        assert iso.feedback(found.query_id or "", target).learned == "pending"
        assert not [q for q in iso.questions(chunk_id=target) if q.origin == "user"]
        waiting = iso.pending_questions()
        assert [(m.query, m.chunk_id) for m in waiting] == [(ASKED, target)]
        with pytest.raises(InvalidArgument, match="waits for review"):
            iso.review_questions(["nope:nothing"])
        [done] = iso.review_questions([f"{found.query_id}:{target}"])
        assert done.learned == "learned"
        assert [q.text for q in iso.questions(chunk_id=target)
                if q.origin == "user"] == [ASKED]
        assert iso.pending_questions() == []

        other = iso.search("when does the ferry leave", k=4)
        ferry = _chunk_of(iso, "ferry")
        iso.feedback(other.query_id or "", ferry)
        [rejected] = iso.review_questions([f"{other.query_id}:{ferry}"], approve=False)
        assert rejected.learned == "rejected"
        assert not [q for q in iso.questions(chunk_id=ferry) if q.origin == "user"]

    with Isotope.open(location, embedder=embedder, llm=FakeLLM(), cache=False,
                      query_log=True, learn="off") as iso:
        found = iso.search("where are cardamom buns sold", k=4)
        bakery = _chunk_of(iso, "bakery")
        assert iso.feedback(found.query_id or "", bakery).learned is None
        assert not [q for q in iso.questions(chunk_id=bakery) if q.origin == "user"]


def test_a_not_useful_result_is_not_first_again_for_that_query(logged: Isotope) -> None:
    iso = logged
    query = "What did the lighthouse keeper do in 1987?"
    found = iso.search(query, k=4, mode="hybrid")
    first = found.results[0].chunk.id
    iso.feedback(found.query_id or "", first, useful=False)
    for asked in (query, "what did the lighthouse keeper do in 1987"):
        again = iso.search(asked, k=4, mode="hybrid")
        assert again.results[0].chunk.id != first
        assert first in [r.chunk.id for r in again.results]  # moved down, not hidden
        assert [r.rank for r in again.results] == list(range(1, len(again.results) + 1))
    # someone else's ranking is theirs
    other = iso.search(query, k=4, mode="hybrid", principal=Principal("carol"))
    assert other.results[0].chunk.id == first
    # an unrelated query is not touched
    assert iso.search("cardamom buns", k=4).results[0].chunk.source.endswith("bakery.md")


def test_feedback_is_refused_for_what_its_giver_did_not_search(logged: Isotope) -> None:
    iso = logged
    alice, mallory = Principal("alice", ("crew",)), Principal("mallory")
    found = iso.search("When was the lighthouse automated?", k=2, principal=alice)
    returned = [r.chunk.id for r in found.results]
    with pytest.raises(SourceNotFound, match="no search"):
        iso.feedback(found.query_id or "", returned[0], principal=mallory)
    with pytest.raises(SourceNotFound, match="no search"):
        iso.feedback("0" * 32, returned[0], principal=alice)
    with pytest.raises(SourceNotFound, match="no search"):
        iso.feedback(found.query_id or "", returned[0])  # the owner did not search it
    not_returned = next(_chunk_of(iso, n) for n in FACTS
                        if _chunk_of(iso, n) not in returned)
    with pytest.raises(InvalidArgument, match="was not a result"):
        iso.feedback(found.query_id or "", not_returned, principal=alice)
    # the same user, whose groups changed since, may
    assert iso.feedback(found.query_id or "", returned[0],
                        principal=Principal("alice")).useful


def test_the_log_says_what_was_asked_and_keeps_its_days(location: str, tmp_path: Path,
                                                        embedder: Embedder) -> None:
    with Isotope.open(location, embedder=embedder, llm=FakeLLM(), cache=False,
                      query_log=True) as iso:
        iso.ingest(_docs(tmp_path / "docs"))
        for _ in range(3):
            iso.search("When does the ferry leave?", k=2)
        odd = iso.search("zebra quantum trombone", k=2, mode="questions-dense")
        iso.feedback(odd.query_id or "", odd.results[0].chunk.id, useful=False)
        said = iso.log_summary()
        assert said.searches == 4
        assert said.frequent[0] == ("when does the ferry leave", 3)
        assert ("zebra quantum trombone", 1) in said.not_useful
        assert said.latency_ms["p50"] > 0 and set(said.latency_ms) == {"p50", "p95", "p99"}
        assert said.feedback_by_source[0]["not_useful"] == 1
        if odd.suggested_action == "refine_query":
            assert ("zebra quantum trombone", 1) in said.refine

    # off by default for the library: no id, nothing logged
    with Isotope.open(location, embedder=embedder, llm=FakeLLM(), cache=False) as iso:
        assert iso.search("When does the ferry leave?", k=2).query_id is None
        assert len(iso.audit_log(100)) == 4

    with Isotope.open(location, embedder=embedder, llm=FakeLLM(), cache=False,
                      query_log=True, audit_days=1e-6) as iso:
        time.sleep(0.2)
        iso.search("again", k=1)
        assert [e.query for e in iso.audit_log(100)] == ["again"]
        assert iso.store.feedback() == []  # gone with their searches


def test_learning_through_the_real_local_model(tmp_path: Path, embedder: Embedder) -> None:

    with Isotope.open(tmp_path / "index", embedder=embedder, cache=False,
                      query_log=True) as iso:
        iso.ingest(_docs(tmp_path / "docs"))
        found = iso.search(ASKED, k=4, mode="questions-dense")
        target = _chunk_of(iso, "lighthouse")
        assert iso.feedback(found.query_id or "", target).learned == "learned"
        assert iso.search(ASKED, k=1, mode="questions-dense").results[0].chunk.id == target


def test_learned_questions_outlive_everything_that_keeps_their_chunk(
        location: str, tmp_path: Path, embedder: Embedder) -> None:
    """Re-ingest of an unchanged file, ingest --force, a changed chunk (carried to the
    chunk that covers its text), copy; a chunk no new chunk covers keeps its questions
    in the orphaned list."""
    from isotope.stores.copying import copy_index

    docs = _docs(tmp_path / "docs")
    lighthouse = docs / "lighthouse.md"

    def learned(iso: Isotope) -> list[str]:
        return [q.text for q in iso.questions(lighthouse) if q.origin == "user"]

    with Isotope.open(location, embedder=embedder, llm=FakeLLM(), cache=False,
                      query_log=True) as iso:
        iso.ingest(docs)
        found = iso.search(ASKED, k=4)
        assert iso.feedback(found.query_id or "", _chunk_of(iso, "lighthouse")).learned \
            == "learned"
        iso.ingest(docs)
        assert learned(iso) == [ASKED]
        iso.ingest(docs, force=True)
        assert learned(iso) == [ASKED]
        lighthouse.write_text("# Lighthouse\n\nThe old lighthouse on Skerry Point was "
                              "automated in 1987, and its last keeper moved to the "
                              "mainland with his family.\n")
        iso.ingest(docs)
        assert learned(iso) == [ASKED]
        assert iso.search(ASKED, k=1, mode="questions-dense").results[0].chunk.source \
            .endswith("lighthouse.md")

        copied = tmp_path / "copy"  # (into the backend the test runs on, as the CLI does)
        backend = os.environ.get("ISOTOPE_VECTOR_BACKEND")
        if backend and "://" in backend:  # (a server: collections of its own)
            backend += "-copy"
        copy_index(location, copied,
                   backend=VectorBackend(backend, explicit=True) if backend else None)
        with pytest.MonkeyPatch.context() as patch:
            patch.delenv("ISOTOPE_VECTOR_BACKEND", raising=False)  # (the copy's is its own)
            with Isotope.open(copied, embedder=embedder, llm=FakeLLM(),
                              cache=False) as other:
                assert [q.text for q in other.questions(str(lighthouse.resolve()))
                        if q.origin == "user"] == [ASKED]

        lighthouse.write_text("# Tides\n\nSpring tides reach four metres at the quay.\n")
        iso.ingest(docs)
        assert learned(iso) == []
        [kept] = iso.store.orphaned_questions()
        assert kept["text"] == ASKED and kept["origin"] == "user"
        assert "Skerry Point" in kept["chunk_text"]


def test_the_command_line_logs_marks_learns_and_reviews(
        tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """`isotope query --json` has a query_id (the CLI logs by default), `isotope feedback`
    learns, `isotope questions --json` shows the origin, `isotope log --json` counts,
    `isotope questions review` lists and approves, `isotope questions orphaned`."""
    import json

    from typer.testing import CliRunner

    from isotope.cli import app

    monkeypatch.setenv("ISOTOPE_QUESTION_MODEL", "fake/echo")
    monkeypatch.setenv("ISOTOPE_ANSWER_MODEL", "fake/echo")
    runner = CliRunner()
    index = str(tmp_path / "index")
    docs = _docs(tmp_path / "docs")
    assert runner.invoke(app, ["ingest", str(docs), "-i", index, "--plain"]).exit_code == 0

    def run(*args: str) -> object:
        result = runner.invoke(app, [*args, "-i", index, "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    found = run("query", ASKED, "--raw", "-k", "4")
    assert isinstance(found, dict) and len(found["query_id"]) == 32
    told = run("query", ASKED, "--raw", "-k", "2", "--explain", "--mode", "hybrid")
    assert isinstance(told, dict) and told["results"][0]["explain"]["fused"] is not None
    shown = runner.invoke(app, ["query", ASKED, "--raw", "--explain", "-i", index])
    assert "standardised" in shown.output and "fused" in shown.output
    lighthouse = next(r["chunk"]["id"] for r in found["results"]
                      if r["chunk"]["source"].endswith("lighthouse.md"))
    done = run("feedback", found["query_id"], lighthouse)
    assert isinstance(done, dict) and done["learned"] == "learned"
    shown = run("questions", str(docs / "lighthouse.md"))
    assert isinstance(shown, list)
    assert [q["text"] for q in shown if q["origin"] == "user"] == [ASKED]
    assert {q["origin"] for q in shown} == {"generated", "user"}
    said = run("log")
    assert isinstance(said, dict) and said["searches"] == 3
    assert said["feedback_by_source"][0]["useful"] == 1
    bad = runner.invoke(app, ["feedback", found["query_id"], "nope", "-i", index])
    assert bad.exit_code == 1 and "was not a result" in bad.output

    monkeypatch.setenv("ISOTOPE_LEARN", "review")
    other = run("query", "when does the boat to the island go", "--raw", "-k", "4")
    assert isinstance(other, dict)
    ferry = next(r["chunk"]["id"] for r in other["results"]
                 if r["chunk"]["source"].endswith("ferry.md"))
    assert run("feedback", other["query_id"], ferry)["learned"] == "pending"  # type: ignore[index]
    waiting = run("questions", "review")
    assert isinstance(waiting, dict)
    [mark] = waiting["waiting"]
    assert mark["query"] == "when does the boat to the island go"
    approved = run("questions", "review", "--approve", mark["id"])
    assert isinstance(approved, dict) and approved["done"][0]["learned"] == "learned"
    assert approved["waiting"] == []
    assert run("questions", "orphaned") == []
    # a link planted at a file --write makes: replaced, its target untouched (issue 64)
    (tmp_path / "set").mkdir()
    (tmp_path / "victim").write_text("not yours to write\n")
    (tmp_path / "set" / "queries.jsonl").symlink_to(tmp_path / "victim")
    scored = run("eval", "--from-log", "--write", str(tmp_path / "set"), "-m", "hybrid",
                 "-m", "questions-dense")
    assert (tmp_path / "victim").read_text() == "not yours to write\n"
    assert isinstance(scored, dict) and scored["queries"] == 2 and scored["passages"] == 2
    dense = next(m for m in scored["modes"] if m["mode"] == "questions-dense")
    assert dense["recall"]["1"] == 100.0  # (learned: each query is now its chunk's question)
    written = (tmp_path / "set" / "queries.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["question"] for line in written) == sorted([
        ASKED, "when does the boat to the island go"])
    museum = str(docs / "museum.md")
    added = run("questions", "add", museum, "which boat is in the main hall", "--chunk", "0")
    assert isinstance(added, dict) and added["done"] == "added"
    assert run("questions", "disable", added["id"])["done"] == "disabled"  # type: ignore[index]
    listed = run("questions", museum)
    assert isinstance(listed, list)
    assert [q["reason"] for q in listed if q["id"] == added["id"]] == [
        "disabled by hand (manual)"]
    assert run("questions", "enable", added["id"])["done"] == "enabled"  # type: ignore[index]
    edited = run("questions", "edit", added["id"], "which boat stands in the hall")
    assert isinstance(edited, dict) and edited["id"] != added["id"]
    bad = runner.invoke(app, ["questions", "add", museum, "bad\x1btext", "-i", index])
    assert bad.exit_code == 1 and "control characters" in bad.output


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL")
@pytest.mark.parametrize("how", ["changed", "force"])
def test_a_kill_while_files_are_ingested_again_never_loses_a_learned_question(
        tmp_path: Path, embedder: Embedder, how: str) -> None:
    """Each source learns a question of its own; its file changes (its first chunk's text
    too), or ``ingest --force`` rebuilds it unchanged, and an ingest in another process
    is killed at random moments: every learned question is still there, exactly once, on
    the old chunk or carried to the new one."""
    import random
    import signal

    from test_reliability import TOPICS, _corpus, _worker

    corpus = _corpus(tmp_path / "corpus")
    index = tmp_path / "index"
    topics = TOPICS[:8]
    for extra in TOPICS[8:]:
        (corpus / f"{extra}.md").unlink()

    with _killed_index(index, embedder) as iso:
        iso.ingest(corpus)
        _learn_first_chunks(iso, topics)
    rng = random.Random(11)
    for run in range(4):
        for topic in topics if how == "changed" else []:  # the first chunk's text changes
            path = corpus / f"{topic}.md"
            path.write_text(path.read_text().replace(" was started", f" (rev {run}) was started"))
        worker = _worker(index, corpus, delay=0.02, force=how == "force")
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "started", worker.stderr
        time.sleep(rng.uniform(0.1, 1.5))
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        with _killed_index(index, embedder) as iso:
            assert iso.check() == [], f"run {run}"
            assert iso.orphaned_questions() == []
            for topic in topics:
                kept = [q for q in iso.questions(str(corpus / f"{topic}.md"))
                        if q.origin == "user"]
                assert [q.text for q in kept] == [_asked(topic)], f"run {run}: {topic}"
    # a run to the end carries every one to the new text
    with _killed_index(index, embedder) as iso:
        iso.ingest(corpus)
        for topic in topics:
            [kept] = [q for q in iso.questions(str(corpus / f"{topic}.md"))
                      if q.origin == "user"]
            assert kept.chunk_index == 0 and kept.text == _asked(topic)


def test_explain_adds_up_to_each_results_score(logged: Isotope) -> None:
    from isotope.search.retrieval import MODES, normalized, signal_weights

    iso = logged
    found = iso.search("When was the lighthouse automated?", k=4, mode="hybrid",
                       explain=True)
    total = sum(w for w in signal_weights(iso.settings.alpha).values())
    for result in found.results:
        told = result.explain
        assert told is not None and told["score"] == pytest.approx(result.score, abs=1e-6)
        parts = [row["contribution"] for row in told["signals"].values()
                 if row["contribution"] is not None]
        assert sum(parts) * told["scale"] + told["confirmed"] == pytest.approx(
            told["fused"], abs=1e-5)
        assert normalized("hybrid", told["fused"], total) == pytest.approx(result.score,
                                                                           abs=1e-5)
        for row in told["signals"].values():
            assert row["contribution"] == pytest.approx(row["weight"] * row["standardized"],
                                                        abs=1e-6)
    first = found.results[0].explain
    assert first is not None and first["matched_atoms"]
    assert any("1987" in atom for atom in first["matched_atoms"])
    assert found.results[1].explain["signals"]["chunks-dense"]["rank"] is not None  # type: ignore[index]
    for mode in MODES:
        if mode in ("hybrid", "graph"):  # (graph: an index without the knowledge graph)
            continue
        one = iso.search("When was the lighthouse automated?", k=3, mode=mode, explain=True)
        for result in one.results:
            assert result.explain is not None
            [(name, row)] = result.explain["signals"].items()
            assert name == mode and row["rank"] == result.rank
    assert iso.search("lighthouse", k=2).results[0].explain is None  # (only when asked)


def test_questions_by_hand_are_added_edited_disabled_and_kept(location: str, tmp_path: Path,
                                                               embedder: Embedder) -> None:
    docs = _docs(tmp_path / "docs")
    museum = docs / "museum.md"
    with Isotope.open(location, embedder=embedder, llm=FakeLLM(), cache=False) as iso:
        iso.ingest(docs)
        asked = "where can I see the old whaling vessel"
        added = iso.add_question(museum, asked, chunk=0)
        [mine] = [q for q in iso.questions(museum) if q.origin == "manual"]
        assert mine.id == added and mine.text == asked and mine.kept
        top = iso.search(asked, k=1, mode="questions-dense").results[0]
        assert top.chunk.source.endswith("museum.md") and top.score > 0.99
        for bad, why in (("", "empty"), ("ok\x1b[31m red", "control characters"),
                         ("two\nlines", "control characters"), ("x" * 1001, "at most"),
                         ("a\u202eevil", "control characters"), (asked, "already has")):
            with pytest.raises(InvalidArgument, match=why):
                iso.add_question(museum, bad, chunk=0)
        with pytest.raises(SourceNotFound):
            iso.add_question(museum, "which hall", chunk=7)

        edited = iso.edit_question(added, "where is the whaling boat shown")
        assert [q.text for q in iso.questions(museum) if q.origin == "manual"] == [
            "where is the whaling boat shown"]
        generated = next(q for q in iso.questions(museum) if q.origin == "generated" and q.kept)
        iso.disable_question(generated.id)
        gone = next(q for q in iso.questions(museum) if q.id == generated.id)
        assert not gone.kept and gone.reason == "disabled by hand (generated)"
        assert all(generated.text not in [m.text for m in r.matched_questions]
                   for r in iso.search(generated.text, k=4, mode="questions-dense").results)
        iso.enable_question(generated.id)
        assert next(q for q in iso.questions(museum) if q.id == generated.id).kept
        with pytest.raises(SourceNotFound):
            iso.disable_question("0" * 16)

        iso.ingest(docs, force=True)  # kept through everything that keeps the chunk
        assert [q.id for q in iso.questions(museum) if q.origin == "manual"] == [edited]


def test_what_review_found_stays_fixed(location: str, tmp_path: Path,
                                       embedder: Embedder) -> None:
    """A question by hand equal to a generated one never blocks the model's questions; a
    failed edit leaves the question as it was; what is disabled stays disabled through
    --force and a changed file; a learned query is not shown to other users; a mark
    taken back takes back what it taught; a demoted response describes its new first."""
    docs = _docs(tmp_path / "docs")
    museum = docs / "museum.md"
    with Isotope.open(location, embedder=embedder, llm=FakeLLM(), cache=False,
                      query_log=True) as iso:
        iso.ingest(docs)
        kept = [q for q in iso.questions(museum) if q.kept]
        first, second = kept[0], kept[1]
        assert iso.edit_question(first.id, first.text) == first.id  # (the same text)
        iso.disable_question(first.id)
        again = iso.add_question(museum, first.text, chunk=0)  # the same text by hand
        with pytest.raises(InvalidArgument, match="already has"):
            iso.edit_question(second.id, first.text)
        assert next(q for q in iso.questions(museum) if q.id == second.id).kept
        iso.disable_question(second.id)
        iso.ingest(docs, force=True)  # the model makes every question again
        shown = {q.id: q for q in iso.questions(museum)}
        assert shown[again].origin == "manual" and shown[again].kept
        assert not shown[second.id].kept and shown[second.id].reason.startswith(
            "disabled by hand")
        assert iso.counts()["chunks_waiting"] == 0
        museum.write_text(museum.read_text().replace("main hall", "great hall"))
        iso.ingest(docs)
        after = [q for q in iso.questions(museum)]
        assert [q.text for q in after if not q.kept and q.reason.startswith(
            "disabled by hand")] == [second.text]
        assert [q.text for q in after if q.origin == "manual"] == [first.text]

        bob, eve = Principal("bob"), Principal("eve")
        found = iso.search(ASKED, k=4, principal=bob)
        target = _chunk_of(iso, "lighthouse")
        assert iso.feedback(found.query_id or "", target, principal=bob).learned == "learned"
        assert ASKED not in [q.text for q in iso.questions(chunk_id=target, principal=eve)]
        assert ASKED not in [q.text for q in iso.chunk_questions(target,
                                                                  principal=eve).questions]
        assert ASKED in [q.text for q in iso.questions(chunk_id=target)]  # the owner's view
        iso.feedback(found.query_id or "", target, useful=False, principal=bob)
        assert ASKED not in [q.text for q in iso.questions(chunk_id=target) if q.kept]

        demoted = iso.search(ASKED, k=4, principal=bob)
        assert demoted.results[0].chunk.id != target
        assert demoted.top_score == demoted.results[0].score


def test_repair_keeps_a_learned_question(tmp_path: Path, embedder: Embedder) -> None:
    """A source whose rows were lost is ingested again by `check --repair`: its learned
    question comes with it."""
    import support

    docs = _docs(tmp_path / "docs")
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM(), cache=False,
                      query_log=True) as iso:
        iso.ingest(docs)
        target = _chunk_of(iso, "lighthouse")
        found = iso.search(ASKED, k=4)
        done = iso.feedback(found.query_id or "", target)
        assert done.learned == "learned"
        conn = support.connection(iso)
        with conn:  # generated questions lost behind the store's back
            conn.execute("DELETE FROM questions WHERE chunk_id = ? AND origin = 'generated'",
                         (target,))
        assert iso.check()
        iso.repair()
        assert iso.check() == []
        assert [q.text for q in iso.questions(docs / "lighthouse.md")
                if q.origin == "user"] == [ASKED]


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL")
def test_a_copy_killed_and_resumed_keeps_every_learned_question(
        tmp_path: Path, embedder: Embedder) -> None:
    """`isotope copy` killed at random moments, then resumed: every source arrives with
    its learned question, once, still a user question."""
    import random
    import signal
    import subprocess
    import sys

    from test_reliability import TOPICS, _corpus

    corpus = _corpus(tmp_path / "corpus")
    source = tmp_path / "index"

    with Isotope.open(source, embedder=embedder, llm=FakeLLM(), cache=False,
                      chunk_size=48, chunk_overlap=0, query_log=True) as iso:
        iso.ingest(corpus)
        _learn_first_chunks(iso, TOPICS)
    rng = random.Random(3)
    # a copy that says each source it stored (and waits a little after each), so that the
    # kill lands between sources, mid-copy
    slow = ("import sys, time; from isotope.stores.copying import copy_index; "
            "copy_index(sys.argv[1], sys.argv[2], progress=lambda n, total, uri: "
            "(print(n, flush=True), time.sleep(0.02)))")
    for run in range(3):
        target = tmp_path / f"copy-{run}"
        worker = subprocess.Popen([sys.executable, "-c", slow, str(source), str(target)],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True)
        assert worker.stdout is not None
        stop = rng.randint(1, len(TOPICS) - 2)
        while int(worker.stdout.readline() or stop) < stop:
            pass
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        with Isotope.open(target, embedder=embedder, llm=FakeLLM(), cache=False) as copy:
            assert 0 < len(copy.sources()) < len(TOPICS), f"run {run}: not mid-copy"
        done = subprocess.run([sys.executable, "-m", "isotope", "copy", str(source),
                               str(target), "--resume"], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        with Isotope.open(target, embedder=embedder, llm=FakeLLM(), cache=False) as copy:
            assert copy.check() == [], f"run {run}"
            for topic in TOPICS:
                kept = [q.text for q in copy.questions(str(corpus / f"{topic}.md"))
                        if q.origin == "user"]
                assert kept == [_asked(topic)], f"run {run}: {topic}"


# queries whose keyword and meaning signals disagree on this corpus; users who mark the
# chunk the meaning points to teach the fit to weigh the dense signals more
LEANING = ["Which boat leaves the pier in 1850?", "when does the ferry museum open in the "
           "morning", "whaling boat summer pier", "keeper of the buns", "mainland bakery point",
           "lighthouse hall boat", "morning ferry cardamom", "island museum summer",
           "the keeper's boat", "a hall from six in the morning", "boat automated",
           "harbour point ferry"]


def test_signal_weights_are_fitted_on_the_marks_used_and_reset(
        location: str, tmp_path: Path, embedder: Embedder) -> None:
    import json

    from typer.testing import CliRunner

    from isotope.cli import app
    from isotope.stores.copying import copy_index

    with Isotope.open(location, embedder=embedder, llm=FakeLLM(), cache=False,
                      query_log=True, learn="off") as iso:
        iso.ingest(_docs(tmp_path / "docs"))
        with pytest.raises(InvalidArgument, match=r"0 useful mark.*isotope feedback"):
            iso.fit_weights()
        wanted = {}
        for query in LEANING:
            found = iso.search(query, 4, mode="hybrid")
            wanted[query] = iso.search(query, 1, mode="chunks-dense").results[0].chunk.id
            assert found.query_id is not None
            iso.feedback(found.query_id, wanted[query])
        before = sum(iso.search(q, 1, mode="hybrid").results[0].chunk.id == c
                     for q, c in wanted.items())
        assert before < len(LEANING)  # (the defaults follow the keywords here)
        with pytest.raises(InvalidArgument, match="12 useful mark"):
            iso.fit_weights()  # fewer than 50 by default
        iso.settings.weights = {"questions-dense": 0.0}  # (a fit could never be kept)
        with pytest.raises(InvalidArgument, match="sets questions-dense to 0"):
            iso.fit_weights(min_marks=10)
        from isotope.search.retrieval import SIGNALS

        iso.settings.weights = dict.fromkeys(SIGNALS, 0.5)  # (nothing left to fit)
        with pytest.raises(InvalidArgument, match="gives every signal its weight"):
            iso.fit_weights(min_marks=10)
        iso.settings.weights = {}
        fit = iso.fit_weights(min_marks=10)
        assert fit.adopted and fit.marks == len(LEANING)
        assert fit.first_before == pytest.approx(before / len(LEANING), abs=1e-3)
        assert fit.first_after > fit.first_before
        after = sum(iso.search(q, 1, mode="hybrid").results[0].chunk.id == c
                    for q, c in wanted.items())
        assert after == round(fit.first_after * len(LEANING)) > before
        told = iso.search(LEANING[4], 2, mode="hybrid", explain=True).results[0].explain
        assert told is not None
        used = {name: row["weight"] for name, row in told["signals"].items()}
        assert used == {n: w for n, w in fit.weights.items() if w}
        # the weights setting still wins, signal by signal; a search's own weights too
        told = iso.search(LEANING[4], 2, mode="hybrid", explain=True,
                          weights={"chunks-bm25": 2.0}).results[0].explain
        assert told is not None and told["signals"]["chunks-bm25"]["weight"] == 2.0
        assert told["signals"]["atoms-dense"]["weight"] == fit.weights["atoms-dense"]
        kept = iso.fitted_weights()
        assert kept is not None and kept.weights == fit.weights
        copy_index(location, tmp_path / "copy")  # the fit goes with a copy
        with pytest.MonkeyPatch.context() as patch:
            patch.delenv("ISOTOPE_VECTOR_BACKEND", raising=False)  # (the copy's: usearch)
            with Isotope.open(tmp_path / "copy", embedder=embedder, llm=FakeLLM(),
                              cache=False) as copy:
                copied = copy.fitted_weights()
                assert copied is not None and copied.weights == fit.weights
        if "://" in location:
            assert iso.reset_weights() and not iso.reset_weights()
            assert sum(iso.search(q, 1, mode="hybrid").results[0].chunk.id == c
                       for q, c in wanted.items()) == before
            return

    runner = CliRunner()

    def run(*args: str) -> dict:  # type: ignore[type-arg]
        result = runner.invoke(app, [*args, "-i", location, "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)  # type: ignore[no-any-return]

    shown = run("weights")
    assert shown["weights"] == fit.weights and set(shown["from"].values()) == {"fitted"}
    assert run("weights", "fit", "--min-marks", "10")["adopted"] is False  # nothing to gain
    refused = runner.invoke(app, ["weights", "fit", "-i", location])
    assert refused.exit_code != 0 and "at least 50" in refused.output
    assert run("weights", "reset") == {"reset": True}
    shown = run("weights")
    assert shown["fit"] is None and "fitted" not in shown["from"].values()
    with Isotope.open(location, embedder=embedder, llm=FakeLLM(), cache=False) as iso:
        assert sum(iso.search(q, 1, mode="hybrid").results[0].chunk.id == c
                   for q, c in wanted.items()) == before
    helped = runner.invoke(app, ["weights", "--help"])
    assert helped.exit_code == 0 and "fit" in helped.output


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL")
def test_a_repair_killed_midway_keeps_every_learned_and_manual_question(
        tmp_path: Path, embedder: Embedder) -> None:
    """`isotope check --repair` (keyword indexes and every kind's vectors rebuilt) in
    another process, killed at random moments: each learned and manual question is still
    there exactly once, and a repair run to the end finds them by their words."""
    import random
    import signal
    import subprocess
    import sys

    from test_reliability import TOPICS, _corpus

    corpus = _corpus(tmp_path / "corpus")
    index = tmp_path / "index"

    with _killed_index(index, embedder) as iso:
        iso.ingest(corpus)
        _learn_first_chunks(iso, TOPICS)
        iso.add_question(str(corpus / f"{TOPICS[0]}.md"), "who signs the night crew's rota",
                         chunk=0)

    def kept(iso: Isotope) -> dict[str, list[str]]:
        return {topic: sorted(q.text for q in iso.questions(str(corpus / f"{topic}.md"))
                              if q.origin != "generated") for topic in TOPICS}

    expected = {topic: [_asked(topic)] for topic in TOPICS}
    expected[TOPICS[0]] = sorted([_asked(TOPICS[0]), "who signs the night crew's rota"])
    rng = random.Random(5)
    for run in range(4):
        worker = subprocess.Popen([sys.executable, "-m", "isotope", "check", "--repair",
                                   "-i", str(index)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.5, 3.0))  # (the command starts in about a second)
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        with _killed_index(index, embedder) as iso:
            assert kept(iso) == expected, f"run {run}"
    with _killed_index(index, embedder) as iso:
        iso.repair()
        assert iso.check() == []
        assert kept(iso) == expected
        for topic in TOPICS:
            found = iso.search(_asked(topic), k=1, mode="questions-dense")
            assert found.results[0].chunk.source.endswith(f"{topic}.md"), topic


@pytest.mark.parametrize("odd", ["\x1b[2J", "\x07", "\u2028", "\u202e", "\u200f", "\u200b",
                                 "\ufeff"])
def test_one_check_for_learned_and_hand_written_questions(logged: Isotope, odd: str) -> None:
    """Learned questions skipped the hand-written questions' check (an escape, a bell, a
    line separator, a right-to-left override were stored once approved), and that check
    let line separators, zero width spaces and right-to-left marks through (issue 42)."""
    iso = logged
    target = _chunk_of(iso, "lighthouse")
    query = f"who tended the {odd}beacon before the machines"
    found = iso.search(query, k=4, mode="questions-dense")
    assert target in [r.chunk.id for r in found.results]
    done = iso.feedback(found.query_id or "", target)  # (learn = auto: the owner's mark)
    assert done.learned is None and done.question_id is None
    assert not [q for q in iso.questions(chunk_id=target) if q.origin == "user"]
    with pytest.raises(InvalidArgument, match="control characters"):
        iso.add_question(target, query, chunk_id=target)
    joined = "which keeper\u200c tended the beacon"  # (a zero width non-joiner: Persian)
    assert iso.add_question(target, joined, chunk_id=target)


def test_the_fit_reads_only_marks_that_were_learned_or_approved(
        location: str, tmp_path: Path, embedder: Embedder) -> None:
    """60 marks of one read key, all rejected, set every other signal's weight to 0 for
    everyone (issue 42, item 8): a fit reads the marks learned or approved (a user's
    pending, rejected or never learned marks are left out, and say so), no user's beyond
    a quarter, and sets no weight to 0 without ``allow_zero``; eval --from-log the same."""
    from isotope.search import evaluation

    with Isotope.open(location, embedder=embedder, llm=FakeLLM(), cache=False,
                      query_log=True, learn="review") as iso:
        iso.ingest(_docs(tmp_path / "docs"))
        names = []
        for query in LEANING:
            found = iso.search(query, 4, mode="hybrid", principal="user:eve")
            chunk = iso.search(query, 1, mode="chunks-dense").results[0].chunk.id
            assert iso.feedback(found.query_id or "", chunk,
                                principal="user:eve").learned == "pending"
            names.append(f"{found.query_id}:{chunk}")
        with pytest.raises(InvalidArgument, match=r"0 useful mark\(s\) to fit on \(12 left"):
            iso.fit_weights(min_marks=10)
        assert evaluation.from_log(iso) == ([], [])
        iso.review_questions(names, approve=False)
        with pytest.raises(InvalidArgument, match=r"0 useful mark\(s\) to fit on \(12 left"):
            iso.fit_weights(min_marks=10)
        assert iso.fitted_weights() is None
        for query in LEANING:  # approved this time: a quarter of them at most, 10 at least
            found = iso.search(query + " again", 4, mode="hybrid", principal="user:eve")
            chunk = iso.search(query, 1, mode="chunks-dense").results[0].chunk.id
            iso.feedback(found.query_id or "", chunk, principal="user:eve")
            iso.review_questions([f"{found.query_id}:{chunk}"], approve=True)
        fit = iso.fit_weights(min_marks=10)
        assert fit.marks == 10 and fit.left_out == 14
        assert all(fit.weights[n] > 0 for n, w in fit.before.items() if w > 0)
        assert len(evaluation.from_log(iso)[1]) == 10
        # marks that would place first only with a signal off (as the 60 rejected marks
        # did): the walk keeps every weight above 0 unless told otherwise
        import isotope.search.weights as weight_fit

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(weight_fit, "_first", lambda cases, weights, fusion: len(cases) * (
                weights.get("chunks-bm25") == 0))
            kept = iso.fit_weights(min_marks=10)
            assert not kept.adopted and kept.weights["chunks-bm25"] > 0
            off = iso.fit_weights(min_marks=10, allow_zero=True)
            assert off.adopted and off.weights["chunks-bm25"] == 0


def test_a_mark_on_a_chunk_waiting_for_questions_is_learned_when_they_come(
        location: str, tmp_path: Path, embedder: Embedder) -> None:
    """With ``--questions later`` a useful mark said "the query waits for review" under
    ``learn = auto`` (issue 42, item 12): it waits for the chunk's questions, says so,
    and is learned when an enrichment gives them."""
    with Isotope.open(location, embedder=embedder, llm=FakeLLM(), cache=False,
                      query_log=True) as iso:
        iso.ingest(_docs(tmp_path / "docs"), questions="later")
        found = iso.search(ASKED, k=4, mode="chunks-dense")
        target = next(r.chunk.id for r in found.results
                      if r.chunk.source.endswith("lighthouse.md"))
        done = iso.feedback(found.query_id or "", target)
        assert done.learned == "waiting" and not iso.pending_questions()
        iso.enrich()
        [mark] = iso.store.feedback(query_id=found.query_id)
        assert mark.learn == "learned"
        assert ASKED in [q.text for q in iso.questions(chunk_id=target) if q.origin == "user"]


def test_a_mark_on_a_chunk_the_asker_may_no_longer_see_is_not_found(
        tmp_path: Path, embedder: Embedder) -> None:
    """A user's search returned a chunk; its source was then given a list that leaves the
    user out. A mark on it (useful: a question learned for everyone; not useful: its
    query kept) must not reach it: the same "not found" as a chunk that is not there."""
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM(), cache=False,
                      query_log=True, access_control=True, learn="auto") as iso:
        iso.ingest(_docs(tmp_path / "docs"), allow=["public"])
        bob = Principal("bob")
        found = iso.search(ASKED, k=4, principal=bob)
        target = _chunk_of(iso, "lighthouse")
        assert target in [r.chunk.id for r in found.results]
        source = iso.store.get_chunks([target])[target].source
        iso.set_access(source, ["group:keepers"])
        for useful in (True, False):
            with pytest.raises(SourceNotFound, match="no chunk"):
                iso.feedback(found.query_id or "", target, useful=useful, principal=bob)
        assert iso.store.feedback(query_id=found.query_id) == []
        assert ASKED not in [q.text for q in iso.questions(chunk_id=target)]
