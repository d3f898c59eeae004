"""stores.open: one registry of index locations. A directory is the embedded SQLite store;
a URL goes to the backend registered for its scheme, imported only when used."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from isotope import Isotope, stores
from isotope.cli import app
from isotope.embedders import Embedder
from isotope.errors import InvalidIndex, MissingDependency
from isotope.stores.sqlite import SQLiteStore

from conftest import FakeLLM


@pytest.fixture
def mirror() -> Iterator[None]:
    """A backend for ``mirror://PATH``: the SQLite store at PATH (a stand-in for a server
    store, so that the registry's path is exercised end to end)."""
    stores.register("mirror", lambda location, create: SQLiteStore(
        location.split("://", 1)[1], create=create))
    yield
    stores._BACKENDS.pop("mirror")


def test_a_directory_is_the_embedded_store(tmp_path: Path) -> None:
    store = stores.open(tmp_path / "idx")
    assert isinstance(store, SQLiteStore) and stores.exists(tmp_path / "idx")
    store.close()
    with pytest.raises(InvalidIndex, match="no index at"):
        stores.open(str(tmp_path / "none"), create=False)


def test_an_unknown_scheme_is_one_error_naming_what_is_known(mirror: None) -> None:
    with pytest.raises(InvalidIndex, match=r"no store serves redis:// locations .*mirror://"):
        stores.open("redis://localhost/0")


def test_a_backend_whose_extra_is_missing_names_the_extra() -> None:
    stores.register("fakedb", "isotope_no_such_backend:Store", extra="fakedb")
    try:
        with pytest.raises(MissingDependency, match=r"pip install 'isotopedb\[fakedb\]'"):
            stores.open("fakedb://user:secret@host/db")
    finally:
        stores._BACKENDS.pop("fakedb")


def test_an_index_at_a_url_works_end_to_end(tmp_path: Path, embedder: Embedder,
                                            examples: Path, mirror: None) -> None:
    location = f"mirror://{tmp_path / 'served'}"
    with Isotope.open(location, embedder=embedder, llm=FakeLLM()) as iso:
        iso.ingest(examples / "handbook.md")
        assert iso.status().index == location and iso.project is None
        assert repr(iso) == f"Isotope(index={location!r})"
    env = {"ISOTOPE_QUESTION_MODEL": "fake/echo", "ISOTOPE_ANSWER_MODEL": "fake/echo"}
    shown = CliRunner().invoke(app, ["query", "How many vacation days?", "--raw", "--json",
                                     "--index", location], env=env)
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["results"][0]["chunk"]["source"].endswith("handbook.md")
    listed = CliRunner().invoke(app, ["list", "--json"], env={"ISOTOPE_INDEX": location})
    assert [Path(s["uri"]).name for s in json.loads(listed.stdout)] == ["handbook.md"]


def test_a_bare_index_name_stays_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          examples: Path) -> None:
    monkeypatch.chdir(tmp_path)
    env = {"ISOTOPE_QUESTION_MODEL": "fake/echo"}
    done = CliRunner().invoke(app, ["ingest", str(examples / "faq.html"), "--index", "idx"],
                              env=env)
    assert done.exit_code == 0, done.output
    assert (tmp_path / "idx" / "isotope.db").is_file()
    assert not (tmp_path / "projects" / "idx").exists()


def test_a_password_in_a_location_is_never_shown() -> None:
    assert stores.describe("postgresql://me:s3cret@db.local/isotope") == (
        "postgresql://me:***@db.local/isotope")
    assert stores.scheme("postgresql+psycopg://x") == "postgresql+psycopg"
    assert stores.scheme("C:/data/index") is None and stores.scheme("./idx") is None


def test_a_project_can_keep_its_index_at_a_location(tmp_path: Path, examples: Path,
                                                     mirror: None) -> None:
    runner = CliRunner()
    env = {"ISOTOPE_QUESTION_MODEL": "fake/echo", "ISOTOPE_ANSWER_MODEL": "fake/echo"}
    location = f"mirror://{tmp_path / 'served'}"
    made = runner.invoke(app, ["project", "create", "shared", "--index", location, "--use"])
    assert made.exit_code == 0 and f"at {location} (default)" in made.output, made.output
    assert (tmp_path / "served" / "isotope.db").is_file()  # the index is there...
    assert not (tmp_path / "projects" / "shared" / "isotope.db").exists()  # ...not here
    done = runner.invoke(app, ["ingest", str(examples / "faq.html")], env=env)
    assert done.exit_code == 0, done.output
    shown = runner.invoke(app, ["project", "show", "shared", "--json"])
    assert json.loads(shown.stdout)["location"] == location
    assert json.loads(shown.stdout)["counts"]["sources"] == 1
    status = runner.invoke(app, ["status", "--json"])
    assert json.loads(status.stdout)["index"] == location
    assert json.loads(status.stdout)["project"] == "shared"
    gone = runner.invoke(app, ["project", "delete", "shared", "--yes"])
    assert gone.exit_code == 0 and f"{location}, was left as it is" in " ".join(
        gone.output.split())
    assert (tmp_path / "served" / "isotope.db").is_file()
