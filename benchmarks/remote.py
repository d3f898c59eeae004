"""Ingest against a remote model server (issue 27): how busy isotope keeps it.

    .venv/bin/python benchmarks/remote.py [--passages 60] [--concurrency 8]
        [--latency-ms 300] [--remote-embeddings [--embed-latency-ms 30]] [--enrich] [--json]
    .venv/bin/python benchmarks/remote.py --files [--passages 60] [--concurrency 8] ...
    .venv/bin/python benchmarks/remote.py --url http://GPU-BOX:8000/v1 --model NAME
        [--passages 300] [--concurrency 64] [--json]      # a real server: questions/s

Starts its own stub OpenAI-compatible server on loopback (tests/openai_server.py: it
answers every chat call after ``--latency-ms``, with questions that reword the statement,
and embeddings from hashed words), then ingests the first ``--passages`` squad-dev
passages with ``--questions now`` through the ``openai/`` provider at ``llm_concurrency =
--concurrency``, cache off. Embeddings are the bundled local model unless
``--remote-embeddings``.

With ``--files``, the passages are written as ``.txt`` files (one each) and ingested as a
user does it: ``isotope ingest DIR --questions now --json`` in a process of its own, its
settings from the environment; the stage times come from its JSON report. The JSON keys are
the same.

With ``--url`` (and ``--model``, the name the server serves), the same ingest runs against
that server instead (a GPU box running vLLM or llama.cpp's server, see the README's
"Questions from a GPU"): ``calls`` is then the ingest's model calls, ``in_flight_mean`` is
not measured, and ``questions_per_s`` is what to compare.

Prints ``calls`` (chat calls the server answered), ``wall_s`` (the whole ingest, or with
``--enrich`` the ``isotope enrich`` after an untimed ``--questions later`` ingest: the
generation phase alone), ``generation_s`` (first call in to last call out),
``in_flight_mean`` (calls in flight on average over the generation span), ``ideal_s``
(calls x latency / concurrency: the generation span of a pipeline that keeps every slot
busy), ``bound_s`` (``ideal_s`` + the run's embedding and storing time: the wall time of
doing them one after the other; ``wall_over_bound``), ``cpu_ms_per_question`` (this
process's CPU per question generated: with ``--remote-embeddings``, isotope's own work
without embedding) and the report's stage times. The baseline is ``ideal_s``, computed for
the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from isotope import Isotope
from isotope.search import evaluation

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "eval" / "squad-dev"


def on_server(url: str, model: str, passages: int, concurrency: int) -> dict[str, Any]:
    """The ingest against a real OpenAI-compatible server."""
    chunks, _ = evaluation.load(DATA / "passages.jsonl", DATA / "queries.jsonl", passages)
    with tempfile.TemporaryDirectory() as folder, Isotope.open(
            Path(folder) / "index", question_model=f"openai/{model}@{url}",
            llm_concurrency=concurrency, cache=False) as iso:
        started = time.monotonic()
        report = iso.ingest_chunks(evaluation.chunks_of(chunks), questions="now")
        wall = time.monotonic() - started
    return {"passages": passages, "concurrency": concurrency, "url": url,
            "calls": report.llm_calls, "wall_s": round(wall, 2),
            "questions": report.questions,
            "questions_per_s": round(report.questions_generated / wall, 1),
            "stage_s": {k: round(v, 2) for k, v in report.timings.items()}}


class _Report:
    """What the figures read of an ingest's report (in memory, or the CLI's JSON)."""

    def __init__(self, questions: int, generated: int, timings: dict[str, float]) -> None:
        self.questions, self.questions_generated, self.timings = questions, generated, timings


def through_cli(folder: Path, files: Path, models: dict[str, Any]) -> tuple[_Report, float,
                                                                             float]:
    """``isotope ingest FILES --questions now --json`` in a process of its own (settings
    from the environment, as a user sets them): its report, wall and CPU seconds."""
    import os
    import resource

    env = {**os.environ, **{f"ISOTOPE_{k.upper()}": str(v) for k, v in models.items()}}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "isotope", "ingest", str(files),
                           "--index", str(folder / "index"), "--questions", "now", "--json"],
                          env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"isotope ingest failed ({done.returncode}): {done.stderr[-2000:]}")
    said = json.loads(done.stdout)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return (_Report(said["questions"], said["questions_generated"], said["timings"]), wall,
            cpu)


def run(passages: int, concurrency: int, latency_ms: float, remote_embeddings: bool,
        enrich: bool = False, files: bool = False, embed_latency_ms: float = 0.0
        ) -> dict[str, Any]:
    chunks, _ = evaluation.load(DATA / "passages.jsonl", DATA / "queries.jsonl", passages)
    with stub_server(latency_ms / 1000, embed_latency_ms / 1000) as (url, spans), \
            tempfile.TemporaryDirectory() as folder:
        models: dict[str, Any] = {"question_model": f"openai/stub@{url}",
                                  "openai_api_key": "stub", "llm_concurrency": concurrency,
                                  "cache": False}
        if remote_embeddings:
            models.update(embedding_model=f"openai/stub-embed@{url}", embedding_dim=64)
        report: Any
        if files:
            texts = Path(folder) / "passages"
            texts.mkdir()
            for i, passage in enumerate(chunks):
                (texts / f"{i:05d}.txt").write_text(passage["text"] + "\n")
            report, wall, cpu = through_cli(Path(folder), texts, models)
        else:
            with Isotope.open(Path(folder) / "index", **models) as iso:
                if enrich:  # the first stage apart, untimed: then `isotope enrich`
                    iso.ingest_chunks(evaluation.chunks_of(chunks), questions="later")
                started, cpu = time.monotonic(), time.process_time()
                report = (iso.enrich() if enrich else
                          iso.ingest_chunks(evaluation.chunks_of(chunks), questions="now"))
                wall, cpu = time.monotonic() - started, time.process_time() - cpu
    spans.sort()
    calls = len(spans)
    first, last = (spans[0][0], max(e for _, e in spans)) if spans else (0.0, 0.0)
    busy = sum(e - s for s, e in spans)
    generation = last - first
    generated = max(report.questions_generated, 1)
    ideal = calls * latency_ms / 1000 / concurrency
    bound = ideal + report.timings.get("embed", 0.0) + report.timings.get("store", 0.0)
    return {
        "passages": passages, "concurrency": concurrency, "latency_ms": latency_ms,
        "remote_embeddings": remote_embeddings, "embed_latency_ms": embed_latency_ms,
        "run": "files" if files else "enrich" if enrich else "ingest",
        "calls": calls, "wall_s": round(wall, 2),
        "generation_s": round(generation, 2),
        "in_flight_mean": round(busy / generation, 2) if generation else 0.0,
        "ideal_s": round(ideal, 2),
        "bound_s": round(bound, 2),
        "wall_over_bound": round(wall / bound, 2) if bound else 0.0,
        "questions": report.questions,
        "questions_per_s": round(report.questions_generated / wall, 1) if wall else 0.0,
        "cpu_ms_per_question": round(1000 * cpu / generated, 2),
        "embed_ms_per_question": round(1000 * report.timings.get("embed", 0.0) / generated,
                                       2),
        # questions/s the embedder alone would allow (all of the run's embedding counted)
        "embedder_cap_questions_per_s": round(
            generated / max(report.timings.get("embed", 0.0), 1e-9), 1),
        "stage_s": {k: round(v, 2) for k, v in report.timings.items()},
    }


@contextlib.contextmanager
def stub_server(delay: float, embed_delay: float = 0.0
                ) -> Iterator[tuple[str, list[tuple[float, float]]]]:
    """The stub in a process of its own (its CPU is not isotope's): its URL, and the
    spans of its chat calls, filled in when it stops."""
    spans: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as folder:
        record = Path(folder) / "spans.json"
        server = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "openai_server.py"), "--delay", str(delay),
             "--embed-delay", str(embed_delay), "--spans", str(record)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT / "tests", text=True)
        assert server.stdout is not None and server.stdin is not None
        try:
            yield server.stdout.readline().strip(), spans
        finally:
            server.stdin.close()
            server.wait(timeout=60)
        spans += [(float(s), float(e)) for s, e in json.loads(record.read_text())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=60)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--latency-ms", type=float, default=300.0)
    parser.add_argument("--remote-embeddings", action="store_true")
    parser.add_argument("--embed-latency-ms", type=float, default=0.0,
                        help="each embeddings request of the stub takes this long (a "
                             "remote embedding server's round trip)")
    parser.add_argument("--enrich", action="store_true",
                        help="time `isotope enrich` after an untimed --questions later "
                             "ingest (the generation phase alone)")
    parser.add_argument("--files", action="store_true",
                        help="write the passages as files and run `isotope ingest DIR` as a "
                             "user does (a process of its own)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--url", help="a real OpenAI-compatible server instead of the stub")
    parser.add_argument("--model", default="default", help="the model name --url serves")
    args = parser.parse_args()
    if args.url:
        print(json.dumps(on_server(args.url, args.model, args.passages, args.concurrency)))
        return
    found = run(args.passages, args.concurrency, args.latency_ms, args.remote_embeddings,
                args.enrich, args.files, args.embed_latency_ms)
    if args.json:
        print(json.dumps(found))
        return
    print(f"{found['run']}: {found['passages']} passages, "
          f"llm_concurrency {found['concurrency']}, "
          f"{found['latency_ms']:.0f} ms per call, embeddings "
          f"{'remote' if found['remote_embeddings'] else 'local'}")
    print("| measure | isotope | baseline: every slot busy |")
    print("|---|---|---|")
    print(f"| model calls | {found['calls']} | |")
    print(f"| generation span s | {found['generation_s']} | {found['ideal_s']} |")
    print(f"| calls in flight, mean | {found['in_flight_mean']} | {found['concurrency']} |")
    print(f"| wall s | {found['wall_s']} | {found['bound_s']} (ideal + embed + store) |")
    ratio = found["generation_s"] / found["ideal_s"] if found["ideal_s"] else 0.0
    print(f"ratio generation span / ideal: {ratio:.1f}x")
    print("stage seconds:", json.dumps(found["stage_s"]))


if __name__ == "__main__":
    main()
