"""The current figures (issue 67): each area's benchmarks run with ``--json``, each output
kept in ``benchmarks/current/AREA.json`` with its command, commit and date, and
``benchmarks/RESULTS.md`` made from those outputs alone, so that no figure is typed by
hand or copied from an older run. The dated log of every earlier run is in
``benchmarks/history/`` (by month).

    python benchmarks/current.py list                 # the areas, their commands, last run
    python benchmarks/current.py run quality answers  # run those areas, keep the outputs
    python benchmarks/current.py render               # RESULTS.md from what is kept

``run`` refuses a working tree with uncommitted changes under ``src/`` or ``benchmarks/``
(the commit it records must be the code that ran; ``--dirty`` runs anyway and says so).
An area's commands run one after another; a command that fails keeps nothing of its area.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
KEPT = ROOT / "benchmarks" / "current"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
HISTORY = "history/"

Table = tuple[list[str], list[list[Any]]]
"""A table's header and rows."""


@dataclass(frozen=True)
class Area:
    name: str
    title: str
    what: str
    """What the area's figures say, in a sentence."""
    commands: tuple[tuple[str, ...], ...]
    """Each a benchmark script and its arguments (``--json`` is added)."""
    history: str
    """Where its earlier runs are told (a file of benchmarks/history/ and a heading)."""
    tables: Callable[[list[Any]], list[tuple[str, Table]]] | None = None
    """The area's tables from its commands' outputs (in order); None: each output as it
    is (:func:`flat`)."""
    needs: str = ""
    """What a run needs beyond this box's CPU (a model server, a GPU)."""


def flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """A JSON object's scalars by dotted key (lists of scalars joined; lists of objects
    left to :func:`rows_of`)."""
    out: dict[str, Any] = {}
    if isinstance(value, dict):
        for key, inner in value.items():
            out.update(flat(inner, f"{prefix}{key}."))
    elif isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value):
        if len(value) <= 8:
            out[prefix.rstrip(".")] = ", ".join(str(v) for v in value)
    elif not isinstance(value, list):
        out[prefix.rstrip(".")] = value
    return out


def rows_of(items: list[dict[str, Any]]) -> Table:
    """A list of JSON objects as one table, a column per (flattened) key."""
    flattened = [flat(item) for item in items]
    header: list[str] = []
    for item in flattened:
        header += [k for k in item if k not in header]
    return header, [[item.get(k, "") for k in header] for item in flattened]


def as_tables(output: Any, label: str) -> list[tuple[str, Table]]:
    """An output as it is: its lists of objects as tables, its scalars as one
    figure/value table."""
    found: list[tuple[str, Table]] = []
    if isinstance(output, list) and output and all(isinstance(v, dict) for v in output):
        return [(label, rows_of(output))]
    if isinstance(output, dict):
        scalars = {}
        for key, value in output.items():
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                found.append((f"{label}: {key}", rows_of(value)))
            elif isinstance(value, dict) and value and all(
                    isinstance(v, dict) for v in value.values()):
                found.append((f"{label}: {key}" if key else label, rows_of(
                    [{"": name, **v} for name, v in value.items()])))
            else:
                scalars.update(flat(value, f"{key}."))
        if scalars:
            found.insert(0, (label, (["figure", "value"], [[k, v] for k, v in scalars.items()])))
    return found


def quality_tables(outputs: list[Any]) -> list[tuple[str, Table]]:
    """One row per retrieval mode: R@1, R@5 and MRR on dev-300 and the unseen passages,
    and the search's p50."""
    dev, unseen = outputs
    other = {m["mode"]: m for m in unseen["modes"]}
    rows = []
    for m in dev["modes"]:
        u = other.get(m["mode"], {})
        rows.append([m["mode"], m["recall"]["1"], m["recall"]["5"], m["mrr"],
                     u.get("recall", {}).get("1", ""), u.get("recall", {}).get("5", ""),
                     u.get("mrr", ""), m["latency_p50_ms"]])
    header = ["mode", "R@1 dev", "R@5 dev", "MRR dev", "R@1 unseen", "R@5 unseen",
              "MRR unseen", "p50 ms (dev)"]
    keyword = [[m["mode"], m["recall"]["1"], m["recall"]["5"], m["mrr"]]
               for m in dev["keyword"]]
    return [("the SQuAD questions", (header, rows)),
            ("the same questions as keyword queries (dev)",
             (["mode", "R@1", "R@5", "MRR"], keyword))]


ANSWER_KEYS = ("questions", "contains_gold", "citation_is_gold", "generated_precision",
               "generated_share", "quoted_share", "declined_share",
               "unanswerable_declined", "swapped_asserted")


def answers_tables(outputs: list[Any]) -> list[tuple[str, Table]]:
    """One row per set and ``answer_strictness``: what ``ask`` says and how often it is
    right when it says it."""
    rows = []
    header = ["set, strictness", *ANSWER_KEYS]
    for output in outputs:
        for name, scores in output.items():
            rows.append([name, *(scores.get(k, "") for k in ANSWER_KEYS)])
    return [("ask on SQuAD passages (shares are fractions)", (header, rows))]


def graph_tables(outputs: list[Any]) -> list[tuple[str, Table]]:
    """One row per mode (both passages, the answering one and the first in the top 5,
    p50), then the index's size and what ``ask`` answered."""
    output = outputs[0]
    modes = {k: v for k, v in output.items() if isinstance(v, dict) and "both_at_5" in v}
    rows = [[mode, m["both_at_5"], m["answering_at_5"], m["first_at_5"], m["p50_ms"]]
            for mode, m in modes.items()]
    rest = {k: v for k, v in flat(output).items() if k.split(".")[0] not in modes}
    return [("two-hop questions: % with the passages in the top 5",
             (["mode", "both", "answering", "first", "p50 ms"], rows)),
            ("the index and `ask` (% of the questions; kinds in answers)",
             (["figure", "value"], [[k, v] for k, v in rest.items()]))]


AREAS: tuple[Area, ...] = (
    Area("quality", "Retrieval quality",
         "R@k and MRR of every retrieval mode on SQuAD dev's first 300 passages and 150 "
         "passages never developed on, from the committed model cache (no model call).",
         (("quality.py", "--passages", "300", "--reuse-index"),
          ("quality.py", "--unseen", "150", "--reuse-index")),
         "2026-11.md, \"Retrieval quality and confidence (issue 4)\"; 2026-12.md",
         quality_tables),
    Area("answers", "Answers",
         "What `ask` answers on SQuAD passages (dev and unseen, every `answer_strictness`): "
         "how often the answer holds the gold answer, how often a `generated` answer is "
         "right, and how often an unanswerable question is declined.",
         (("answers.py", "--unseen", "150"),),
         "2026-11.md, \"Answers (issue 25)\"; 2026-12.md, \"Answers that know when they "
         "are unsupported (issue 65)\"", answers_tables),
    Area("scale", "Scale, embedded",
         "Ingest, search latency and memory of the embedded store at 100,000 synthetic "
         "questions.", (("scale.py", "--questions", "100000"),),
         "2026-11.md, \"Scale (issue 12)\" and the issue 27 sections"),
    Area("postgresql", "PostgreSQL",
         "The same index on the packaged PostgreSQL server: copy, search latency.",
         (("postgres.py",),), "2026-11.md, \"PostgreSQL (issue 13)\" and issues 30, 41"),
    Area("chroma", "Chroma", "The vectors in Chroma against usearch segments.",
         (("chroma.py",),), "2026-11.md, \"Chroma against usearch (issue 45)\""),
    Area("graph", "Knowledge graph and two-hop questions",
         "The 60 two-hop questions over 144 passages with the knowledge graph: both "
         "passages in the top 5 per mode, and `ask`'s answers.",
         (("graph.py", "--questions", "later", "--graph", "--passages", "40",
           "--reuse-index", "--ask", "--graph-weights", "1"),),
         "2026-11.md, \"Two-hop questions (issue 46)\" and \"Knowledge graph\"; "
         "2026-12.md, \"Answers that know when they are unsupported (issue 65)\"",
         graph_tables),
    Area("remote", "Remote model server",
         "A folder ingested at a model server's pace.", (("remote.py",),),
         "2026-11.md, \"Remote model server (issue 27)\", \"A folder at the model "
         "server's pace (issue 44)\"", needs="an OpenAI-compatible model server (a GPU)"),
    Area("serve", "Serve", "The HTTP server's throughput and latency under load.",
         (("serve.py",),), "2026-11.md, \"Serve (issue 14)\""),
    Area("access", "Access control",
         "Searches with a user's access list against none, at 100,000 questions.",
         (("access.py",),), "2026-11.md, \"Access control (issue 28)\""),
    Area("learning", "Learning from use",
         "R@1 before and after the index learns from users' marks.",
         (("learning.py",),), "2026-11.md, \"Learning from use (issue 29)\""),
)
BY_NAME = {a.name: a for a in AREAS}


def commit(dirty_ok: bool) -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                          capture_output=True, check=True).stdout.strip()
    changed = subprocess.run(["git", "status", "--porcelain", "--", "src", "benchmarks"],
                             cwd=ROOT, text=True, capture_output=True, check=True).stdout
    changed = "\n".join(line for line in changed.splitlines()
                        if "benchmarks/current/" not in line and "RESULTS.md" not in line)
    if changed and not dirty_ok:
        sys.exit(f"uncommitted changes under src/ or benchmarks/:\n{changed}\ncommit them "
                 "first (the figures must name the code that ran), or pass --dirty")
    return head + ("+changes" if changed else "")


def output_of(stdout: str, area: Area, shown: str) -> Any:
    """A benchmark's ``--json`` output: the JSON value its stdout ends with (lines it
    printed before it go to stderr). What cannot be read is kept in benchmarks/out/, so
    that a long run is not lost."""
    lines = stdout.splitlines(keepends=True)
    start = next((n for n, line in enumerate(lines) if line[:1] in "{["), len(lines))
    sys.stderr.write("".join(lines[:start]))
    try:
        return json.loads("".join(lines[start:]))
    except json.JSONDecodeError as exc:
        unread = ROOT / "benchmarks" / "out" / f"current-{area.name}.unread.txt"
        unread.parent.mkdir(exist_ok=True)
        unread.write_text(stdout)
        sys.exit(f"[{area.name}] {shown} printed no JSON to read ({exc}); its output is "
                 f"in {unread}; nothing kept")


def run(area: Area, dirty_ok: bool) -> None:
    at = commit(dirty_ok)
    outputs, commands, seconds = [], [], []
    for command in area.commands:
        argv = [sys.executable, str(ROOT / "benchmarks" / command[0]), *command[1:], "--json"]
        shown = "python benchmarks/" + " ".join([*command, "--json"])
        print(f"[{area.name}] {shown}", file=sys.stderr, flush=True)
        started = time.perf_counter()
        done = subprocess.run(argv, cwd=ROOT, text=True, stdout=subprocess.PIPE)
        if done.returncode != 0:
            sys.exit(f"[{area.name}] {shown} failed (exit {done.returncode}); nothing kept")
        outputs.append(output_of(done.stdout, area, shown))
        commands.append(shown)
        seconds.append(round(time.perf_counter() - started, 1))
    KEPT.mkdir(exist_ok=True)
    (KEPT / f"{area.name}.json").write_text(json.dumps(
        {"area": area.name, "commit": at, "date": time.strftime("%Y-%m-%d"),
         "commands": commands, "seconds": seconds, "outputs": outputs}, indent=1) + "\n")
    print(f"[{area.name}] kept in {KEPT / (area.name + '.json')}", file=sys.stderr)


def markdown(table: Table) -> list[str]:
    header, rows = table

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.4g}" if abs(value) < 1 else f"{value:.1f}"
        return str(value).replace("|", "\\|")

    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(cell(v) for v in row) + " |" for row in rows)]


def render() -> str:
    lines = ["# Benchmark results: the current figures", "",
             "Each table below is made by `python benchmarks/current.py render` from the "
             "outputs that `python benchmarks/current.py run AREA` kept in "
             "`benchmarks/current/` (the command, the commit and the date are those of that "
             "run; nothing here is typed by hand). On a 2-core box unless an area says "
             "otherwise: compare figures within one run, not across sittings (this "
             "virtual machine's speed moves by half between them). Every earlier run, "
             "with the reasoning around it, is in `benchmarks/history/` by month: "
             + ", ".join(f"[{p.stem}]({HISTORY}{p.name})" for p in sorted(
                 (ROOT / "benchmarks" / "history").glob("*.md"), reverse=True)) + ".", ""]
    for area in AREAS:
        lines += [f"## {area.title}", "", area.what, ""]
        path = KEPT / f"{area.name}.json"
        if not path.exists():
            lines += [f"Not yet run through `benchmarks/current.py` (`python "
                      f"benchmarks/current.py run {area.name}`"
                      + (f"; needs {area.needs}" if area.needs else "") + "). Its latest "
                      f"figures are told in [history/{area.history.split(',')[0]}]"
                      f"({HISTORY}{area.history.split(',')[0]}) ({area.history}).", ""]
            continue
        kept = json.loads(path.read_text())
        lines += [f"Run {kept['date']} at commit `{kept['commit']}` "
                  f"({', '.join(f'{s:.0f} s' for s in kept['seconds'])}):", ""]
        lines += [f"    {c}" for c in kept["commands"]] + [""]
        made = (area.tables(kept["outputs"]) if area.tables else
                [t for i, o in enumerate(kept["outputs"])
                 for t in as_tables(o, f"output {i + 1}" if len(kept["outputs"]) > 1
                                    else "")])
        for label, table in made:
            if label:
                lines += [f"{label[0].upper()}{label[1:]}:", ""]
            lines += [*markdown(table), ""]
        lines += [f"Earlier runs: [history/{area.history.split(',')[0]}]"
                  f"({HISTORY}{area.history.split(',')[0]}) ({area.history}).", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("list", help="the areas, their commands, when last run")
    ran = sub.add_parser("run", help="run areas' commands and keep their outputs")
    ran.add_argument("areas", nargs="+", choices=[a.name for a in AREAS])
    ran.add_argument("--dirty", action="store_true",
                     help="run with uncommitted changes (the commit is marked +changes)")
    ran.add_argument("--render", action="store_true", help="then render RESULTS.md")
    sub.add_parser("render", help="write benchmarks/RESULTS.md from the kept outputs")
    args = parser.parse_args()
    if args.what == "list":
        for area in AREAS:
            path = KEPT / f"{area.name}.json"
            when = (json.loads(path.read_text())["date"] if path.exists() else "never")
            print(f"{area.name:11} last run: {when:10}  "
                  + "; ".join(" ".join(c) for c in area.commands))
        return
    if args.what == "run":
        for name in args.areas:
            run(BY_NAME[name], args.dirty)
    if args.what == "render" or getattr(args, "render", False):
        RESULTS.write_text(render())
        print(f"wrote {RESULTS} ({len(RESULTS.read_text().splitlines())} lines)",
              file=sys.stderr)


if __name__ == "__main__":
    main()
