"""The LangChain and LlamaIndex retrievers against the real packages, over the real
index (and over a served one through isotope.Client), with the network closed: a
framework that fetched data at import or first use would fail here."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from isotope import Client, Isotope
from isotope.server.app import create_app
from isotope.server.auth import Keys

from conftest import served_on_loopback

QUERY = "How many vacation days do new employees get?"


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Only loopback and Unix sockets may connect; any other attempt is recorded and
    refused."""
    attempts: list[Any] = []
    connect = socket.socket.connect

    def guarded(self: socket.socket, address: Any) -> None:
        host = address[0] if isinstance(address, tuple) else None
        if host is not None and host not in ("127.0.0.1", "::1", "localhost"):
            attempts.append(address)
            raise OSError(f"network closed in this test: {address}")
        connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    return attempts


@pytest.fixture
def filled(iso: Isotope, examples: Path) -> Isotope:
    iso.ingest(examples)
    return iso


def test_langchain_retriever_returns_documents_with_isotope_metadata(
        filled: Isotope, offline: list[Any]) -> None:
    from langchain_core.documents import Document

    from isotope.integrations.langchain import IsotopeRetriever

    retriever = IsotopeRetriever(index=filled, k=2)
    docs = retriever.invoke(QUERY)
    assert len(docs) == 2 and all(isinstance(d, Document) for d in docs)
    top = docs[0]
    assert "25 days of paid vacation" in top.page_content
    assert Path(top.metadata["source"]).name == "handbook.md"
    assert top.metadata["rank"] == 1 and 0 < top.metadata["score"] <= 1
    assert top.metadata["matched_questions"][0]["text"].endswith("?")
    assert top.metadata["headings"] and top.metadata["source_metadata"]["type"] == "markdown"
    assert top.id == top.metadata["chunk_id"]
    # filters pass through: at construction, and per call
    pdf_only = IsotopeRetriever(index=filled, filters={"type": "pdf"}).invoke(QUERY)
    assert pdf_only and {Path(d.metadata["source"]).suffix for d in pdf_only} == {".pdf"}
    html_only = retriever.invoke(QUERY, filters={"type": "html"})
    assert html_only and {Path(d.metadata["source"]).suffix for d in html_only} == {".html"}
    assert offline == []


def test_llamaindex_retriever_returns_nodes_with_scores(filled: Isotope,
                                                         offline: list[Any]) -> None:
    from llama_index.core.schema import MetadataMode, NodeWithScore

    from isotope.integrations.llamaindex import IsotopeRetriever

    nodes = IsotopeRetriever(filled, k=3).retrieve(QUERY)
    assert len(nodes) == 3 and all(isinstance(n, NodeWithScore) for n in nodes)
    top = nodes[0]
    assert "25 days of paid vacation" in top.node.get_content()
    assert Path(top.node.metadata["source"]).name == "handbook.md"
    assert top.score == top.node.metadata["score"] and top.node.node_id == top.node.metadata[
        "chunk_id"]
    assert top.node.metadata["matched_questions"]
    seen_by_llm = top.node.get_content(metadata_mode=MetadataMode.LLM)
    assert "matched_questions" not in seen_by_llm and "source:" in seen_by_llm
    pdf = IsotopeRetriever(filled, filters={"type": "pdf"}).retrieve(QUERY)
    assert pdf and {Path(n.node.metadata["source"]).suffix for n in pdf} == {".pdf"}
    assert offline == []


def test_both_retrievers_over_a_served_index(filled: Isotope, tmp_path: Path) -> None:
    from isotope.integrations.langchain import IsotopeRetriever as LangChainRetriever
    from isotope.integrations.llamaindex import IsotopeRetriever as LlamaRetriever

    app = create_app(filled, keys=Keys(), roots=[], max_bytes=1_000_000,
                     uploads=tmp_path / "up")
    with served_on_loopback(app) as url:
        client = Client(url)
        docs = LangChainRetriever(index=client, k=1).invoke(QUERY)
        nodes = LlamaRetriever(client, k=1).retrieve(QUERY)
    assert docs[0].page_content == nodes[0].node.get_content()
    assert Path(docs[0].metadata["source"]).name == "handbook.md"


def test_importing_them_fetches_nothing(tmp_path: Path) -> None:
    """A fresh interpreter with the network closed imports both and builds a retriever."""
    script = """
import socket
real = socket.socket.connect
def guard(self, address):
    if isinstance(address, tuple) and address[0] not in ("127.0.0.1", "::1"):
        raise SystemExit(f"tried to reach {address}")
    return real(self, address)
socket.socket.connect = guard
import isotope.integrations.langchain, isotope.integrations.llamaindex
from llama_index.core.schema import TextNode
TextNode(text="x").get_content()
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_a_missing_framework_names_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    from isotope.errors import MissingDependency

    real = builtins.__import__

    def without(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith(("langchain_core", "llama_index")):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real(name, *args, **kwargs)

    for module in ("isotope.integrations.langchain", "isotope.integrations.llamaindex"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.setattr(builtins, "__import__", without)
    with pytest.raises(MissingDependency, match=r"pip install 'isotopedb\[langchain\]'"):
        import isotope.integrations.langchain
    with pytest.raises(MissingDependency, match=r"pip install 'isotopedb\[llamaindex\]'"):
        import isotope.integrations.llamaindex  # noqa: F401


