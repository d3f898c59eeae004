"""Tenants (issue 28): `isotope serve --project alpha --project beta` serves each project
at /p/NAME/ (the first also unprefixed), each its own index sharing nothing; a key that
lists its projects gets 404 on any other's routes, as for a project that does not exist.
A real uvicorn server on loopback over real indexes (the fake model at the boundary)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from isotope import Client, Isotope, projects
from isotope.embedders import Embedder
from isotope.errors import SourceNotFound
from isotope.settings import Settings

from conftest import FakeLLM, served_on_loopback

pytest.importorskip("fastapi", reason="pip install 'isotopedb[server]'")
from isotope.server.app import serving_app

ALPHA_KEY, BETA_KEY, ADMIN_KEY = "A" * 24, "B" * 24, "Z" * 24
DOCS = {"alpha": "The alpha team brews cardamom coffee every Tuesday.",
        "beta": "The beta team keeps a pet tortoise called Gustav."}


@pytest.fixture
def two_projects(tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
                 ) -> Iterator[str]:
    for name, text in DOCS.items():
        path = projects.create(name)
        (tmp_path / f"{name}.md").write_text(f"# {name}\n\n{text}\n")
        with Isotope.open(path, embedder=embedder, llm=FakeLLM(), cache=False) as iso:
            iso.ingest(tmp_path / f"{name}.md")
    keys = tmp_path / "keys"
    keys.write_text(f"{ALPHA_KEY} read projects=alpha\n{BETA_KEY} projects=beta\n"
                    f"{ADMIN_KEY}\n")
    monkeypatch.setenv("ISOTOPE_API_KEYS_FILE", str(keys))
    monkeypatch.setenv("ISOTOPE_SERVE_INDEX", projects.location_of("alpha", Settings()))
    monkeypatch.setenv("ISOTOPE_SERVE_PROJECT", "alpha")
    monkeypatch.setenv("ISOTOPE_SERVE_PROJECTS", json.dumps(
        {"beta": projects.location_of("beta", Settings())}))
    with served_on_loopback(serving_app()) as url:
        yield url


def _sources(client: Client) -> set[str]:
    return {Path(s.source.uri).stem for s in client.sources()}


def test_each_project_is_its_own_index_and_a_key_sees_only_its_projects(
        two_projects: str) -> None:
    url = two_projects
    alpha, beta, admin = (Client(url, api_key=k) for k in (ALPHA_KEY, BETA_KEY, ADMIN_KEY))
    # the first project is at / and at /p/alpha/; beta only at /p/beta/
    assert _sources(alpha) == {"alpha"}
    assert _sources(Client(url + "/p/alpha", api_key=ALPHA_KEY)) == {"alpha"}
    assert _sources(Client(url + "/p/beta", api_key=BETA_KEY)) == {"beta"}
    assert _sources(Client(url + "/p/beta", api_key=ADMIN_KEY)) == {"beta"}
    assert _sources(admin) == {"alpha"}
    found = Client(url + "/p/beta", api_key=BETA_KEY).search("Who is Gustav?").results
    assert found and all("beta" in r.chunk.source for r in found)
    # a key on another project's routes: 404, as for a project that does not exist
    for client, other in ((Client(url + "/p/beta", api_key=ALPHA_KEY), "beta"),
                          (beta, "alpha"), (Client(url + "/p/nothing", api_key=ALPHA_KEY),
                                            "nothing")):
        with pytest.raises(SourceNotFound, match="no route") as refused:
            client.search("Who is Gustav?")
        assert "Gustav" not in str(refused.value), other
    with pytest.raises(SourceNotFound, match="no route"):
        Client(url + "/p/nothing", api_key=ADMIN_KEY).search("x")
    # each project's page and schema open without a key, as the first's
    import httpx

    for path in ("/p/beta/", "/p/beta/app.js", "/p/alpha/", "/p/beta/openapi.json"):
        assert httpx.get(url + path).status_code == 200, path
    assert httpx.get(url + "/p/beta/sources").status_code == 401
    # writes follow each project's own scope: a read key of alpha cannot write anywhere
    with pytest.raises(Exception, match="only read"):
        Client(url + "/p/alpha", api_key=ALPHA_KEY).delete("alpha.md")


def test_a_query_id_of_one_project_is_not_found_in_another(two_projects: str) -> None:
    """Each project keeps its own query log: the administrator's search in alpha marked
    in beta is 'no search' (404), in alpha it is taken."""
    url = two_projects
    alpha, beta = Client(url, api_key=ADMIN_KEY), Client(url + "/p/beta", api_key=ADMIN_KEY)
    found = alpha.search("What does the alpha team brew?")
    assert found.query_id and found.results
    with pytest.raises(SourceNotFound, match="no search"):
        beta.feedback(found.query_id, found.results[0].chunk.id)
    assert alpha.feedback(found.query_id, found.results[0].chunk.id).useful
