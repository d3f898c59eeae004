"""Prompts live in one module (isotope.prompts); the fingerprint and status read them, and
a prompts_dir overrides any of them. Real store and embedder; the model's reply is fake."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from isotope import Isotope, prompts
from isotope.cli import app
from isotope.embedders import Embedder
from isotope.errors import SettingsError
from isotope.providers import LLM, Prompt

from conftest import FakeLLM

KNOWN = {  # name: (version, hash of the text): a text change must bump the version
    "questions": ("q1", "f43b764048769b21"),
    "questions-chunk": ("qc1", "4ccb2a5df0197ab8"),
    "questions-numbered": ("qn1", "6494481efb59543c"),
    "graph": ("g1", "eaf3ed19010344d9"),
    "questions-repair": ("r1", "082d76ceb70690df"),
    "atomizer": ("a2", "11841d2e75728f0e"),
    "context": ("context-1", "668ec501fe32ac3c"),
    "answer": ("ans4", "f76dc70b3ce24417"),
    "check": ("chk1", "a0a1e51c87e83a4c"),
    "transform": ("t1", "d5f59650001543fe"),
}


def test_every_prompt_text_is_pinned_to_its_version() -> None:
    found = {name: (p.version, p.digest) for name, p in prompts.PROMPTS.items()}
    changed = [n for n in KNOWN if found.get(n) != KNOWN[n]]
    assert not changed, (
        f"prompt(s) {changed} changed: bump the version in isotope/prompts.py (so indexes "
        "and the cache know), then update KNOWN here")
    assert set(found) == set(KNOWN)


def test_a_new_atomizer_prompt_regenerates_with_the_llm_atomizer(
    tmp_path: Path, embedder: Embedder, examples: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Isotope.open(tmp_path / "idx", embedder=embedder, llm=FakeLLM(),
                      atomizer="llm") as iso:
        assert len(iso.ingest(examples).added) == 4
    newer = dataclasses.replace(prompts.PROMPTS["atomizer"], version="a3")
    monkeypatch.setitem(prompts.PROMPTS, "atomizer", newer)
    with Isotope.open(tmp_path / "idx", embedder=embedder, llm=FakeLLM()) as iso:
        report = iso.ingest(examples)
        assert len(report.replaced) == 4 and not report.unchanged  # was: all "unchanged"
    with Isotope.open(tmp_path / "plain", embedder=embedder, llm=FakeLLM()) as iso:
        iso.ingest(examples)
    monkeypatch.setitem(prompts.PROMPTS, "atomizer", dataclasses.replace(newer, version="a4"))
    with Isotope.open(tmp_path / "plain", embedder=embedder, llm=FakeLLM()) as iso:
        assert len(iso.ingest(examples).unchanged) == 4  # the sentence atomizer: no change


def _override(folder: Path, name: str, system: str, user: str | None = None) -> Path:
    folder.mkdir(exist_ok=True)
    spec = prompts.PROMPTS[name]
    (folder / f"{name}.txt").write_text(f"{system}\n---\n{user or spec.user}\n")
    return folder


def test_an_overridden_question_prompt_redoes_questions_only(
    tmp_path: Path, embedder: Embedder, examples: Path
) -> None:
    llm = FakeLLM()
    with Isotope.open(tmp_path / "one", embedder=embedder, llm=llm, atomizer="llm") as iso:
        first = iso.ingest(examples)
    brief = _override(tmp_path / "prompts", "questions",
                      prompts.PROMPTS["questions"].system + " Be brief.")
    llm.prompts.clear()
    with Isotope.open(tmp_path / "one", embedder=embedder, llm=llm, atomizer="llm",
                      prompts_dir=brief) as iso:
        second = iso.ingest(examples)
        status = iso.status()
    assert len(second.replaced) == 4  # the fingerprint saw the new prompt
    asked = [p[0]["content"] for p in llm.prompts]
    assert asked and all(a.endswith("Be brief.") for a in asked), "only question prompts"
    assert second.llm_calls == first.atoms
    assert second.llm_cache_hits == first.chunks  # the atomizer's replies
    assert status.prompt_versions["questions"] == f"q1 (overridden by {brief / 'questions.txt'})"
    assert status.prompt_versions["answer"] == "ans4" and len(status.prompt_versions) == 10


def test_config_shows_overridden_prompts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    folder = _override(tmp_path / "prompts", "answer", "Answer like a pirate.")
    monkeypatch.setenv("ISOTOPE_PROMPTS_DIR", str(folder))
    shown = CliRunner().invoke(app, ["config", "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["overridden_prompts"] == {
        "answer": str(folder / "answer.txt")}
    text = CliRunner().invoke(app, ["config"])
    assert f"prompt answer: overridden by {folder / 'answer.txt'}" in " ".join(
        text.output.split())


def test_an_overridden_answer_prompt_is_what_the_model_gets(
    tmp_path: Path, embedder: Embedder, examples: Path
) -> None:
    folder = _override(tmp_path / "prompts", "answer", "Answer like a pirate.",
                       "Question: $query\n\nPassages:\n$passages")
    llm = FakeLLM()
    with Isotope.open(tmp_path / "idx", embedder=embedder, llm=llm,
                      prompts_dir=folder) as iso:
        iso.ingest(examples / "handbook.md")
        llm.prompts.clear()
        iso.ask("How many vacation days do new employees get?")
    assert llm.prompts[-1][0]["content"] == "Answer like a pirate."
    assert llm.prompts[-1][1]["content"].startswith("Question: How many vacation days")


@pytest.mark.parametrize("name, text, message", [
    ("nonsense", "a\n---\nb", "no prompt is named 'nonsense'"),
    ("answer", "only a system text", "a line ---"),
    ("answer", "s\n---\n$query $secret", r"unknown field\(s\) \$secret"),
    ("answer", "s\n---\ncosts $ 5", "write \\$\\$ for a dollar sign"),
])
def test_a_bad_prompt_file_is_one_error_naming_it(tmp_path: Path, name: str, text: str,
                                                  message: str) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / f"{name}.txt").write_text(text)
    with pytest.raises(SettingsError, match=message) as raised:
        prompts.load(tmp_path / "prompts")
    assert f"{name}.txt" in str(raised.value)


class _BatchedFake(FakeLLM):
    """A model with batched decoding, declared; its replies are the fake's."""

    batch_sequences = 4

    def __init__(self) -> None:
        super().__init__()
        self.batched_calls = 0

    def sample_batched(self, groups: Sequence[Sequence[Prompt]], *, max_tokens: int,
                       temperature: float, questions: int) -> list[list[str]]:
        self.batched_calls += 1
        return [[self._reply("Statement: " + _statement(p[-1]["content"]) + "\n")
                 for p in prompts] for prompts in groups]


def _statement(content: str) -> str:
    """The statement a numbered prompt asks about: the text after its ``[N]`` marker."""
    import re

    number = re.findall(r"statement \[(\d+)\]", content)[-1]
    after = content.split(f"[{number}] ", 1)[1]
    return re.split(r" ?\[\d+\] |\n", after, maxsplit=1)[0].strip()


class _Logging(LLM):
    """A user's own wrapper around a model: it forwards what it declares."""

    def __init__(self, inner: LLM) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.batch_sequences = inner.batch_sequences

    def complete_batch(self, prompts: Sequence[Prompt], **kwargs: Any) -> list[str]:
        return self.inner.complete_batch(prompts, **kwargs)

    def sample_batched(self, groups: Sequence[Sequence[Prompt]], **kwargs: Any
                       ) -> list[list[str]]:
        return self.inner.sample_batched(groups, **kwargs)


def test_batched_generation_survives_wrappers(tmp_path: Path, embedder: Embedder,
                                              examples: Path) -> None:
    from isotope.ingest.generation import QuestionGenerator
    from isotope.providers.cache import Cache, CachedLLM

    model = _BatchedFake()
    wrapped = CachedLLM(_Logging(model), Cache(tmp_path / "cache.db"))
    generator = QuestionGenerator(wrapped, n=2, mode="batched")
    assert generator.window(8) == 16  # four fillings of the model's 4 slots
    with Isotope.open(tmp_path / "idx", embedder=embedder, llm=_Logging(model),
                      generation="batched") as iso:
        report = iso.ingest(examples / "handbook.md")
    assert model.batched_calls >= 1 and report.questions > 0
    assert FakeLLM().batch_sequences == 0  # a plain model declares none
    with pytest.raises(NotImplementedError, match="no batched decoding"):
        FakeLLM().sample_batched([], max_tokens=1, temperature=0, questions=1)
