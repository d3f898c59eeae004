"""The query adapter (issue 66): a linear map of the query's embedding fitted on the
index's own questions, applied to the statements' and chunks' dense signals only where it
beats none on the questions held out of its fit; kept in the index on every engine,
fitted again when the questions grew by a quarter, shown by ``isotope status``. Real
stores, the bundled embedder and the real pipeline; only the model's reply is the
deterministic fake."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from isotope import Chunk, Isotope
from isotope.cli import app
from isotope.embedders import Embedder
from isotope.errors import InvalidArgument
from isotope.search import adapter
from isotope.stores.copying import copy_index

from conftest import FakeLLM, location_of

ANIMALS = ["otter", "heron", "badger", "lynx", "marten", "stoat", "beaver", "crane", "hare",
           "vole", "wren", "newt"]
COLOURS = ["grey", "red", "brown", "white", "black", "spotted"]
PLACES = ["barn", "shed", "loft", "pond house", "garden hut", "boathouse", "stable"]
FOODS = ["fish", "berries", "grain", "eggs", "clover", "worms", "apples"]
KEEPERS = ["Ada", "Bram", "Cleo", "Dirk", "Esme", "Finn", "Greta", "Hugo", "Ines"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]


def _zoo(first: int, count: int) -> list[Chunk]:
    """``count`` chunks about the animals of a small zoo, numbered from ``first``, each
    its own source: alike enough that a question's words do not always find its own."""
    made = []
    for i in range(first, first + count):
        animal = f"{COLOURS[i % 6]} {ANIMALS[i % 12]}"
        made.append(Chunk(source=f"zoo-{i:03d}", text=(
            f"The {animal} sleeps in the {PLACES[(i * 5) % 7]}. "
            f"The {animal} eats {FOODS[(i * 3) % 7]} every morning. "
            f"Keeper {KEEPERS[(i * 7) % 9]} walks the {animal} on {DAYS[i % 6]}.")))
    return made


@pytest.fixture(params=["sqlite", "postgresql", "chroma", "postgresql-chroma"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Both engines, each with its vectors in Chroma too (the adapter is kept with the
    index's own description, whatever holds its vectors)."""
    return location_of(request, tmp_path)


def _raw(iso: Isotope, query: str, mode: str) -> list[tuple[str, float]]:
    return [(r.chunk.id, r.score) for r in iso.search(query, 5, mode=mode).results]


def test_the_adapter_is_fitted_kept_and_applied_to_the_dense_signals(
        location: str, tmp_path: Path, embedder: Embedder) -> None:
    query = "which animal eats grain at nine in the morning"
    with Isotope.open(location, embedder=embedder, llm=FakeLLM(), cache=False) as iso:
        iso.ingest_chunks(_zoo(0, 40))
        questions = iso.counts()["questions"]
        assert questions >= adapter.MIN_QUESTIONS
        assert iso.adapter_fit() is None  # (the setting is off: no fit by itself)
        before = {m: _raw(iso, query, m) for m in ("questions-dense", "chunks-dense",
                                                   "atoms-dense", "hybrid")}
        with pytest.raises(InvalidArgument, match=r"needs at least 100000 over 20 chunks"):
            iso.fit_adapter(min_questions=100_000)
        done = iso.fit_adapter()
        assert done.used and done.r1 > done.r1_identity, done
        assert done.questions == questions and 0 < done.held_out < questions
        assert done.pairs + done.held_out == questions and done.seconds > 0
        # fitted and kept, but the setting is off: searches are as they were
        assert {m: _raw(iso, query, m) for m in before} == before
        assert iso.status().query_adapter == {"setting": "off", "in_use": False,
                                              "fit": done.model_dump()}
    with Isotope.open(location, embedder=embedder, llm=FakeLLM(), cache=False,
                      query_adapter="linear") as iso:
        assert iso.adapter_fit() == done  # (kept in the index, read back)
        said = iso.status().query_adapter
        assert said["in_use"] and said["setting"] == "linear"
        after = {m: _raw(iso, query, m) for m in before}
        # question-to-question matching reads the query as embedded; the statements' and
        # chunks' dense signals the adapted query (scores no other vector gives)
        assert after["questions-dense"] == before["questions-dense"]
        for mode in ("chunks-dense", "atoms-dense"):
            assert after[mode] != before[mode]
            mapped = adapter.load(iso.store)
            assert mapped is not None
            vector = mapped.apply(iso.embedder.embed_one(query))
            best = iso.store.search_by_chunk(mode.split("-")[0], vector, 1, 3)[0]
            assert best[0] == after[mode][0][0]
        assert iso.check() == []  # (the stored vectors and their indexes untouched)
    copy_index(location, tmp_path / "copy")  # the fit goes with a copy
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("ISOTOPE_VECTOR_BACKEND", raising=False)  # (the copy's: usearch)
        with Isotope.open(tmp_path / "copy", embedder=embedder, llm=FakeLLM(), cache=False,
                          query_adapter="linear") as copy:
            assert copy.adapter_fit() == done
            copied = adapter.load(copy.store)
            assert copied is not None and np.array_equal(copied.matrix, mapped.matrix)
            assert [c for c, _ in _raw(copy, query, "chunks-dense")] == [
                c for c, _ in after["chunks-dense"]]  # (scores: each engine's own)


def test_an_adapter_that_does_not_beat_none_is_not_used(tmp_path: Path,
                                                        embedder: Embedder) -> None:
    """A fit that places fewer held-out questions first than the query as embedded (a
    map that scrambles the query) is kept, said not used, and never applied."""
    query = "which animal eats grain at nine in the morning"
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM(), cache=False,
                      query_adapter="linear") as iso:
        iso.ingest_chunks(_zoo(0, 40))
        fitted = iso.adapter_fit()
        assert fitted is not None and fitted.used  # (fitted after the ingest: it helps)
        iso.settings.query_adapter = "off"
        before = {m: _raw(iso, query, m) for m in ("chunks-dense", "atoms-dense", "hybrid")}
        iso.settings.query_adapter = "linear"
        assert {m: _raw(iso, query, m) for m in before} != before
        turned = np.linalg.qr(np.random.default_rng(3).normal(size=(384, 384)))[0]
        with pytest.MonkeyPatch.context() as patch:  # (a fit that scrambles the query)
            patch.setattr(adapter, "train_linear", lambda *a, **k: turned.astype(np.float32))
            done = iso.fit_adapter()
        assert not done.used and done.r1 < done.r1_identity
        assert adapter.load(iso.store) is None
        assert {m: _raw(iso, query, m) for m in before} == before
        said = iso.status().query_adapter
        assert said == {"setting": "linear", "in_use": False, "fit": done.model_dump()}
        assert "not in use: it did not beat none" in adapter.summary(said)
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM(), cache=False,
                      query_adapter="linear") as iso:  # (another process reads the same)
        assert {m: _raw(iso, query, m) for m in before} == before


def test_an_adapter_that_only_ties_with_none_is_not_used(tmp_path: Path,
                                                         embedder: Embedder) -> None:
    """Chunks that no question can miss (each about a subject of its own): the query as
    embedded already finds every held-out question's chunk first, so no fit can beat
    it, and none is used."""
    subjects = ["volcano", "violin", "glacier", "bakery", "satellite", "orchard", "harbour",
                "library", "chess", "beekeeping", "tunnel", "opera", "desert", "printing",
                "lighthouse", "vaccine", "canal", "tapestry", "comet", "windmill", "sushi",
                "rainforest"]
    chunks = [Chunk(source=s, text=f"The {s} topic is described here. Everything about the "
                    f"{s} is unusual. People visit the {s} for many reasons.")
              for s in subjects]
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM(), cache=False,
                      query_adapter="linear") as iso:
        iso.ingest_chunks(chunks)
        done = iso.fit_adapter(min_questions=50)
        assert done.r1_identity == 1.0 and done.r1 <= 1.0 and not done.used
        assert adapter.load(iso.store) is None
        assert iso.status().query_adapter["in_use"] is False


def test_the_adapter_is_fitted_again_when_the_questions_grew_by_a_quarter(
        tmp_path: Path, embedder: Embedder) -> None:
    with Isotope.open(tmp_path / "off", embedder=embedder, llm=FakeLLM(),
                      cache=False) as iso:  # (the setting off: never fitted by itself)
        iso.ingest_chunks(_zoo(0, 40))
        iso.compact()
        assert iso.adapter_fit() is None
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM(), cache=False,
                      query_adapter="linear") as iso:
        iso.ingest_chunks(_zoo(0, 12))  # too few questions yet
        assert iso.adapter_fit() is None
        iso.ingest_chunks(_zoo(12, 28), questions="later")  # (no questions: no fit)
        assert iso.adapter_fit() is None
        iso.enrich()
        first = iso.adapter_fit()
        assert first is not None and first.questions == iso.counts()["questions"]
        iso.ingest_chunks(_zoo(40, 6))  # under a quarter more: the same fit
        grown = iso.counts()["questions"]
        assert grown < 1.25 * first.questions and iso.adapter_fit() == first
        iso.ingest_chunks(_zoo(46, 6))  # a quarter more: fitted again
        second = iso.adapter_fit()
        assert second is not None and second.fit_id != first.fit_id
        assert second.questions == iso.counts()["questions"] >= 1.25 * first.questions
    with Isotope.open(tmp_path / "off", embedder=embedder, llm=FakeLLM(), cache=False,
                      query_adapter="linear") as iso:
        iso.compact()  # (the setting turned on: compact fits what is due)
        fitted = iso.adapter_fit()
        assert fitted is not None and fitted.questions == iso.counts()["questions"]


def test_users_confirmed_queries_join_the_fit_no_user_beyond_a_quarter(
        tmp_path: Path, embedder: Embedder) -> None:
    """Queries marked useful and learned join the pairs (one each); one user who gave
    most of the marks gives at most a quarter of those read (10 at least), the rest left
    out, as for the fitted weights."""
    with Isotope.open(tmp_path / "index", embedder=embedder, llm=FakeLLM(), cache=False,
                      query_log=True, learn="auto") as iso:
        iso.ingest_chunks(_zoo(0, 40))
        plain = iso.fit_adapter()
        assert plain.confirmed == 0 and plain.left_out == 0

        def mark(principal: str, query: str) -> None:
            found = iso.search(query, 3, mode="hybrid", principal=principal)
            assert iso.feedback(found.query_id or "", found.results[0].chunk.id,
                                principal=principal).learned in ("learned", "duplicate")

        for i in range(30):
            mark("user:mallory", f"does animal number {i} of the zoo have a keeper")
        for i in range(5):
            mark("user:alice", f"when is the {ANIMALS[i]} fed")
        done = iso.fit_adapter()
        # 35 marks read: mallory's beyond max(10, a quarter) are left out, and so are the
        # questions they taught
        assert done.confirmed == 15 and done.left_out == 20
        assert done.questions == iso.counts()["questions"] > plain.questions
        assert done.pairs + done.held_out == plain.questions + 15


def test_the_command_line_fits_and_shows_the_adapter(tmp_path: Path,
                                                     embedder: Embedder) -> None:
    index = tmp_path / "index"
    with Isotope.open(index, embedder=embedder, llm=FakeLLM(), cache=False) as iso:
        iso.ingest_chunks(_zoo(0, 40))
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(app, [*args, "-i", str(index)])
        assert result.exit_code == 0, result.output
        return " ".join(result.stdout.split())  # (a table's lines folded at 80 columns)

    assert json.loads(run("adapter", "--json")) == {"setting": "off", "in_use": False,
                                                    "fit": None}
    assert "query adapter off (never fitted)" in run("status")
    refused = runner.invoke(app, ["adapter", "fit", "--min-questions", "100000", "-i",
                                  str(index)])
    assert refused.exit_code != 0 and "needs at least 100000" in refused.output
    done = json.loads(run("adapter", "fit", "--json"))
    assert done["used"] and done["r1"] > done["r1_identity"] and done["held_out"] > 0
    assert "the setting query_adapter is off" in run("adapter", "fit")
    shown = json.loads(run("adapter", "show", "--json"))
    assert shown["fit"]["questions"] == done["questions"] and not shown["in_use"]
    last, said = shown["fit"], run("status")
    assert f"query adapter off (fitted {last['at']} on {last['questions']:,} questions" in said
    assert (f"R@1 of the {last['held_out']:,} held out {100 * last['r1_identity']:.1f}% "
            f"without it, {100 * last['r1']:.1f}% with it)") in said
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ISOTOPE_QUERY_ADAPTER", "linear")
        assert "query adapter linear, in use; fitted" in run("status")
        assert json.loads(run("status", "--json"))["query_adapter"]["in_use"] is True
    helped = runner.invoke(app, ["adapter", "--help"])
    assert helped.exit_code == 0 and "fit" in helped.output
