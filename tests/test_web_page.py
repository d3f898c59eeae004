"""The search page at ``/`` in a real headless browser: Debian's ``chromium`` (installed by
.ci/run) driven by Playwright through its executable path, so no browser is downloaded.
Loads the page from a real uvicorn server on loopback, searches, and checks that the
answer, the matched question and its highlighted atom appear; the screenshot is the
docs' (docs/web-page.png, in guides/serving.md)."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from isotope import Isotope

from conftest import served_on_loopback

pytest.importorskip("fastapi", reason="pip install 'isotopedb[server]'")
playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright")

from isotope.server.app import create_app  # noqa: E402
from isotope.server.auth import Keys  # noqa: E402
from isotope.settings import Settings  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def page_url(iso: Isotope, examples: Path, tmp_path: Path) -> Iterator[str]:
    iso.ingest(examples)
    with served_on_loopback(create_app(iso, keys=Keys(), roots=[], max_bytes=1_000_000,
                                       uploads=tmp_path / "up")) as url:
        yield url + "/"


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed "
                    "(apt-get install chromium)")
def test_the_page_searches_and_shows_the_answer_and_the_matched_question(
        page_url: str, tmp_path: Path) -> None:
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 1350})
            requests: list[str] = []
            page.on("request", lambda r: requests.append(r.url))
            page.goto(page_url)
            page.fill("#query", "How many vacation days do new employees get?")
            page.click("button[type=submit]")
            page.wait_for_selector(".result", timeout=30_000)
            answer = page.inner_text("#answer")
            assert "vacation" in answer.lower() and "[1]" in answer
            first = page.locator(".result").first
            assert "handbook.md" in first.locator(".source").inner_text()
            matched = first.locator(".matched li").all_inner_texts()
            # the fake's questions reword their statement ("holiday" for "vacation"): the
            # statement a matched question was written for is highlighted in the chunk
            assert matched and any("holiday" in m.lower() for m in matched)
            assert "vacation" in first.locator("mark").first.inner_text().lower()
            assert page.inner_text("#action") in ("deliver", "query_more", "refine_query")
            first.locator("details.questions summary").click()
            page.wait_for_selector(".result details.questions ul li", timeout=10_000)
            # kept and dropped questions, each dropped one with why
            shown = first.locator("details.questions li").all_inner_texts()
            dropped = first.locator("details.questions li.dropped").all_inner_texts()
            assert dropped and len(dropped) < len(shown)
            assert any("What did it do?" in d and "dropped: pronoun only" in d for d in dropped)
            # a question added by hand in the question view (no key: the owner)
            first.locator("details.questions form.add input").fill("how long is the holiday")
            first.locator("details.questions form.add button").click()
            page.wait_for_function(
                "[...document.querySelectorAll('.result details.questions li')]"
                ".some((li) => li.textContent.includes('(manual)'))", timeout=10_000)
            # how it ranked: each signal's part of the score
            first.locator("details.explain summary").click()
            rows = first.locator("details.explain tr").all_inner_texts()
            assert any("questions-dense" in r for r in rows) and len(rows) >= 3
            assert "score" in first.locator("details.explain p").inner_text()
            page.screenshot(path=str(tmp_path / "page.png"), full_page=False)
            # a thumb up: the query becomes a question of the passage (POST /feedback)
            first.locator(".thumbs .up").click()
            page.wait_for_function(
                "document.querySelector('.result .said').textContent.length > 0",
                timeout=10_000)
            assert "learned" in first.locator(".said").inner_text()
            assert first.locator(".thumbs .up").inner_text() == "useful"  # (no emoji font)
            # the filter field (issue 42): the filters of /search, as --where writes them
            page.uncheck("#ask")
            page.fill("#where", "type=pdf")
            page.click("button[type=submit]")
            page.wait_for_function("document.querySelector('#status').textContent"
                                   ".includes('result')", timeout=30_000)
            sources = page.locator(".result .source").all_inner_texts()
            assert sources and all(".pdf" in s for s in sources), sources
            page.fill("#where", "nonsense")
            page.click("button[type=submit]")
            assert "key=value" in page.inner_text("#status")
            assert all(url.startswith(page_url) for url in requests)  # nothing from a CDN
            icon = httpx.get(page_url.rstrip("/") + "/favicon.ico")
            assert icon.status_code == 200 and icon.headers["content-type"].startswith(
                "image/svg")  # (it was 404)
        finally:
            browser.close()
    shot = tmp_path / "page.png"
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    target = ROOT / "docs" / "web-page.png"
    if not target.exists() or os.environ.get("UPDATE_SCREENSHOT"):  # the docs' picture
        shutil.copy(shot, target)


ATTACK = """<!doctype html><title>a page elsewhere</title><script>
const form = new FormData();
form.append("files", new Blob(["# Handbook\\n\\nEvil text replaces the handbook."],
                              {type: "text/markdown"}), "handbook.md");
Promise.allSettled([
  fetch("TARGET/ingest", {method: "POST", mode: "no-cors", body: form}),
  fetch("TARGET/sources/x", {method: "DELETE", mode: "no-cors"}),
  fetch("TARGET/search", {method: "POST", mode: "no-cors", body: '{"query": "x"}',
                          headers: {"Content-Type": "text/plain"}}),
]).then(() => { document.title = "sent"; });
</script>"""


@contextlib.contextmanager
def _page_elsewhere(html: str, port: int = 0) -> Iterator[str]:
    """``html`` served at http://localhost:PORT/ (another origin than the server's)."""
    import http.server
    import threading

    body = html.encode()

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", port), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://localhost:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def _open_until_title(url: str, title: str) -> None:
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox"])
        try:
            tab = browser.new_page()
            tab.goto(url + "/")
            tab.wait_for_function(f"document.title.startsWith({title!r})", timeout=20_000)
            return
        finally:
            browser.close()


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed "
                    "(apt-get install chromium)")
def test_a_page_on_another_origin_cannot_write_to_a_keyless_server(
        iso: Isotope, examples: Path, tmp_path: Path) -> None:
    """The attack of issue 24: a page on http://localhost:OTHER posts an upload named like
    a real document to a key-less server on 127.0.0.1, in a real browser."""
    iso.ingest(examples / "handbook.md")
    before = sorted((s.source.uri, s.source.content_hash) for s in iso.sources())
    uploads = tmp_path / "up"
    with served_on_loopback(create_app(iso, keys=Keys(), roots=[], max_bytes=1_000_000,
                                       uploads=uploads)) as target, \
            _page_elsewhere(ATTACK.replace("TARGET", target)) as attacker:
        _open_until_title(attacker, "sent")
    assert sorted((s.source.uri, s.source.content_hash) for s in iso.sources()) == before
    assert not (uploads / "handbook.md").exists()


ALLOWED_APP = """<!doctype html><title>an allowed app</title><script>
const key = {"Authorization": "Bearer KEY"};
(async () => {
  const found = await fetch("TARGET/search", {method: "POST", headers: {
    ...key, "Content-Type": "application/json"}, body: '{"query": "vacation days"}'});
  const data = await found.json();
  const refused = await fetch("TARGET/search", {method: "POST", headers: {
    "Content-Type": "application/json"}, body: '{"query": "x"}'});
  document.title = `done ${found.status} ${data.results[0].chunk.source} ${refused.status}`;
})().catch((e) => { document.title = `done failed ${e}`; });
</script>"""


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed "
                    "(apt-get install chromium)")
def test_a_page_of_an_allowed_origin_can_search_with_its_key(
        iso: Isotope, examples: Path, tmp_path: Path) -> None:
    """``allowed_origins`` works in a browser: the page's preflight is answered, its JSON
    with a key is read, and a refusal (401) is readable by it too (CORS on errors)."""
    import socket

    iso.ingest(examples / "handbook.md")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    key = "k" * 24
    app = create_app(iso, keys=Keys.from_settings(Settings(api_keys=[key])), roots=[],
                     max_bytes=1_000_000, uploads=tmp_path / "up",
                     allowed_origins=[f"http://localhost:{port}"])
    with served_on_loopback(app) as target:
        page = ALLOWED_APP.replace("TARGET", target).replace("KEY", key)
        with _page_elsewhere(page, port) as origin, playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                        args=["--no-sandbox"])
            try:
                tab = browser.new_page()
                tab.goto(origin + "/")
                tab.wait_for_function("document.title.startsWith('done')", timeout=20_000)
                title = tab.title()
            finally:
                browser.close()
    assert title.startswith("done 200 ") and title.endswith(" 401"), title
    assert "handbook.md" in title


@contextlib.contextmanager
def _browser_on(iso: Isotope, tmp_path: Path) -> Iterator[tuple[str, Any]]:
    """The search page of a key-less server of ``iso`` on loopback (its base URL) and a
    headless Chromium to open it."""
    with served_on_loopback(create_app(iso, keys=Keys(), roots=[], max_bytes=1_000_000,
                                       uploads=tmp_path / "up")) as url, \
            playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox"])
        try:
            yield url, browser
        finally:
            browser.close()


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed "
                    "(apt-get install chromium)")
def test_the_page_shows_results_before_the_answer_and_can_stop_it(
        embedder: object, examples: Path, tmp_path: Path) -> None:
    """A slow answer model: the results are on the page while the answer is still being
    written, token by token, and Stop ends it (the server stops the model)."""
    from test_server_gate import SlowModel

    from conftest import FakeLLM

    slow = SlowModel()
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM(),  # type: ignore[arg-type]
                      answer_llm=slow, cache=False) as iso:
        iso.ingest(examples / "handbook.md")
        with _browser_on(iso, tmp_path) as (url, browser):
            page = browser.new_page()
            page.goto(url + "/")
            assert page.is_checked("#ask")  # not the local model: ticked
            page.fill("#query", "How many vacation days do new employees get?")
            page.click("button[type=submit]")
            page.wait_for_selector(".result", timeout=30_000)
            page.wait_for_function("document.getElementById('answer').textContent"
                                   ".includes('word3')", timeout=20_000)
            assert not page.is_hidden("#stop")
            page.click("#stop")
            page.wait_for_function("document.getElementById('answer').textContent"
                                   ".includes('stopped')", timeout=10_000)
        deadline = time.monotonic() + 10
        while not slow.stopped_early and time.monotonic() < deadline:
            time.sleep(0.1)
        assert slow.stopped_early == [True]


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed "
                    "(apt-get install chromium)")
def test_a_result_s_names_open_their_neighbourhood_as_a_picture(
        embedder: object, tmp_path: Path) -> None:
    """With a knowledge graph (issue 46): a result lists the names read from its passage,
    a name opens a picture of what it is related to, and a neighbour clicked in the
    picture takes the middle. Without the graph the page shows neither."""
    from conftest import FakeLLM

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "opera.md").write_text("The Sydney Opera House was designed by Jørn Utzon.\n")
    (docs / "utzon.md").write_text("Jørn Utzon was born in Copenhagen in 1918.\n")
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM(),  # type: ignore[arg-type]
                      cache=False, graph=True) as iso:
        iso.ingest(docs)
        with _browser_on(iso, tmp_path) as (url, browser):
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.goto(url + "/")
            page.wait_for_selector("#mode option:text('graph')", state="attached",
                                   timeout=10_000)
            page.uncheck("#ask")
            page.fill("#query", "Who designed the Sydney Opera House?")
            page.click("button[type=submit]")
            page.wait_for_selector(".result", timeout=30_000)
            first = page.locator(".result").first
            assert "opera.md" in first.locator(".source").inner_text()
            first.locator("details.entities summary").click()
            page.wait_for_selector(".result details.entities button.entity",
                                   timeout=10_000)
            names = first.locator("button.entity").all_inner_texts()
            assert sorted(names) == ["Jørn Utzon", "Sydney Opera House"]
            first.locator("button.entity", has_text="Jørn Utzon").click()
            page.wait_for_selector(".result svg.neighbourhood", timeout=10_000)
            drawn = first.locator("svg.neighbourhood text").all_text_contents()
            assert {"Jørn Utzon", "Sydney Opera House", "Copenhagen"} <= set(drawn)
            assert any("was born in →" in t for t in drawn)
            assert any("← was designed by" in t for t in drawn)
            page.screenshot(path=str(tmp_path / "graph.png"), full_page=False)
            first.locator("svg.neighbourhood g.neighbour", has_text="Copenhagen").click()
            page.wait_for_function(
                "document.querySelector('.result svg.neighbourhood text.center')"
                ".textContent === 'Copenhagen'", timeout=10_000)
    target = ROOT / "docs" / "graph-page.png"
    if not target.exists() or os.environ.get("UPDATE_SCREENSHOT"):  # the docs' picture
        shutil.copy(tmp_path / "graph.png", target)


def test_without_a_graph_the_page_has_no_names(page_url: str) -> None:
    health = httpx.get(page_url + "health").json()
    assert health["graph"] is False  # (the page then leaves the names and the mode out)
