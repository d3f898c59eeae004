"""The OpenAI-compatible provider against a real HTTP server on 127.0.0.1 that speaks the
OpenAI protocol and injects faults (tests/openai_server.py); the client is not mocked."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest

from isotope import Isotope
from isotope.embedders import Embedder
from isotope.providers import create, messages
from isotope.providers.openai import ProviderAuthError
from isotope.providers.ratelimit import RateLimiter
from isotope.settings import Settings

from openai_server import Script, serve

DOC = "The cafeteria opens at eight in the morning. The gym closes at ten in the evening."


def _rooms(tmp_path: Path, count: int) -> Path:
    """A folder of ``count`` one-sentence files."""
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(count):
        (folder / f"room{i}.txt").write_text(f"Room {i} of the library has {i + 2} desks.")
    return folder


def _open(tmp_path: Path, embedder: Embedder, url: str, **settings: object) -> Isotope:
    return Isotope.open(tmp_path / "idx", embedder=embedder,
                        question_model=f"openai/test-model@{url}",
                        **{"llm_timeout": 1, "llm_max_retries": 3, "cache": False, **settings})


@pytest.mark.parametrize("fault", ["429", "500", "503", "slow"])
def test_transient_faults_are_retried(tmp_path: Path, embedder: Embedder, fault: str) -> None:
    script = Script(faults=[fault, fault])
    with serve(script) as url, _open(tmp_path, embedder, url) as iso:
        report = iso.ingest_chunks([DOC], source="campus")
        assert report.ok and not report.failed_atoms
        assert report.questions > 0
        assert len(script.requests) == report.atoms + 2  # two failed attempts, then success
        assert report.prompt_tokens == 50 * report.llm_calls


def test_retry_after_is_honoured(tmp_path: Path, embedder: Embedder) -> None:
    script = Script(faults=["429-retry-after"])
    with serve(script) as url, _open(tmp_path, embedder, url, llm_concurrency=1) as iso:
        started = time.monotonic()
        report = iso.ingest_chunks([DOC], source="campus")
        assert time.monotonic() - started >= 1.0
        assert report.ok and not report.failed_atoms


def test_authentication_errors_fail_fast_naming_the_setting(
    tmp_path: Path, embedder: Embedder
) -> None:
    script = Script(faults=["401"] * 10)
    with serve(script) as url, _open(tmp_path, embedder, url, llm_concurrency=1) as iso:
        with pytest.raises(ProviderAuthError, match="ISOTOPE_OPENAI_API_KEY"):
            iso.ingest_chunks([DOC], source="campus")
        assert len(script.requests) == 1
        # the source was stored and is searchable; its chunk waits for its questions
        counts = iso.status().counts
        assert counts["sources"] == 1 and counts["chunks_waiting"] == counts["chunks"] > 0


def test_a_malformed_reply_is_repaired_then_given_up(tmp_path: Path, embedder: Embedder) -> None:
    script = Script(faults=["malformed"])
    with serve(script) as url, _open(tmp_path, embedder, url, llm_concurrency=1) as iso:
        report = iso.ingest_chunks([DOC], source="campus")
        assert not report.failed_atoms
        repair = script.requests[-1]["messages"]
        assert repair[-2] == {"role": "assistant", "content": "Sure! Here is what you asked for."}
        assert "not in the requested format" in repair[-1]["content"]

    script = Script(fault_for=lambda user: "malformed" if "gym" in user else None)
    with serve(script) as url, _open(tmp_path / "b", embedder, url, max_repairs=2) as iso:
        report = iso.ingest_chunks([DOC], source="campus")
        assert len(report.failed_atoms) == 1 and "gym" in report.failed_atoms[0].message
        assert "after 3 tries" in report.failed_atoms[0].message
        gym = [r for r in script.requests if "gym" in r["messages"][1]["content"].split(
            "Statement:")[1]]
        assert len(gym) == 3  # the first try and two repairs
        assert report.questions > 0  # the cafeteria atom's questions are kept


def test_a_persistent_failure_lists_the_item_and_a_rerun_generates_only_it(
    tmp_path: Path, embedder: Embedder
) -> None:
    broken = {"on": True}
    script = Script(fault_for=lambda user: "503" if broken["on"] and "gym" in user else None)
    with serve(script) as url:
        iso = Isotope.open(tmp_path / "idx", embedder=embedder, llm_timeout=1,
                           question_model=f"openai/test-model@{url}", llm_max_retries=1)
        with iso:
            report = iso.ingest_chunks([DOC], source="campus")
            assert [f.message for f in report.failed_atoms] == [
                "atom 'The gym closes at ten in the evening.': the model call failed: "
                "openai:test-model@" + url + ": gave up after 2 attempts: HTTP 503"
            ]
            broken["on"] = False
            script.requests.clear()
            again = iso.ingest_chunks([DOC], source="campus")
            assert again.llm_calls == 1 and again.llm_cache_hits == 1
            assert len(script.requests) == 1
            assert "Statement: The gym" in script.requests[0]["messages"][1]["content"]
            assert not again.failed_atoms


def test_calls_run_concurrently_up_to_the_limit(tmp_path: Path, embedder: Embedder) -> None:
    script = Script(delay=0.3)
    rooms = [f"Room {i} of the library has {i + 2} desks." for i in range(12)]
    with serve(script) as url, _open(tmp_path, embedder, url, llm_concurrency=4) as iso:
        started = time.monotonic()
        report = iso.ingest_chunks(rooms, source="library")  # 12 chunks of one atom each
        elapsed = time.monotonic() - started
    assert report.llm_calls == 12
    assert script.max_in_flight == 4
    assert elapsed < 12 * 0.3  # faster than one at a time


def test_small_files_are_generated_together(tmp_path: Path, embedder: Embedder) -> None:
    """Many one-sentence files keep a remote model as busy as one large file: their calls
    run concurrently, and each file is still stored on its own."""
    script = Script(delay=0.3)
    folder = _rooms(tmp_path, 8)
    with serve(script) as url, _open(tmp_path, embedder, url, llm_concurrency=4) as iso:
        report = iso.ingest(folder)
        assert report.ok and len(report.added) == 8 and report.llm_calls == 8
        assert script.max_in_flight == 4
        assert sorted(Path(s.source.uri).name for s in iso.sources()) == [
            f"room{i}.txt" for i in range(8)]


def test_rate_limiter_paces_requests() -> None:
    limiter = RateLimiter(requests_per_minute=600)  # 10 per second

    async def run() -> float:
        started = time.monotonic()
        for _ in range(21):
            await limiter.acquire()
        return time.monotonic() - started

    # a second's worth (10) at once, then 11 more at 10 per second
    assert 1.0 <= asyncio.run(run()) < 3


def test_model_strings_pick_the_provider(tmp_path: Path) -> None:
    settings = Settings(openai_base_url="http://127.0.0.1:9/v1")
    chat = create("openai/gpt-4o-mini", settings)
    assert chat.model_id == "openai:gpt-4o-mini@http://127.0.0.1:9/v1"
    chat = create("openai/my-model@http://127.0.0.1:8000/v1", settings)
    assert chat.model_id == "openai:my-model@http://127.0.0.1:8000/v1"
    with pytest.raises(Exception, match="unknown language model"):
        create("nosuch/model", settings)


def test_the_async_api_works_inside_a_running_loop(tmp_path: Path) -> None:
    script = Script()
    with serve(script) as url:
        chat = create(f"openai/test-model@{url}", Settings())

        async def run() -> list[str]:
            sync_inside_loop = chat.complete(messages("s", "Statement: Sky is blue.\n"))
            return [sync_inside_loop, *await chat.acomplete_batch(
                [messages("s", "Statement: Grass is green.\n")])]

        replies = asyncio.run(run())
    assert "sky is blue" in replies[0].lower() and "grass is green" in replies[1].lower()


def test_litellm_is_an_optional_extra_named_in_the_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from isotope.errors import MissingDependency

    monkeypatch.setitem(sys.modules, "litellm", None)  # as if not installed
    with pytest.raises(MissingDependency, match=r"pip install 'isotopedb\[litellm\]'"):
        create("litellm/anthropic/claude-3-5-haiku-latest", Settings())


@pytest.mark.parametrize("floats", [False, True], ids=["base64", "numbers"])
def test_embeddings_from_an_openai_compatible_endpoint(tmp_path: Path, floats: bool) -> None:
    from isotope.errors import IsotopeError

    from conftest import FakeLLM
    from openai_server import EMBED_DIM

    script = Script(float_vectors=floats)  # (a server that ignores the format asked)
    with serve(script) as url:
        with pytest.raises(IsotopeError, match="ISOTOPE_EMBEDDING_DIM"):
            Isotope.open(tmp_path / "x", embedding_model=f"openai/test-embed@{url}")
        with Isotope.open(tmp_path / "idx", llm=FakeLLM(), embedding_dim=EMBED_DIM,
                          embedding_model=f"openai/test-embed@{url}") as iso:
            iso.ingest_chunks([DOC, "The library lends books for three weeks."],
                              source="campus")
            assert iso.status().embedding == {
                "model": f"openai/test-embed@{url}", "model_id": "openai:test-embed",
                "dim": EMBED_DIM}
            top = iso.search("When does the gym close in the evening?", k=1).results[0]
            assert "gym" in top.matched_questions[0].atom
        assert any(r.get("input") for r in script.requests)
        assert all(r.get("encoding_format") == "base64" for r in script.requests
                   if r.get("input"))


def test_the_model_server_is_kept_busy_while_questions_are_stored(
        tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a remote model, calls are issued as soon as a slot frees, across chunks, and
    go on while questions are embedded and stored: a first store that does not return
    until the server has seen every call does not stop them (the pipeline reads up to 8 x
    llm_concurrency atoms ahead; windows that waited for their store stopped at 24 calls
    here), and no more than llm_concurrency run at once."""
    from isotope.stores.sqlite import SQLiteStore

    script = Script(delay=0.1)
    received_at_store: list[int] = []
    original = SQLiteStore.add_questions

    def add_questions(self: SQLiteStore, done: list[object]) -> None:
        deadline = time.monotonic() + 10
        while not received_at_store and len(script.spans) < 32 and time.monotonic() < deadline:
            time.sleep(0.02)
        received_at_store.append(len(script.spans))
        original(self, done)  # type: ignore[arg-type]

    monkeypatch.setattr(SQLiteStore, "add_questions", add_questions)
    chunks = [f"Shelf {n} of the archive holds {n + 3} boxes." for n in range(32)]
    with serve(script) as url, _open(tmp_path, embedder, url, llm_concurrency=4) as iso:
        report = iso.ingest_chunks(chunks, source="archive")
        assert iso.status().counts["chunks_waiting"] == 0
    assert report.ok and report.questions > 0 and report.llm_calls == 32
    assert received_at_store[0] == 32, received_at_store
    assert script.max_in_flight == 4
    spans = sorted(script.spans)
    busy = sum(end - start for start, end in spans)
    assert busy / (max(end for _, end in spans) - spans[0][0]) >= 0.6 * 4


def test_replies_from_the_cache_do_not_stall_the_pipeline(tmp_path: Path,
                                                          embedder: Embedder) -> None:
    """A second index of the same text gets every reply from the cache (calls that end at
    once) and is enriched in full: a call that ends before it is handed over does not
    stop the others (it once waited forever on the pipeline's lock)."""
    import threading

    chunks = [f"Shelf {n} of the archive holds {n + 3} boxes." for n in range(40)]
    reports = []

    def ingest(name: str, url: str) -> None:
        with _open(tmp_path / name, embedder, url, llm_concurrency=4, cache=True,
                   cache_dir=tmp_path / "cache") as iso:
            reports.append(iso.ingest_chunks(chunks, source="archive"))
            assert iso.status().counts["chunks_waiting"] == 0

    with serve(Script()) as url:
        for name in ("first", "second"):
            worker = threading.Thread(target=ingest, args=(name, url), daemon=True)
            worker.start()
            worker.join(timeout=120)
            assert not worker.is_alive(), f"the {name} ingest stalled"
    first, second = reports
    assert first.llm_calls == 40 and second.llm_calls == 0
    assert second.llm_cache_hits == 40 and second.questions == first.questions > 0


def test_the_first_calls_start_while_later_files_are_still_stored(
        tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ingest of a folder with a remote model does not wait for every file to be read
    and embedded: the first file's calls run while the next files are stored, and their
    questions are stored too (after STORE_EVERY seconds, however few)."""
    from isotope.ingest import enrichment
    from isotope.stores.sqlite import SQLiteStore

    monkeypatch.setattr(enrichment, "STORE_EVERY", 0.1)
    script = Script(delay=0.05)
    events: list[tuple[str, int]] = []  # (what was stored, calls the server had seen)
    add, add_questions = SQLiteStore.add, SQLiteStore.add_questions

    def slow_add(self: SQLiteStore, batch: object) -> None:
        time.sleep(0.2)  # a slow first stage
        events.append(("file", len(script.requests)))
        add(self, batch)  # type: ignore[arg-type]

    def noted_add_questions(self: SQLiteStore, done: list[object]) -> None:
        events.append(("questions", len(script.requests)))
        add_questions(self, done)  # type: ignore[arg-type]

    monkeypatch.setattr(SQLiteStore, "add", slow_add)
    monkeypatch.setattr(SQLiteStore, "add_questions", noted_add_questions)
    folder = _rooms(tmp_path, 6)
    with serve(script) as url, _open(tmp_path, embedder, url, llm_concurrency=4) as iso:
        report = iso.ingest(folder)
        assert report.ok and len(report.added) == 6 and report.llm_calls == 6
        assert iso.status().counts["chunks_waiting"] == 0 and report.waiting_chunks == 0
    files = [seen for what, seen in events if what == "file"]
    assert files[0] == 0 and files[-1] >= 3, events
    last_file = max(i for i, (what, _) in enumerate(events) if what == "file")
    assert any(what == "questions" for what, _ in events[:last_file]), events


def test_a_server_that_is_down_is_not_hammered_and_enrich_resumes(
        tmp_path: Path, embedder: Embedder) -> None:
    """A model server answering only 503: the first call that gives up stops every other
    call (one line naming the server and `isotope enrich`), the sources stay stored with
    their chunks waiting, and `enrich` generates them once the server is back."""
    from isotope.providers.openai import ServerDown

    down = Script(fault_for=lambda statement: "503")
    chunks = [f"Shelf {n} holds the {w} boxes of the archive. The {w} boxes are blue."
              for n, w in enumerate(["red", "green", "tall", "small", "old", "new"])]
    with serve(down) as url, _open(tmp_path, embedder, url, llm_concurrency=2,
                                   llm_max_retries=1) as iso:
        with pytest.raises(ServerDown, match=r"not answering .*isotope enrich") as raised:
            iso.ingest_chunks(chunks, source="archive")
        assert "\n" not in str(raised.value) and url in str(raised.value)
        # 12 atoms: without the circuit, 24 requests (each atom tried twice); it opens
        # when a second call gives up
        assert len(down.requests) <= 8, len(down.requests)
        counts = iso.status().counts
        assert counts["sources"] == 1 and counts["chunks_waiting"] == counts["chunks"] == 6
    with serve(Script()) as url, _open(tmp_path, embedder, url, llm_concurrency=2) as iso:
        report = iso.enrich()
        assert report.questions > 0 and iso.status().counts["chunks_waiting"] == 0


@pytest.mark.parametrize("chunk_context", [False, True])
def test_a_server_down_mid_ingest_still_stores_every_file(
        tmp_path: Path, embedder: Embedder, chunk_context: bool) -> None:
    """The calls start while files are still read; when the server turns out to be down,
    the remaining files are still stored (searchable, their chunks waiting) before the
    ingest stops with the one line naming `isotope enrich`; with chunk_context, the files
    whose context the model could not write are stored without it."""
    from isotope.providers.openai import ServerDown

    folder = _rooms(tmp_path, 8)
    down = Script(fault_for=lambda statement: "503")
    with serve(down) as url, _open(tmp_path, embedder, url, llm_concurrency=2,
                                   llm_max_retries=1, chunk_context=chunk_context) as iso:
        with pytest.raises(ServerDown, match="isotope enrich"):
            iso.ingest(folder)
        counts = iso.status().counts
        assert counts["sources"] == 8 and counts["chunks_waiting"] == 8
        assert iso.search("How many desks does room 5 have?", k=1).results


def test_plain_progress_says_it_waits_for_the_model_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`isotope ingest --plain` against a slow model server prints a line while it waits
    for the model, instead of nothing."""
    from typer.testing import CliRunner

    from isotope.cli import app
    from isotope.ingest import enrichment

    monkeypatch.setattr(enrichment, "WAIT_EVERY", 0.2)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "campus.txt").write_text(DOC)
    with serve(Script(delay=1.0)) as url:
        monkeypatch.setenv("ISOTOPE_QUESTION_MODEL", f"openai/test-model@{url}")
        monkeypatch.setenv("ISOTOPE_CACHE", "false")
        done = CliRunner().invoke(app, ["ingest", str(tmp_path / "docs"), "--plain",
                                        "--index", str(tmp_path / "idx")])
    assert done.exit_code == 0, done.output
    assert "waiting for the model server (questions of " in done.stderr
    assert "campus.txt" in done.stderr
    # the summary says where the time went: mostly waiting for the model
    spent = re.search(r"time: the model (\d+\.\d) s", done.stdout)
    assert spent and float(spent.group(1)) >= 1.0, done.stdout


def test_one_slow_prompt_is_not_a_server_that_is_down(tmp_path: Path,
                                                      embedder: Embedder) -> None:
    """A prompt that times out on every try, one call at a time, fails alone (its chunk
    waits); the others get their questions: a slow reply is not a server that is down."""
    script = Script(fault_for=lambda statement: "slow" if "gym" in statement else None)
    with serve(script) as url, _open(tmp_path, embedder, url, llm_concurrency=1,
                                     llm_max_retries=1) as iso:
        report = iso.ingest_chunks([DOC, "The pool opens at noon. The sauna is hot."],
                                   source="campus")
        assert [f.message.split(":")[0] for f in report.failed_atoms] == [
            "atom 'The gym closes at ten in the evening.'"]
        assert report.questions > 0 and iso.status().counts["chunks_waiting"] == 1


def test_a_closed_model_works_again_on_its_next_call() -> None:
    """close() ends the endpoint's client and loop; the next batch (more prompts than
    slots, so they wait for one) makes new ones."""
    script = Script(delay=0.05)
    with serve(script) as url:
        llm = create(f"openai/test-model@{url}", Settings(llm_concurrency=1))
        prompts = [messages("system", f"Statement: Room {n} has desks.") for n in range(3)]
        assert len(llm.complete_batch(prompts)) == 3
        llm.close()
        assert len(llm.complete_batch(prompts)) == 3
        llm.close()
    assert len(script.requests) == 6


def test_the_answer_check_reads_the_endpoint_s_log_probabilities() -> None:
    """An endpoint's ``top_logprobs`` give the answer check its P(yes) (one token asked
    for); one that refuses log-probabilities (HTTP 400) gives None, and is not asked
    again: answers are then judged by their words."""
    prompt = messages("You check answers. Reply yes or no.", "Is 9 hours said? yes or no?")
    script = Script(yes=0.8)
    with serve(script) as url:
        llm = create(f"openai/test-model@{url}", Settings(openai_api_key="k"))
        assert llm.yes_probability(prompt) == pytest.approx(0.8, abs=1e-6)
        asked = script.requests[-1]
        assert asked["logprobs"] is True and asked["max_tokens"] == 1
        assert asked["top_logprobs"] >= 5
        script.yes = None
        assert llm.yes_probability(prompt) is None
        count = len(script.requests)
        assert llm.yes_probability(prompt) is None and len(script.requests) == count
        llm.close()
