"""A folder of many small files ingests at the pace of the models, not of one embedding
round trip and one wait per file (issue 44): files are read ahead and their sources
embedded together, each still stored in its own transaction, and an embedding that fails
leaves out only the file it was for. The real bundled embedding model (counted, or made to
fail on one word, by a wrapper) and the real SQLite store; no language model is needed
(questions later)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from isotope import Isotope
from isotope.embedders import Embedder, Vectors
from isotope.errors import ProviderError

from conftest import FakeLLM

WORDS = ["amber", "basalt", "cobalt", "dune", "ember", "fjord", "garnet", "heath", "indigo",
         "jasper"]


class Watched(Embedder):
    """The real model, its calls counted; a text holding ``refuse`` fails (as a remote
    embedding server refusing one input would)."""

    def __init__(self, real: Embedder, refuse: str | None = None) -> None:
        self.real, self.refuse = real, refuse
        self.model_id, self.dim, self.batch_size = real.model_id, real.dim, real.batch_size
        self.calls = 0

    def embed_batch(self, texts: Sequence[str]) -> Vectors:
        return self.real.embed_batch(texts)

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.calls += 1
        if self.refuse is not None and any(self.refuse in t for t in texts):
            raise ProviderError(f"the embedding server refused an input ({self.refuse})")
        return self.real.embed(texts)

    def count_tokens(self, text: str) -> int | None:
        return self.real.count_tokens(text)


def _folder(tmp_path: Path, n: int) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(n):
        word = f"{WORDS[i % len(WORDS)]}{i}"
        (folder / f"note-{i:02d}.md").write_text(
            f"# Note {i}\n\nThe {word} cabinet stands in room {i}. It holds {i + 2} maps.\n")
    return folder


def test_small_files_are_embedded_together_not_a_round_trip_each(
        tmp_path: Path, embedder: Embedder) -> None:
    folder = _folder(tmp_path, 40)
    watched = Watched(embedder)
    with Isotope.open(tmp_path / "index", embedder=watched, llm=FakeLLM(),
                      cache=False) as iso:
        report = iso.ingest(folder, questions="later")
        assert report.ok and len(report.added) == 40
        # one source at first (the model's first calls wait for nothing more), then
        # twice as many each time: 1 + 2 + 4 + 8 + 16 + 9, not 40
        assert watched.calls <= 7, watched.calls
        assert iso.check() == []
        top = iso.search("Where does the jasper39 cabinet stand?", k=1).results[0]
        assert top.chunk.source.endswith("note-39.md")
        assert iso.status().counts["sources"] == 40


def test_an_embedding_that_fails_leaves_out_only_its_file(
        tmp_path: Path, embedder: Embedder) -> None:
    folder = _folder(tmp_path, 12)
    watched = Watched(embedder, refuse="garnet6")
    with Isotope.open(tmp_path / "index", embedder=watched, llm=FakeLLM(),
                      cache=False) as iso:
        report = iso.ingest(folder, questions="later")
        assert [Path(e.path).name for e in report.errors] == ["note-06.md"]
        assert "refused an input" in report.errors[0].message
        assert len(report.added) == 11 and iso.check() == []
        stored = {Path(i.source.uri).name for i in iso.sources()}
        assert "note-06.md" not in stored and "note-07.md" in stored
    # the next ingest, with the server taking it, adds the file left out and only it
    with Isotope.open(tmp_path / "index", embedder=Watched(embedder), llm=FakeLLM(),
                      cache=False) as iso:
        again = iso.ingest(folder, questions="later")
        assert [Path(u).name for u in again.added] == ["note-06.md"]
        assert len(again.unchanged) == 11


def test_an_email_whose_embedding_fails_is_left_out_with_its_attachment(
        tmp_path: Path, embedder: Embedder) -> None:
    """Stored without its email, an attachment would not have the list it follows (the
    email's senders and recipients): a review found it stored with none, visible to all,
    and kept so as unchanged by the next ingest. Now both are left out, and the next
    ingest stores both, the attachment with its email's list."""
    import shutil

    folder = tmp_path / "mail"
    folder.mkdir()
    shutil.copy(Path(__file__).parent.parent / "examples" / "formats" /
                "offsite-planning.eml", folder)
    (folder / "notes.md").write_text("# Notes\n\nThe cobalt cabinet stands in room 4.\n")
    refusing = Watched(embedder, refuse="Hotel Almada")
    with Isotope.open(tmp_path / "index", embedder=refusing, llm=FakeLLM(), cache=False,
                      email_access=True) as iso:
        report = iso.ingest(folder, questions="later")
        assert [Path(e.path).name for e in report.errors] == ["offsite-planning.eml"]
        assert [Path(u).name for u in report.added] == ["notes.md"]
    with Isotope.open(tmp_path / "index", embedder=Watched(embedder), llm=FakeLLM(),
                      cache=False, email_access=True) as iso:
        again = iso.ingest(folder, questions="later")
        names = sorted(Path(u).name for u in again.added)
        assert names == ["offsite-planning.eml", "offsite-planning.eml#agenda.txt"]
        email, attachment = (iso.store.get_source(u) for u in sorted(again.added))
        assert email is not None and attachment is not None
        assert attachment.access == email.access and email.access  # (its list, not none)
