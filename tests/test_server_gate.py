"""``isotope serve`` attacked as a browser page and a hostile client would (issue 24): the
Host and Origin checks, the key checked before a body is read, bodies over the limit or
stalled, the server's own writes queued, failed uploads not kept, an abandoned answer
stopped, errors in one form, /docs offline, unambiguous deletes. A real uvicorn server on
loopback over a real index (the fake model at the provider boundary)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from isotope import Isotope
from isotope.providers import LLM, Prompt
from isotope.settings import Settings

from conftest import FakeLLM, served_on_loopback

pytest.importorskip("fastapi", reason="pip install 'isotopedb[server]'")
httpx = pytest.importorskip("httpx")

from isotope.server.app import create_app  # noqa: E402
from isotope.server.auth import Keys  # noqa: E402

WRITE_KEY = "w" * 24
READ_KEY = "r" * 24
NOTE = ("note.md", b"# Note\n\nThe office plant needs water on Fridays.\n", "text/markdown")


def _serve(iso: Isotope, tmp_path: Path, **options: Any) -> Any:
    settings = {"keys": Keys(), "roots": [], "max_bytes": 1_000_000,
                "uploads": tmp_path / "uploads", **options}
    return served_on_loopback(create_app(iso, **settings))


@pytest.fixture
def keyless(iso: Isotope, examples: Path, tmp_path: Path) -> Iterator[str]:
    iso.ingest(examples / "handbook.md")
    with _serve(iso, tmp_path) as url:
        yield url


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def test_another_host_is_refused_on_every_route(keyless: str) -> None:
    """DNS rebinding: a page's own name resolving to 127.0.0.1 reaches the server with
    that name in Host."""
    port = _port(keyless)
    for host in (f"attacker.example:{port}", "attacker.example", f"127.0.0.1.nip.io:{port}"):
        for method, path, body in (("GET", "/sources", None), ("GET", "/status", None),
                                   ("POST", "/search", {"query": "vacation"}),
                                   ("GET", "/", None), ("POST", "/mcp/", {})):
            reply = httpx.request(method, keyless + path, json=body, headers={"Host": host})
            assert reply.status_code == 421, (host, path, reply.text)
            assert "allowed_hosts" in reply.json()["error"]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost"):
        assert httpx.get(keyless + "/sources", headers={"Host": host}).status_code == 200


def test_a_named_host_is_answered_when_allowed(iso: Isotope, tmp_path: Path) -> None:
    with _serve(iso, tmp_path, allowed_hosts=["search.example.com"]) as url:
        port = _port(url)
        assert httpx.get(url + "/health", headers={"Host": f"search.example.com:{port}"}
                         ).status_code == 200
        assert httpx.get(url + "/health", headers={"Host": "other.example.com"}
                         ).status_code == 421


@pytest.mark.parametrize("headers", [
    {"Origin": "http://localhost:18050"},
    {"Origin": "null"},
    {"Origin": "http://127.0.0.1:1"},
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},  # localhost:18050 -> localhost:PORT is "same-site"
])
def test_a_page_of_another_origin_cannot_write_nor_read_a_keyless_server(
        keyless: str, tmp_path: Path, headers: dict[str, str]) -> None:
    files = {"files": ("handbook.md", b"# Replaced\n\nEvil text replaces the handbook.\n",
                       "text/markdown")}
    refused = httpx.post(keyless + "/ingest", files=files, headers=headers)
    assert refused.status_code == 403 and "another site" in refused.json()["error"]
    assert not (tmp_path / "uploads" / "handbook.md").exists()
    for method, path in (("GET", "/sources"), ("POST", "/search"), ("DELETE", "/sources")):
        reply = httpx.request(method, keyless + path, headers=headers,
                              json={"query": "vacation"} if method == "POST" else None)
        assert reply.status_code == 403, (path, reply.text)
    # the server's own page (same origin) and programs (no Origin) keep working
    same = {"Origin": keyless, "Sec-Fetch-Site": "same-origin"}
    assert httpx.post(keyless + "/search", json={"query": "vacation"}, headers=same
                      ).status_code == 200
    assert httpx.get(keyless + "/sources").status_code == 200


def test_with_keys_a_foreign_origin_cannot_write_even_with_a_key(
        iso: Isotope, tmp_path: Path) -> None:
    keys = Keys.from_settings(Settings(api_keys=[WRITE_KEY]))
    with _serve(iso, tmp_path, keys=keys, allowed_origins=["https://app.example.com"]) as url:
        write = {"Authorization": f"Bearer {WRITE_KEY}"}
        foreign = httpx.post(url + "/ingest", files={"files": NOTE},
                             headers={**write, "Origin": "https://evil.example"})
        assert foreign.status_code == 403
        allowed = httpx.post(url + "/ingest", files={"files": NOTE},
                             headers={**write, "Origin": "https://app.example.com"})
        assert allowed.status_code == 200, allowed.text


def _raw(url: str, request: bytes, *, then: bytes = b"", pause: float = 0.0,
         wait: float = 10.0) -> tuple[bytes, bool]:
    """Send ``request`` over a raw socket, then ``then`` after ``pause``; returns what the
    server answered and whether it answered before ``then`` was sent."""
    with socket.create_connection(("127.0.0.1", _port(url)), timeout=wait) as sock:
        sock.sendall(request)
        sock.settimeout(pause or wait)
        early = b""
        with contextlib.suppress(TimeoutError):
            early = sock.recv(65536)
        if early:
            return early, True
        sock.settimeout(wait)
        try:
            sock.sendall(then)
            return sock.recv(65536), False
        except OSError:
            return b"", False


def test_the_key_is_checked_before_a_byte_of_the_body_is_read(
        iso: Isotope, tmp_path: Path) -> None:
    keys = Keys.from_settings(Settings(api_keys=[WRITE_KEY, f"{READ_KEY}:read"]))
    with _serve(iso, tmp_path, keys=keys) as url:
        # 100 MB announced in chunks, no key: answered 401 after the headers alone
        head = (b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                b"\r\nTransfer-Encoding: chunked\r\n\r\n")
        reply, early = _raw(url, head, then=b"100000\r\n" + b"x" * 0x100000, pause=3)
        assert early and reply.startswith(b"HTTP/1.1 401"), reply[:80]
        # a read-only key on a route that writes: 403 before the upload is read
        upload = (b"POST /ingest HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
                  + READ_KEY.encode() + b"\r\nContent-Type: multipart/form-data; boundary=b"
                  b"\r\nContent-Length: 30000000\r\n\r\n")
        reply, early = _raw(url, upload, pause=3)
        assert early and reply.startswith(b"HTTP/1.1 403"), reply[:80]


def test_a_streamed_body_over_the_limit_is_refused_while_it_arrives(
        iso: Isotope, tmp_path: Path) -> None:
    with _serve(iso, tmp_path, max_bytes=100_000) as url:
        head = (b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                b"\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"10000\r\n" + b" " * 0x10000 + b"\r\n"
        with socket.create_connection(("127.0.0.1", _port(url)), timeout=10) as sock:
            sock.sendall(head)
            answer = b""
            for _ in range(40):  # 2.6 MB at most; refused after 100 KB
                try:
                    sock.sendall(chunk)
                except OSError:
                    break
                sock.settimeout(0.05)
                try:
                    answer += sock.recv(65536)
                except TimeoutError:
                    continue
                if answer:
                    break
            sock.settimeout(2)
            try:
                while b"max_upload_mb" not in answer and (more := sock.recv(65536)):
                    answer += more
            except OSError:
                pass
        assert answer.startswith(b"HTTP/1.1 413"), answer[:80]
        assert b"max_upload_mb" in answer


def test_a_stalled_body_is_answered_408_and_let_go(iso: Isotope, tmp_path: Path) -> None:
    with _serve(iso, tmp_path, body_timeout=1.0) as url:
        head = (b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                b"\r\nContent-Length: 100\r\n\r\n{\"query\"")
        started = time.monotonic()
        reply, early = _raw(url, head, pause=8)
        assert early and reply.startswith(b"HTTP/1.1 408"), reply[:80]
        assert time.monotonic() - started < 6


def test_the_servers_own_uploads_are_queued_not_refused(iso: Isotope, tmp_path: Path) -> None:
    with _serve(iso, tmp_path) as url:
        replies: list[httpx.Response] = []

        def upload(n: int) -> None:
            text = f"# Note {n}\n\nPlant {n} is watered on day {n} of the month.\n".encode()
            replies.append(httpx.post(url + "/ingest", timeout=60, files={
                "files": (f"plant-{n}.md", text, "text/markdown")}))

        threads = [threading.Thread(target=upload, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [r.status_code for r in replies] == [200] * 4, [r.text for r in replies]
        assert len(iso.sources()) == 4


def test_a_failed_upload_is_not_kept_and_puts_back_what_it_replaced(
        iso: Isotope, tmp_path: Path) -> None:
    uploads = tmp_path / "uploads"
    with _serve(iso, tmp_path) as url:
        assert httpx.post(url + "/ingest", files={"files": NOTE}).status_code == 200
        kept = (uploads / "note.md").read_bytes()
        bad = httpx.post(url + "/ingest", files={"files": ("note.md", b"\x00\x01" * 500,
                                                           "text/markdown")})
        assert bad.status_code == 422 and bad.json()["ok"] is False
        assert "note.md" in bad.json()["error"]
        assert (uploads / "note.md").read_bytes() == kept  # the good one is back
        alone = httpx.post(url + "/ingest", files={"files": ("bin.txt", b"\x00" * 100,
                                                             "text/plain")})
        assert alone.status_code == 422 and not (uploads / "bin.txt").exists()
        assert sorted(p.name for p in uploads.iterdir()) == ["note.md"]
        # deleting the source removes its file
        uri = next(s.source.uri for s in iso.sources())
        assert httpx.request("DELETE", url + "/sources", params={"source": uri}
                             ).status_code == 204
        assert not (uploads / "note.md").exists()


def test_upload_names_too_long_keep_their_extension(iso: Isotope, tmp_path: Path) -> None:
    with _serve(iso, tmp_path) as url:
        for name in ("é" * 200 + ".md", "n" * 300 + ".txt"):
            reply = httpx.post(url + "/ingest", files={"files": (name, NOTE[1], "text/plain")})
            assert reply.status_code == 200, reply.text
            (added,) = reply.json()["added"]
            stored = Path(added).name
            assert stored.endswith(Path(name).suffix) and len(stored.encode()) <= 200


class SlowModel(LLM):
    """Writes its answer a token every 0.1 s, and records whether it was stopped."""

    model_id = "fake/slow"

    def __init__(self) -> None:
        self.started = threading.Event()
        self.stopped_early: list[bool] = []
        self.calls = 0

    def complete_batch(self, prompts: Sequence[Prompt], *, max_tokens: int = 256,
                       temperature: float = 0.0, json_schema: dict[str, Any] | None = None,
                       ) -> list[str]:
        return [FakeLLM._reply(p[-1]["content"]) for p in prompts]

    def stream(self, prompt: Prompt, *, max_tokens: int = 256, temperature: float = 0.0
               ) -> Iterator[str]:
        self.calls += 1
        self.started.set()
        finished = False
        try:
            for n in range(200):  # 20 s in all
                time.sleep(0.1)
                yield f"word{n} "
            finished = True
        finally:
            self.stopped_early.append(not finished)


def test_an_answer_whose_client_left_stops_and_health_stays_quick(
        embedder: Any, examples: Path, tmp_path: Path) -> None:
    slow = SlowModel()
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM(),
                      answer_llm=slow, cache=False) as iso:
        iso.ingest(examples / "handbook.md")
        with _serve(iso, tmp_path, answer_slots=4) as url:
            def ask(stream: bool) -> None:
                """Give up after a second and close the connection."""
                body = {"query": "vacation days", "stream": stream}
                with contextlib.suppress(httpx.TimeoutException), httpx.stream(
                        "POST", url + "/ask", json=body, timeout=1.0) as reply:
                    started = time.monotonic()
                    for _ in reply.iter_bytes():
                        if time.monotonic() - started > 1.0:
                            break

            asks = [threading.Thread(target=ask, args=(n % 2 == 0,)) for n in range(6)]
            for thread in asks:
                thread.start()
            assert slow.started.wait(10)
            started = time.monotonic()
            assert httpx.get(url + "/health", timeout=5).status_code == 200
            assert time.monotonic() - started < 1.0
            for thread in asks:
                thread.join()
            deadline = time.monotonic() + 10
            while len(slow.stopped_early) < slow.calls and time.monotonic() < deadline:
                time.sleep(0.1)
            assert slow.calls >= 1
            assert len(slow.stopped_early) == slow.calls, "an abandoned answer still runs"
            assert all(slow.stopped_early), "an abandoned answer ran to its end"


class PacedModel(SlowModel):
    """Writes ``pieces`` pieces, one every 0.1 s."""

    def __init__(self, pieces: int) -> None:
        super().__init__()
        self.pieces = pieces

    def stream(self, prompt: Prompt, *, max_tokens: int = 256, temperature: float = 0.0
               ) -> Iterator[str]:
        self.calls += 1
        for n in range(self.pieces):
            time.sleep(0.1)
            yield f"word{n} "


def test_a_streamed_answer_outlives_the_body_timeout(embedder: Any, examples: Path,
                                                     tmp_path: Path) -> None:
    """The stalled-body deadline is for the body: a reply streaming for longer than
    ``body_timeout`` (a slow local answer) is not cut, and a closed one logs nothing."""
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM(),
                      answer_llm=PacedModel(25), cache=False) as iso:
        iso.ingest(examples / "handbook.md")
        with _serve(iso, tmp_path, body_timeout=0.5) as url:
            events = []
            with httpx.stream("POST", url + "/ask", json={"query": "vacation days",
                                                          "stream": True}, timeout=30) as r:
                assert r.status_code == 200
                events = [line for line in r.iter_lines() if line.startswith("event:")]
            assert events.count("event: token") == 25
            assert events[-2:] == ["event: answer", "event: done"]
            whole = httpx.post(url + "/ask", json={"query": "vacation days"}, timeout=30)
            assert whole.status_code == 200 and whole.json()["answer_kind"]


def test_every_error_is_json_in_one_form(keyless: str) -> None:
    cases = [
        ("POST", "/search", {"json": {"query": "x", "k": 0}}, 422),
        ("POST", "/search", {"json": {"query": ""}}, 422),
        ("POST", "/search", {"json": {"query": "   "}}, 422),
        ("POST", "/search", {"content": b"{not json", "headers": {
            "content-type": "application/json"}}, 422),
        ("POST", "/ingest", {}, 422),
        ("GET", "/nowhere", {}, 404),
        ("PUT", "/search", {}, 405),
        ("GET", "/chunks/none/questions", {}, 404),
    ]
    for method, path, options, status in cases:
        reply = httpx.request(method, keyless + path, **options)
        assert reply.status_code == status, (path, reply.text)
        body = reply.json()
        assert list(body) == ["error"] and isinstance(body["error"], str), (path, body)
        assert "detail" not in reply.text
    empty = httpx.post(keyless + "/search", json={"query": ""}).json()["error"]
    blank = httpx.post(keyless + "/search", json={"query": "   "}).json()["error"]
    assert empty == blank and "query" in empty


def test_docs_are_served_from_the_package(keyless: str) -> None:
    page = httpx.get(keyless + "/docs")
    assert page.status_code == 200 and "/docs/static/swagger-ui-bundle.js" in page.text
    assert "cdn" not in page.text.lower() or "cdn.jsdelivr" not in page.text
    script = httpx.get(keyless + "/docs/static/swagger-ui-bundle.js")
    assert script.status_code == 200 and len(script.content) > 100_000


def test_a_member_name_cut_at_its_hash_never_deletes_the_mailbox(
        iso: Isotope, formats: Path, tmp_path: Path) -> None:
    mailbox = formats / "support.mbox"
    iso.ingest(mailbox)
    members = sorted(s.source.uri for s in iso.sources())
    assert len(members) >= 2 and all("#" in m for m in members)
    with _serve(iso, tmp_path) as url:
        # curl drops an unencoded '#': the server sees the mailbox's path
        cut = httpx.request("DELETE", url + "/sources" + str(mailbox))
        assert cut.status_code == 400 and "members=true" in cut.json()["error"]
        assert len(iso.sources()) == len(members)
        one = httpx.request("DELETE", url + "/sources", params={"source": members[0]})
        assert one.status_code == 204
        assert sorted(s.source.uri for s in iso.sources()) == members[1:]
        whole = httpx.request("DELETE", url + "/sources", params={
            "source": str(mailbox), "members": "true"})
        assert whole.status_code == 204 and iso.sources() == []


def test_a_port_in_use_is_said_before_serving(iso: Isotope, tmp_path: Path) -> None:
    import subprocess
    import sys

    index = str(iso.settings.index)
    iso.close()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "isotope", "serve", "--index", index,
                               "--create", "--port", str(port)], capture_output=True,
                              text=True, timeout=120)
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr and "serving" not in done.stderr
    assert "Errno" not in done.stderr and "Traceback" not in done.stderr


def test_json_is_compact_in_mcp_replies_and_tools_are_described(iso: Isotope,
                                                                examples: Path) -> None:
    from isotope.server.mcp import create_mcp

    iso.ingest(examples / "handbook.md")
    server = create_mcp(iso)
    tools = {t.name: t for t in server._tool_manager.list_tools()}  # the SDK's own listing
    search = tools["search"].parameters["properties"]
    assert "hybrid" in json.dumps(search["mode"]) and "questions-dense" in json.dumps(
        search["mode"])
    assert search["k"]["maximum"] == 50 and search["k"]["minimum"] == 1
    assert "gte" in search["filters"]["description"]
    assert {"mode", "filters"} <= set(tools["ask"].parameters["properties"])
    assert "slow" in tools["ask"].description.lower()
    assert all(len(t.description.split()) > 15 for t in tools.values())


def test_sync_never_follows_a_link_out_of_the_serve_roots(iso: Isotope, tmp_path: Path
                                                          ) -> None:
    root, outside = tmp_path / "roots" / "data", tmp_path / "outside"
    root.mkdir(parents=True)
    outside.mkdir()
    (root / "kept.txt").write_text("The garden gate is painted green every spring.\n")
    (outside / "secret.txt").write_text("The vault code is 4412.\n")
    (outside / "deep").mkdir()
    (outside / "deep" / "more.txt").write_text("The safe is behind the painting.\n")
    (root / "link.txt").symlink_to(outside / "secret.txt")
    (root / "folder").symlink_to(outside / "deep")
    with _serve(iso, tmp_path, roots=[root.resolve()]) as url:
        reply = httpx.post(url + "/sync", json={"paths": [str(root)]}, timeout=60)
        assert reply.status_code == 200, reply.text
        body = reply.json()
        assert [Path(a).name for a in body["added"]] == ["kept.txt"]
        refused = {Path(e["path"]).name for e in body["errors"]}
        assert refused == {"link.txt", "folder"}
        assert all("serve_roots" in e["message"] for e in body["errors"])
    assert not any("vault" in r.chunk.text for r in iso.search("vault code", k=5).results)


def test_ingest_by_path_over_mcp_obeys_the_serve_roots_rule(iso: Isotope, examples: Path,
                                                          tmp_path: Path) -> None:
    """Over HTTP, ingest by path is off without serve_roots (one clear error); over stdio
    (the user's own agent) any path is read unless serve_roots is set."""
    import anyio
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from isotope.server.mcp import create_mcp

    with _serve(iso, tmp_path) as url:  # no serve_roots
        async def run() -> None:
            async with streamable_http_client(url + "/mcp/") as (read, write, _), \
                    ClientSession(read, write) as session:
                await session.initialize()
                refused = await session.call_tool("ingest", {"paths": [str(examples)]})
                assert refused.isError and "no serve_roots" in refused.content[0].text

        anyio.run(run)
    local = create_mcp(iso, roots=None)  # isotope mcp without serve_roots
    from mcp.server.fastmcp.exceptions import ToolError

    with pytest.raises(ToolError, match="no such file or folder"):
        anyio.run(local.call_tool, "ingest", {"paths": [str(tmp_path / "nope")]})
    done = anyio.run(local.call_tool, "ingest", {"paths": [str(examples / "faq.html")]})
    assert "faq.html" in json.dumps(done, default=str)


def test_mcp_with_a_read_key_answers_odd_bodies_without_a_server_error(
        iso: Isotope, tmp_path: Path) -> None:
    keys = Keys.from_settings(Settings(api_keys=[WRITE_KEY, f"{READ_KEY}:read"]))
    with _serve(iso, tmp_path, keys=keys) as url:
        for key in (READ_KEY, WRITE_KEY):
            headers = {"Authorization": f"Bearer {key}", "Accept":
                       "application/json, text/event-stream",
                       "Content-Type": "application/json"}
            for body in ('{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": []}',
                         "[" * 100_000 + "]" * 100_000, "not json", "[]", "null"):
                reply = httpx.post(url + "/mcp/", content=body, headers=headers, timeout=30)
                assert reply.status_code < 500, (key[:1], body[:40], reply.text[:200])


def test_another_writer_is_409_and_a_read_only_index_503(iso: Isotope, examples: Path,
                                                         tmp_path: Path) -> None:
    """The statuses the docs (guides/serving.md) promise for a locked index (another
    process writes, past lock_wait) and for storage that refuses writes (a read-only
    mount)."""
    import os
    import shutil
    import subprocess
    import sys

    iso.ingest(examples / "handbook.md")
    index = str(iso.settings.index)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom isotope import stores\n"
         f"store = stores.open({index!r})\nwith store.writer():\n"
         "    print('held', flush=True)\n    time.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with _serve(iso, tmp_path) as url:
            locked = httpx.post(url + "/ingest", files={"files": NOTE}, timeout=30)
            assert locked.status_code == 409, locked.text
            assert "writing" in locked.json()["error"]
    finally:
        holder.kill()
        holder.wait()
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and mount namespaces for a read-only mount")
    iso.close()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = (f"mount --bind {index} {index} && mount -o remount,bind,ro {index} {index} && "
              f"exec {sys.executable} -m isotope serve --index {index} --port {port}")
    env = {**os.environ, "ISOTOPE_CACHE": "false"}
    server = subprocess.Popen(["unshare", "-m", "sh", "-c", script], env=env,
                              stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                httpx.get(url + "/health", timeout=2)
                break
            except httpx.HTTPError:
                time.sleep(0.3)
        refused = httpx.request("DELETE", url + "/sources", params={
            "source": str(examples / "handbook.md")}, timeout=30)
        assert refused.status_code == 503, refused.text
        assert "read-only" in refused.json()["error"]
        upload = httpx.post(url + "/ingest", files={"files": NOTE}, timeout=30)
        assert upload.status_code == 503 and "nothing was stored" in upload.json()["error"]
        assert httpx.post(url + "/search", json={"query": "vacation"}).status_code == 200
    finally:
        server.terminate()
        server.wait(30)


def test_a_link_swapped_in_after_the_walk_is_never_read(iso: Isotope, tmp_path: Path) -> None:
    """The walk checks a path, the read comes later: a file swapped for a link out of the
    roots in between is refused on the opened file (a race the review won on its first
    try)."""
    import os

    root, outside = tmp_path / "roots", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("The secret password is swordfish.\n")
    for n in range(150):
        (root / f"{n:03}.txt").write_text(f"Filler note {n} about the garden shed.\n")
    stop = threading.Event()

    def swap() -> None:
        target = root / "zzz.txt"
        while not stop.is_set():
            (root / "zzz.real").write_text("Harmless zebra text about the zoo.\n")
            os.replace(root / "zzz.real", target)
            time.sleep(0.0005)
            with contextlib.suppress(FileNotFoundError):
                (root / "zzz.link").unlink()
            (root / "zzz.link").symlink_to(outside / "secret.txt")
            os.replace(root / "zzz.link", target)
            time.sleep(0.0005)

    for attempt in range(4):
        swapper = threading.Thread(target=swap)
        swapper.start()
        try:
            iso.sync(root, questions="later", confine=[root.resolve()])
        finally:
            stop.set()
            swapper.join()
            stop.clear()
        for result in iso.search("secret password swordfish", k=3, mode="chunks-bm25").results:
            assert "swordfish" not in result.chunk.text, attempt
        (root / "zzz.txt").unlink(missing_ok=True)


def test_a_queue_of_writes_never_starves_searches(embedder: Any, tmp_path: Path) -> None:
    """Writes wait for each other on the event loop, not in the thread pool: 45 queued
    deletes behind a slow ingest, and a search still answers at once."""

    class SlowQuestions(FakeLLM):
        def complete_batch(self, prompts: Sequence[Prompt], **kwargs: Any) -> list[str]:
            time.sleep(0.5 * len(prompts))
            return super().complete_batch(prompts, **kwargs)

    with Isotope.open(tmp_path / "index", embedder=embedder, llm=SlowQuestions(),
                      cache=False, generation="atom") as iso:
        iso.ingest_chunks(["The gate code of the depot is 2231."], source="depot")
        with _serve(iso, tmp_path) as url:
            slow = threading.Thread(target=lambda: httpx.post(url + "/ingest", timeout=120,
                                                              files={"files": NOTE}))
            slow.start()
            time.sleep(0.5)
            deletes = [threading.Thread(target=lambda n=n: httpx.request(
                "DELETE", url + "/sources", params={"source": f"nope{n}"}, timeout=120))
                for n in range(45)]
            for thread in deletes:
                thread.start()
            time.sleep(0.5)
            started = time.monotonic()
            assert httpx.post(url + "/search", json={"query": "depot gate code"},
                              timeout=60).status_code == 200
            assert httpx.get(url + "/sources", timeout=60).status_code == 200
            assert time.monotonic() - started < 5
            slow.join()
            for thread in deletes:
                thread.join()


def test_two_files_of_one_name_in_one_upload_are_refused(iso: Isotope, tmp_path: Path
                                                         ) -> None:
    uploads = tmp_path / "uploads"
    with _serve(iso, tmp_path) as url:
        assert httpx.post(url + "/ingest", files={"files": ("dup.md", b"# A\n\nFirst text "
                          b"about the shed.\n", "text/markdown")}).status_code == 200
        kept = (uploads / "dup.md").read_bytes()
        both = [("files", ("dup.md", b"# B\n\nOther text.\n", "text/markdown")),
                ("files", ("sub/dup.md", b"   \n", "text/markdown"))]
        refused = httpx.post(url + "/ingest", files=both)
        assert refused.status_code == 400 and "two files named dup.md" in refused.text
        assert (uploads / "dup.md").read_bytes() == kept


def test_any_host_needs_keys(iso: Isotope, tmp_path: Path) -> None:
    from isotope.errors import SettingsError

    with pytest.raises(SettingsError, match="needs API keys"):
        create_app(iso, keys=Keys(), roots=[], max_bytes=1000, uploads=tmp_path / "u",
                   allowed_hosts=["*"])


def test_a_link_from_another_site_opens_the_page_but_not_the_data(keyless: str) -> None:
    cross = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}
    assert httpx.get(keyless + "/", headers=cross).status_code == 200
    assert httpx.get(keyless + "/app.js", headers=cross).status_code == 200
    assert httpx.get(keyless + "/sources", headers=cross).status_code == 403
    assert httpx.post(keyless + "/", headers=cross).status_code == 403


def test_mcp_answers_the_hosts_and_origins_the_gate_allows(iso: Isotope, tmp_path: Path
                                                           ) -> None:
    with _serve(iso, tmp_path, allowed_hosts=["search.example.com"],
                allowed_origins=["http://app.example.com"]) as url:
        body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}
        headers = {"Accept": "application/json, text/event-stream"}
        port = _port(url)
        for extra in ({"Host": "localhost"}, {"Host": f"search.example.com:{port}"},
                      {"Origin": "http://app.example.com"}, {"Origin": url}):
            reply = httpx.post(url + "/mcp/", json=body, headers={**headers, **extra})
            assert reply.status_code == 200, (extra, reply.text)
        assert httpx.post(url + "/mcp/", json=body, headers={
            **headers, "Host": "evil.example"}).json()["error"]


def test_odd_filters_and_text_are_client_errors(keyless: str) -> None:
    many = httpx.post(keyless + "/search", json={"query": "x", "filters": {
        "a": list(range(500))}})
    assert many.status_code == 400 and "at most 100 values" in many.json()["error"]
    assert "damaged" not in many.text
    keys = httpx.post(keyless + "/search", json={"query": "x", "filters": {
        f"k{n}": 1 for n in range(500)}})
    assert keys.status_code == 400
    for body, status in (('{"query": "x", "filters": {"title": "\\udfff"}}', 200),
                         ('{"query": "x", "filters": {"\\udfff": 1}}', 400)):
        reply = httpx.post(keyless + "/search", content=body,
                           headers={"Content-Type": "application/json"})
        assert reply.status_code == status, reply.text  # (no key of the index: said so)
        assert status == 200 or "has the key '\ufffd'" in reply.json()["error"]
    found = httpx.post(keyless + "/search", json={"query": "vacation days"}).json()
    found["results"][0]["chunk"]["text"] = "\ud800 broken"
    answered = httpx.post(keyless + "/answer", content=json.dumps(found),
                          headers={"Content-Type": "application/json"})
    assert answered.status_code == 200, answered.text
    assert httpx.post(keyless + "/search", json={"query": "x", "k": True}).status_code == 422
    assert httpx.post(keyless + "/search", json={"query": "x", "k": "5"}).status_code == 422


def test_the_answer_prompt_has_a_bounded_size(embedder: Any, examples: Path,
                                              tmp_path: Path) -> None:
    seen: list[int] = []

    class Recording(FakeLLM):
        def complete_batch(self, prompts: Sequence[Prompt], **kwargs: Any) -> list[str]:
            seen.extend(len(p[-1]["content"]) for p in prompts)
            return super().complete_batch(prompts, **kwargs)

    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM(),
                      answer_llm=Recording(), cache=False) as iso:
        iso.ingest_chunks([f"Note {n}: " + "the shed holds tools. " * 150
                           for n in range(60)], source="notes")
        with _serve(iso, tmp_path) as url:
            reply = httpx.post(url + "/ask", json={"query": "What does the shed hold?",
                                                   "k": 60}, timeout=60)
            assert reply.status_code == 200, reply.text
    from isotope.search.answer import PROMPT_CHARS

    assert seen and max(seen) < PROMPT_CHARS + 2_000


def test_the_client_says_what_the_server_answered_before_the_upload(
        iso: Isotope, tmp_path: Path) -> None:
    from isotope import Client
    from isotope.client import ServerError

    big = tmp_path / "big.txt"
    big.write_bytes(b"plain words here. " * 200_000)  # 3.6 MB
    keys = Keys.from_settings(Settings(api_keys=[WRITE_KEY, f"{READ_KEY}:read"]))
    with _serve(iso, tmp_path, keys=keys, max_bytes=1_000_000) as url:
        with pytest.raises(ServerError, match=r"max_upload_mb.*HTTP 413"):
            Client(url, api_key=WRITE_KEY).ingest(big)
        with pytest.raises(ServerError, match=r"API key is needed.*HTTP 401"):
            Client(url).ingest(big)
        with pytest.raises(ServerError, match=r"only read.*HTTP 403"):
            Client(url, api_key=READ_KEY).ingest(big)
    from isotope.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="printable"):
        Client("http://127.0.0.1:1", api_key="key\r\nX-Injected: 1")


def test_half_sent_headers_are_let_go(iso: Isotope, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that sends half a request's headers and waits is disconnected after the
    header deadline (held forever, a flood of them used up the server's files)."""
    import uvicorn

    from isotope.server import workers

    monkeypatch.setattr(workers, "HEADER_TIMEOUT", 1.0)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    app = create_app(iso, keys=Keys(), roots=[], max_bytes=1000, uploads=tmp_path / "u",
                     mcp=False)
    server = uvicorn.Server(workers.server_config(app, host="127.0.0.1", port=port))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-a: ")
            started = time.monotonic()
            assert sock.recv(100) == b""  # closed by the server
            assert time.monotonic() - started < 5
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
            assert sock.recv(100).startswith(b"HTTP/1.1 200")
    finally:
        server.should_exit = True
        thread.join(10)


def test_a_malformed_keys_file_quotes_no_key_and_names_no_path_in_a_reply(
        iso: Isotope, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Two keys joined on one line answered every request (one without a key too) 503
    with the second key and the file's path in the body (issue 64): whatever is wrong
    with a line, the reply says only that the keys file is invalid, and the log (and the
    error at start) names the file and the line, never any of a line's text."""
    import logging

    from isotope.errors import SettingsError

    kept, first, second = "Kq7pX2mW9vLk4Rt8Zs", "Ay3nB6cJ1dFs5Gu0Ke", "Bw8hT4rN2xQm6Vp1Lc"

    def fragments(text: str) -> list[str]:  # (any six characters in a row of a key)
        return [key[i:i + 6] for key in (kept, first, second) for i in range(len(key) - 5)
                if key[i:i + 6] in text]

    keys_file = tmp_path / "team.keys"
    keys_file.write_text(f"{kept}\n")
    broken: dict[str, bytes] = {
        "two keys joined": f"{first} {second}",
        "two keys joined after a scope": f"{first} read {second}",
        "a second key after a field": f"{first} read user=bob {second}",
        "a name a principal cannot have": f"{first} read user=bob:{second}",
        "an empty name before a key": f"{first} read groups=,{second}",
        "a key with a character not printable": f"{first}\x7f{second} read",
        "a key too short": second[:12],
        "a scope misspelt": f"{first} raed",
        "a key on two lines": f"{kept} read",
        "not UTF-8": f"{first}\xff{second}",
    }
    with _serve(iso, tmp_path, keys=Keys.from_settings(Settings(api_keys_file=keys_file))
                ) as url:
        for case, line in broken.items():
            caplog.clear()
            keys_file.write_bytes(f"{kept}\n{line}\n".encode("latin-1"))
            with caplog.at_level(logging.WARNING, logger="isotope.server.auth"):
                for key in (None, kept, first, second):
                    headers = {"Authorization": f"Bearer {key}"} if key else {}
                    reply = httpx.get(url + "/sources", headers=headers)
                    assert reply.status_code == 503, (case, reply.text)
                    assert "keys file is invalid" in reply.json()["error"], case
                    assert not fragments(reply.text), (case, reply.text)
                    assert str(tmp_path) not in reply.text and keys_file.name not in (
                        reply.text), (case, reply.text)
            logged = [r.getMessage() for r in caplog.records]
            assert len(logged) == 1, (case, logged)  # (once, not at every request)
            assert f"api_keys_file {keys_file}, line 2: " in logged[0], (case, logged)
            assert not fragments(logged[0]), (case, logged)
            with pytest.raises(SettingsError, match=f"{keys_file}, line 2: ") as refused:
                Keys.from_settings(Settings(api_keys_file=keys_file))  # (at start)
            assert not fragments(str(refused.value)), (case, refused.value)
        keys_file.write_text(f"{kept}\n{first} read\n")  # fixed: answered again
        assert httpx.get(url + "/sources", headers={"Authorization": f"Bearer {first}"}
                         ).status_code == 200
