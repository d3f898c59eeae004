"""The HTTP API of ``isotope serve`` over a real index (the real SQLite store and
embedder, the fake model at the provider boundary): endpoints, API keys, hostile uploads,
errors as JSON; and ``isotope.Client`` against a real uvicorn server on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from isotope import Client, Isotope
from isotope.cli import app as cli
from isotope.errors import InvalidArgument, SourceNotFound
from isotope.settings import Settings

from conftest import served_on_loopback

fastapi = pytest.importorskip("fastapi", reason="pip install 'isotopedb[server]'")
from fastapi.testclient import TestClient  # noqa: E402

from isotope.server.app import create_app  # noqa: E402
from isotope.server.auth import Keys  # noqa: E402
from isotope.server.routes_sources import safe_name  # noqa: E402

WRITE_KEY = "w" * 24
READ_KEY = "r" * 24


@pytest.fixture
def served(iso: Isotope, examples: Path, tmp_path: Path) -> Iterator[TestClient]:
    iso.ingest(examples)
    roots = [examples.resolve()]
    application = create_app(iso, keys=Keys(), roots=roots, max_bytes=2_000_000,
                             uploads=tmp_path / "uploads")
    with TestClient(application, base_url="http://127.0.0.1") as client:
        yield client


@pytest.fixture
def guarded(iso: Isotope, examples: Path, tmp_path: Path) -> Iterator[TestClient]:
    iso.ingest(examples)
    keys = Keys.from_settings(Settings(api_keys=[WRITE_KEY, f"{READ_KEY}:read"]))
    application = create_app(iso, keys=keys, roots=[], max_bytes=2_000_000,
                             uploads=tmp_path / "uploads")
    with TestClient(application, base_url="http://127.0.0.1") as client:
        yield client


def test_search_returns_what_query_raw_json_prints(served: TestClient, iso: Isotope,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    reply = served.post("/search", json={"query": "How many vacation days do new employees "
                                                  "get?", "k": 3})
    assert reply.status_code == 200
    body = reply.json()
    assert Path(body["results"][0]["chunk"]["source"]).name == "handbook.md"
    assert body["results"][0]["matched_questions"] and body["suggested_action"]
    expected = iso.search("How many vacation days do new employees get?", 3)
    assert [r["chunk"]["id"] for r in body["results"]] == [r.chunk.id for r in
                                                            expected.results]
    assert set(body) == set(expected.model_dump(mode="json"))  # one schema for both
    filtered = served.post("/search", json={"query": "battery", "filters": {"type": "pdf"}})
    assert {Path(r["chunk"]["source"]).name for r in filtered.json()["results"]} == {
        "battery-safety.pdf"}


def test_ask_answers_with_citations_and_streams(served: TestClient, iso: Isotope,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    searches = []
    search = iso.search
    monkeypatch.setattr(iso, "search", lambda *a, **kw: searches.append(a) or search(*a, **kw))
    body = served.post("/ask", json={"query": "How many vacation days do new employees "
                                              "get?"}).json()
    assert body["answer"] and body["citations"] == [1]
    with served.stream("POST", "/ask", json={"query": "How long does the Orbit R2 battery "
                                                      "last?", "stream": True}) as reply:
        assert reply.headers["content-type"].startswith("text/event-stream")
        text = "".join(reply.iter_text())
    events = [block.split("\n")[0] for block in text.strip().split("\n\n")]
    assert events[0] == "event: results" and events[-2:] == ["event: answer", "event: done"]
    assert events[1:-2] and set(events[1:-2]) == {"event: token"}  # the reply as it came
    tokens = "".join(json.loads(block.split("data: ", 1)[1])["text"]
                     for block in text.strip().split("\n\n")
                     if block.startswith("event: token"))
    answer = json.loads(text.split("event: answer\ndata: ")[1].split("\n")[0])
    assert answer["answer"] and answer["citations"] and answer["answer_kind"] == "generated"
    assert answer["answer"] in tokens
    assert len(searches) == 2  # one per request: the stream answers from the results it sent
    sent = json.loads(text.split("event: results\ndata: ")[1].split("\n")[0])
    assert all(n <= len(sent["results"]) for n in answer["citations"])


def test_sources_status_questions_and_delete(served: TestClient) -> None:
    listed = served.get("/sources").json()
    assert {Path(s["uri"]).name for s in listed} == {
        "handbook.md", "faq.html", "release-notes.txt", "battery-safety.pdf"}
    assert served.get("/status").json()["counts"]["sources"] == 4
    chunk = served.post("/search", json={"query": "vacation days"}).json()["results"][0]
    questions = served.get(f"/chunks/{chunk['chunk']['id']}/questions").json()
    assert questions["questions"] and all(q["atom"] in chunk["chunk"]["text"]
                                          for q in questions["questions"])
    kept = [q for q in questions["questions"] if q["kept"]]
    dropped = [q for q in questions["questions"] if not q["kept"]]
    assert kept and all(q["reason"] == "" for q in kept)
    # the fake model also asks a pronoun-only question per atom: shown, with why
    assert dropped and all(q["reason"] for q in dropped)
    assert any(q["text"] == "What did it do?" and q["reason"].startswith("pronoun only")
               for q in dropped)
    assert {m["text"] for m in chunk["matched_questions"]} <= {q["text"] for q in kept}
    assert served.get("/chunks/nope/questions").status_code == 404
    faq = next(s["uri"] for s in listed if s["uri"].endswith("faq.html"))
    assert served.delete(f"/sources{faq}").status_code == 204
    assert served.delete(f"/sources{faq}").status_code == 404
    assert len(served.get("/sources").json()) == 3


def test_upload_ingests_and_hostile_names_stay_in_the_upload_folder(
        served: TestClient, tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("# Secret\n\nThe vault code is 1234.\n")
    uploads = tmp_path / "uploads"
    (uploads / "linked.md").symlink_to(outside)  # a link planted in the upload folder
    names = ["../escape.md", "/etc/passwd.md", "..\\..\\win.md", "linked.md", "ok notes.md"]
    files = [("files", (name, f"# Note\n\nThe office plant {n} needs water on Fridays.\n"
                        .encode(), "text/markdown")) for n, name in enumerate(names)]
    reply = served.post("/ingest", files=files)
    assert reply.status_code == 200, reply.text
    assert reply.json()["ok"] and len(reply.json()["added"]) == 5
    assert outside.read_text().startswith("# Secret")  # the link was replaced, not followed
    assert not (tmp_path / "escape.md").exists() and not Path("/etc/passwd.md").exists()
    assert sorted(p.name for p in uploads.iterdir()) == sorted(
        ["escape.md", "passwd.md", "win.md", "linked.md", "ok notes.md"])
    assert all(Path(s["uri"]).parent == uploads.resolve() or s["uri"].endswith(
        (".html", ".pdf", ".txt")) or "docs" in s["uri"] for s in served.get("/sources").json())
    for bad in ("..", ""):
        assert served.post("/ingest", files=[("files", (bad, b"x", "text/plain"))]
                           ).status_code in (400, 422)
    odd = served.post("/ingest", files=[("files", ("\x00", b"x", "text/plain"))]).json()
    assert not odd["added"] and "unsupported" in json.dumps(odd)


def test_safe_names() -> None:
    assert safe_name("../../etc/passwd") == "passwd"
    assert safe_name("C:\\Users\\me\\notes.md") == "notes.md"
    assert safe_name("a\x1b[31mb.md") == "a__31mb.md"
    with pytest.raises(Exception, match="no usable file name"):
        safe_name("..")


def test_sync_only_below_the_roots(served: TestClient, examples: Path, tmp_path: Path
                                   ) -> None:
    (examples / "release-notes.txt").unlink()
    reply = served.post("/sync", json={"paths": [str(examples)]})
    assert reply.status_code == 200, reply.text
    assert [Path(p).name for p in reply.json()["removed"]] == ["release-notes.txt"]
    assert served.post("/sync", json={"paths": ["\x00"]}).status_code == 400  # fuzz find
    for outside in (str(tmp_path), "/etc", str(examples / ".." / "..")):
        refused = served.post("/sync", json={"paths": [outside]})
        assert refused.status_code == 403 and "serve_roots" in refused.json()["error"]


def test_errors_are_json_with_the_right_status(served: TestClient) -> None:
    assert served.post("/search", json={"query": ""}).status_code == 422
    bad_mode = served.post("/search", json={"query": "x", "mode": "nope"})
    assert bad_mode.status_code == 400 and "choose from" in bad_mode.json()["error"]
    bad_filter = served.post("/search", json={"query": "x", "filters": {"k": {"zz": 1}}})
    assert bad_filter.status_code == 400 and "unknown operator" in bad_filter.json()["error"]
    assert served.post("/search", content=b"{not json", headers={
        "content-type": "application/json"}).status_code == 422
    huge = served.post("/search", content=b"x" * 3_000_000,
                       headers={"content-type": "application/json"})
    assert huge.status_code == 413 and "max_upload_mb" in huge.json()["error"]
    assert "Traceback" not in bad_mode.text


def test_api_keys(guarded: TestClient) -> None:
    query = {"query": "vacation days"}
    assert guarded.get("/health").status_code == 200  # open
    missing = guarded.post("/search", json=query)
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    wrong = guarded.post("/search", json=query, headers={"Authorization": "Bearer " + "x" * 24})
    assert wrong.status_code == 401
    read = {"Authorization": f"Bearer {READ_KEY}"}
    assert guarded.post("/search", json=query, headers=read).status_code == 200
    assert guarded.get("/sources", headers=read).status_code == 200
    denied = guarded.delete("/sources/anything.md", headers=read)
    assert denied.status_code == 403 and "only read" in denied.json()["error"]
    in_url = guarded.post(f"/search?api_key={WRITE_KEY}", json=query)
    assert in_url.status_code == 400 and "Authorization header" in in_url.json()["error"]
    write = {"Authorization": f"Bearer {WRITE_KEY}"}
    assert guarded.delete("/sources/nothing.md", headers=write).status_code == 404


def test_keys_are_compared_in_constant_time_and_validated(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hmac

    from isotope.errors import SettingsError

    keys = Keys.from_settings(Settings(api_keys=["a" * 20, "b" * 20 + ":read", "c" * 20]))
    compared: list[bytes] = []
    real = hmac.compare_digest

    def counting(given: bytes, key: bytes) -> bool:
        compared.append(key)
        return real(given, key)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    for presented in ("a" * 20, "c" * 20, "nothing-like-a-key-at-all", ""):
        compared.clear()
        keys.scope(presented)  # every key is compared, wherever the match is (or none)
        assert compared == [b"a" * 20, b"b" * 20, b"c" * 20], presented
    monkeypatch.undo()
    quoted = Keys.from_settings(Settings(api_keys=["it's-a-key-with-quotes'"]))
    assert quoted.scope("it's-a-key-with-quotes'") == "write"
    for bad in ("control\x01characters-here", "tab\tinside-the-key-here", "ключ-ключ-ключ-ключ"):
        with pytest.raises(SettingsError, match="printable"):
            Keys.from_settings(Settings(api_keys=[bad]))
    keys_file = tmp_path / "keys"
    keys_file.write_text(f"# team keys\n{WRITE_KEY}\n{READ_KEY} read\n")
    keys = Keys.from_settings(Settings(api_keys_file=keys_file))
    assert keys.scope(WRITE_KEY) == "write" and keys.scope(READ_KEY) == "read"
    assert keys.scope(WRITE_KEY[:-1]) is None and keys.scope("") is None
    with pytest.raises(SettingsError, match="at least 16"):
        Keys.from_settings(Settings(api_keys=["short"]))
    with pytest.raises(SettingsError, match="cannot be read"):
        Keys.from_settings(Settings(api_keys_file=tmp_path / "none"))


def test_client_moves_code_from_embedded_to_served_by_one_line(
        iso: Isotope, examples: Path, tmp_path: Path) -> None:
    iso.ingest(examples)
    keys = Keys.from_settings(Settings(api_keys=[WRITE_KEY]))
    with served_on_loopback(create_app(iso, keys=keys, roots=[], max_bytes=1_000_000,
                                       uploads=tmp_path / "up")) as url:
        remote = Client(url, api_key=WRITE_KEY)
        query = "How long does the Orbit R2 battery last?"
        here, there = iso.search(query, 3), remote.search(query, 3)
        assert type(here) is type(there)
        assert [r.chunk.id for r in there.results] == [r.chunk.id for r in here.results]
        assert remote.ask(query).citations
        # the same types as Isotope's
        assert [type(s) for s in remote.sources()] == [type(s) for s in iso.sources()]
        assert sorted(s.source.uri for s in remote.sources()) == sorted(
            s.source.uri for s in iso.sources())
        assert remote.status().counts == iso.status().counts
        with pytest.raises(SourceNotFound):
            remote.delete("nothing.md")
        with pytest.raises(InvalidArgument, match="k = 0"):
            remote.search(query, 0)
        found = remote.search(query, 2)
        answered = remote.answer(found)
        assert answered.answer and answered.citations and answered.answer_kind == "generated"
        retriever = remote.as_retriever(2)
        assert [r.chunk.id for r in retriever(query)] == [r.chunk.id for r in found.results]
        chunk_id = found.results[0].chunk.id
        assert [q.text for q in remote.questions(chunk_id=chunk_id)] == [
            q.text for q in iso.questions(chunk_id=chunk_id)]
        note = tmp_path / "plants.md"
        note.write_text("# Plants\n\nThe office fern is watered every Friday by Ada.\n")
        report = remote.ingest(note)
        assert report.ok and len(report.added) == 1
        assert "plants.md" in remote.search("Who waters the fern?", 1).results[0].chunk.source
        with pytest.raises(Exception, match="HTTP 401"):
            Client(url).search(query)
    with pytest.raises(Exception, match="cannot reach"):
        Client(url).search("x")


def test_serve_refuses_other_hosts_without_a_key(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["serve", "--index", str(tmp_path / "i"), "--create",
                                      "--host", "0.0.0.0"])
    assert result.exit_code == 1 and "without an API key" in result.output
    typo = CliRunner().invoke(cli, ["serve", "--index", str(tmp_path / "typo-idx")])
    assert typo.exit_code == 1 and "no index at" in typo.output  # not served empty
    assert not (tmp_path / "typo-idx").exists()
    over_stdio = CliRunner().invoke(cli, ["mcp", "--index", str(tmp_path / "typo-idx")])
    assert over_stdio.exit_code == 1 and "no index at" in over_stdio.output
    assert not (tmp_path / "typo-idx").exists()


def test_search_never_runs_on_the_event_loop(served: TestClient, iso: Isotope,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio
    import threading

    routes = [inner for r in served.app.routes  # type: ignore[attr-defined]
              for inner in getattr(getattr(r, "original_router", None), "routes", [r])]
    endpoints = {(r.path, m): r.endpoint for r in routes  # (a router's own, included)
                 if hasattr(r, "endpoint") for m in getattr(r, "methods", ())}
    for path in ("/sources", "/status"):
        assert not asyncio.iscoroutinefunction(endpoints[path, "GET"]), path  # thread pool
    where: list[str] = []
    search, answer = iso.search, iso.answer

    def searched(*args: object, **kwargs: object) -> object:
        where.append(threading.current_thread().name)
        return search(*args, **kwargs)  # type: ignore[arg-type]

    def answered(*args: object, **kwargs: object) -> object:
        where.append(threading.current_thread().name)
        return answer(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(iso, "search", searched)
    monkeypatch.setattr(iso, "answer", answered)
    assert served.post("/search", json={"query": "vacation days"}).status_code == 200
    assert served.post("/ask", json={"query": "vacation days"}).status_code == 200
    assert len(where) == 3 and all(w.startswith("AnyIO worker thread") for w in where), where



def test_workers_share_one_port_and_a_second_server_is_refused(
        iso: Isotope, tmp_path: Path) -> None:
    """`isotope serve --workers 2`: the parent deals connections to the workers in turn,
    so 8 keep-alive clients arriving together are served 4 and 4 (a socket per worker let
    the kernel's hash split them 7:1), and another server on the same port is an error
    rather than a silent partner."""
    import os
    import socket
    import subprocess
    import sys
    import time

    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    index = str(iso.settings.index)
    iso.close()
    command = [sys.executable, "-m", "isotope", "serve", "--index", index, "--port", str(port)]
    server = subprocess.Popen([*command, "--workers", "2"], env=os.environ.copy(),
                              stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        seen: set[int] = set()
        deadline = time.monotonic() + 90
        while len(seen) < 2 and time.monotonic() < deadline:
            try:
                with httpx.Client(base_url=url, timeout=5) as http:  # a new connection
                    seen.add(http.get("/health").json()["process"])
            except httpx.HTTPError:
                time.sleep(0.3)
        assert len(seen) == 2, seen
        assert server.pid not in seen  # the processes serving are the workers
        for _ in range(3):
            clients = [httpx.Client(base_url=url, timeout=5) for _ in range(8)]
            try:
                served = [c.get("/health").json()["process"] for c in clients]
                again = [c.get("/health").json()["process"] for c in clients]
            finally:
                for c in clients:
                    c.close()
            assert served == again  # keep-alive: each client stays with its worker
            assert sorted(served.count(p) for p in set(served)) == [4, 4], served
        second = subprocess.run([*command, "--workers", "2"], capture_output=True, text=True,
                                env=os.environ.copy(), timeout=120)
        assert second.returncode == 1
        assert f"cannot listen on 127.0.0.1:{port}" in second.stderr
        assert "serving" not in second.stderr  # said only once the port is ours
        assert "in use" in second.stderr
    finally:
        server.send_signal(__import__("signal").SIGINT)
        server.wait(timeout=30)
    assert server.returncode == 0
