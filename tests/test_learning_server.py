"""Learning from use over the wire (issue 29): a real uvicorn server on loopback over a
real index and embedder (the fake model at the provider boundary), with keys that name
users: /search carries a query_id (a server logs its searches by default), POST /feedback
with a user's own search, review (the default with access control on), /log for an
administrator only, the MCP feedback tool."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from isotope import Isotope
from isotope.embedders import Embedder
from isotope.settings import Settings
from test_learning import ASKED, _chunk_of, _docs

from conftest import FakeLLM, served_on_loopback

pytest.importorskip("fastapi", reason="pip install 'isotopedb[server]'")
pytest.importorskip("mcp", reason="pip install 'isotopedb[server]'")
import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from isotope.server.app import create_app
from isotope.server.auth import Keys

ADMIN_KEY, BOB_KEY, EVE_KEY, READER_KEY = "a" * 24, "b" * 24, "e" * 24, "r" * 24
WRITER_KEY = "w" * 24  # (a user's key that may write: only the administrator checks stop it)
KEYS = (f"{ADMIN_KEY}\n{BOB_KEY} read user=bob\n{EVE_KEY} read user=eve\n"
        f"{READER_KEY} read\n{WRITER_KEY} write user=bob\n")


@pytest.fixture
def served(tmp_path: Path, embedder: Embedder) -> Iterator[tuple[str, Isotope]]:
    iso = Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM(), cache=False)
    iso.ingest(_docs(tmp_path / "docs"), allow=["public"])
    keys_file = tmp_path / "keys"
    keys_file.write_text(KEYS)
    keys = Keys.from_settings(Settings(api_keys_file=keys_file))
    with served_on_loopback(create_app(iso, keys=keys, roots=[], max_bytes=1_000_000,
                                       uploads=tmp_path / "up")) as url:
        yield url, iso
    iso.close()


def _as(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_feedback_over_http_is_the_searchers_own(served: Any) -> None:
    url, iso = served
    target = _chunk_of(iso, "lighthouse")
    found = httpx.post(f"{url}/search", json={"query": ASKED, "k": 4}, headers=_as(BOB_KEY))
    assert found.status_code == 200
    query_id = found.json()["query_id"]
    assert query_id and target in [r["chunk"]["id"] for r in found.json()["results"]]

    mark = {"query_id": query_id, "chunk_id": target, "useful": True}
    stolen = httpx.post(f"{url}/feedback", json=mark, headers=_as(EVE_KEY))
    assert stolen.status_code == 404 and "no search" in stolen.json()["error"]
    odd = httpx.post(f"{url}/feedback", json={**mark, "chunk_id": "f" * 16},
                     headers=_as(BOB_KEY))
    assert odd.status_code == 400 and "was not a result" in odd.json()["error"]
    assert httpx.post(f"{url}/feedback", json={**mark, "useful": "yes"},
                      headers=_as(BOB_KEY)).status_code == 422
    done = httpx.post(f"{url}/feedback", json=mark, headers=_as(BOB_KEY))
    assert done.status_code == 200, done.text
    # keys that name users turn access control on: a learned question waits for review
    assert done.json()["learned"] == "pending"
    assert not [q for q in iso.questions(chunk_id=target) if q.origin == "user"]
    iso.review_questions([f"{query_id}:{target}"])
    again = httpx.post(f"{url}/search", json={"query": ASKED, "k": 1,
                                              "mode": "questions-dense"},
                       headers=_as(EVE_KEY)).json()
    assert again["results"][0]["chunk"]["id"] == target
    # another user's query is never shown as a matched question
    assert ASKED not in json.dumps(again["results"][0]["matched_questions"])

    # the Client, as eve: her own search, marked not useful
    from isotope import Client

    eve = Client(url, api_key=EVE_KEY)
    seen = eve.search(ASKED, k=2)
    assert eve.feedback(seen.query_id or "", seen.results[1].chunk.id, useful=False
                        ).useful is False
    told = httpx.post(f"{url}/search", json={"query": ASKED, "k": 2, "explain": True},
                      headers=_as(BOB_KEY)).json()["results"][0]["explain"]
    assert told["signals"]["chunks-bm25"]["weight"] == 0.5 and told["fused"] is not None
    assert httpx.get(f"{url}/log", headers=_as(BOB_KEY)).status_code == 403
    said = httpx.get(f"{url}/log", headers=_as(ADMIN_KEY))
    assert said.status_code == 200 and said.json()["searches"] == 4
    assert sum(row["useful"] for row in said.json()["feedback_by_source"]) == 1


def test_the_mcp_feedback_tool_marks_a_search(served: Any) -> None:
    url, iso = served
    target = _chunk_of(iso, "lighthouse")

    async def agent() -> dict[str, Any]:
        client = httpx.AsyncClient(headers=_as(BOB_KEY))
        async with streamable_http_client(url + "/mcp/", http_client=client) as (
                read, write, _), ClientSession(read, write) as session:
            await session.initialize()
            found = json.loads((await session.call_tool(
                "search", {"query": ASKED, "k": 4})).content[0].text)
            assert target in [r["chunk_id"] for r in found["results"]]
            reply = await session.call_tool("feedback", {
                "query_id": found["query_id"], "chunk_id": target, "useful": False})
            return dict(json.loads(reply.content[0].text))

    done = anyio.run(agent)
    assert done["useful"] is False and done["learned"] is None
    [mark] = iso.store.feedback(useful=False)
    assert mark.principal == "user:bob" and mark.chunk_id == target


def test_questions_by_hand_over_http_need_an_administrator(served: Any) -> None:
    url, iso = served
    target = _chunk_of(iso, "museum")
    body = {"text": "which boat stands in the main hall"}
    path = f"{url}/chunks/{target}/questions"
    assert httpx.post(path, json=body, headers=_as(BOB_KEY)).status_code == 403
    made = httpx.post(path, json=body, headers=_as(ADMIN_KEY))
    assert made.status_code == 200, made.text
    question_id = made.json()["id"]
    shown = httpx.get(f"{url}/chunks/{target}/questions", headers=_as(EVE_KEY)).json()
    assert [q["id"] for q in shown["questions"] if q["origin"] == "manual"] == [question_id]
    bad = httpx.post(path, json={"text": "a\x1bb"}, headers=_as(ADMIN_KEY))
    assert bad.status_code == 400 and "control characters" in bad.json()["error"]
    assert httpx.delete(f"{url}/questions/{question_id}",
                        headers=_as(BOB_KEY)).status_code == 403
    assert httpx.delete(f"{url}/questions/{question_id}",
                        headers=_as(ADMIN_KEY)).status_code == 204
    assert httpx.post(f"{url}/questions/{question_id}/enable",
                      headers=_as(ADMIN_KEY)).status_code == 204
    edited = httpx.put(f"{url}/questions/{question_id}", json={"text": "which hall"},
                       headers=_as(ADMIN_KEY))
    assert edited.status_code == 200 and edited.json()["id"] != question_id
    assert httpx.delete(f"{url}/questions/{'0' * 16}",
                        headers=_as(ADMIN_KEY)).status_code == 404


def test_each_question_guard_stops_its_own_key(served: Any, tmp_path: Path) -> None:
    """Each guard alone (issue 42, item 24: with only read-only users in the tests, the
    write rule and the administrator check hid each other): an administrator's key that
    may only read cannot change questions (the write rule), a user's key that may write
    cannot either (the administrator check), and a user's key cannot ingest over MCP on a
    server that has serve_roots (so the roots check does not hide it)."""
    url, iso = served
    target = _chunk_of(iso, "museum")
    made = httpx.post(f"{url}/chunks/{target}/questions", json={"text": "which hall"},
                      headers=_as(ADMIN_KEY))
    question_id = made.json()["id"]
    calls = [("POST", f"/chunks/{target}/questions", {"text": "which boat is there"}),
             ("PUT", f"/questions/{question_id}", {"text": "which room"}),
             ("DELETE", f"/questions/{question_id}", None),
             ("POST", f"/questions/{question_id}/enable", None)]
    for method, path, body in calls:
        for key, says in ((READER_KEY, "read"), (WRITER_KEY, "administrator")):
            refused = httpx.request(method, url + path, json=body, headers=_as(key))
            assert refused.status_code == 403 and says in refused.text, (method, path, key)
    shown = httpx.get(f"{url}/chunks/{target}/questions", headers=_as(ADMIN_KEY)).json()
    assert [q["id"] for q in shown["questions"] if q["origin"] == "manual"] == [question_id]
    docs = tmp_path / "roots"
    docs.mkdir()
    (docs / "new.md").write_text("# New\n\nThe okapi pavilion opens in June.\n")
    keys = Keys.from_settings(Settings(api_keys_file=tmp_path / "keys"))
    with served_on_loopback(create_app(iso, keys=keys, roots=[docs], max_bytes=1_000_000,
                                       uploads=tmp_path / "up2")) as rooted:
        async def agent(key: str) -> Any:
            client = httpx.AsyncClient(headers=_as(key))
            async with streamable_http_client(rooted + "/mcp/", http_client=client) as (
                    read, write, _), ClientSession(read, write) as session:
                await session.initialize()
                return await session.call_tool("ingest", {"paths": [str(docs)]})

        refused = anyio.run(agent, WRITER_KEY)
        assert refused.isError and "administrator" in refused.content[0].text
        assert not iso.has_source(str(docs / "new.md"))
        assert not anyio.run(agent, ADMIN_KEY).isError
        assert iso.has_source(str(docs / "new.md"))


def test_a_key_that_may_only_read_teaches_through_review(served: Any) -> None:
    """An administrator's read-only key sees everything but writes nothing by itself: what
    its marks teach waits for review."""
    url, iso = served
    target = _chunk_of(iso, "lighthouse")
    found = httpx.post(f"{url}/search", json={"query": ASKED, "k": 4},
                       headers=_as(READER_KEY)).json()
    done = httpx.post(f"{url}/feedback", json={"query_id": found["query_id"],
                                               "chunk_id": target}, headers=_as(READER_KEY))
    assert done.status_code == 200 and done.json()["learned"] == "pending"
    assert not [q for q in iso.questions(chunk_id=target) if q.origin == "user"]

