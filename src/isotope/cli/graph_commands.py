"""``isotope graph ENTITY``, ``isotope graph export`` and ``isotope entities``: the
knowledge graph named in the atoms (setting ``graph``)."""

from __future__ import annotations

import dataclasses
import enum
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from isotope.cli.console import err, errors, fail, out, print_json
from isotope.cli.shell import AsOpt, IndexOpt, JsonOpt, ProjectOpt, ShowByDefault, app, open_index
from isotope.files import write_atomically
from isotope.knowledge import memory
from isotope.knowledge.facts import MAX_HOPS


class Format(enum.StrEnum):
    """What ``isotope graph export`` writes."""

    memory_jsonl = "memory-jsonl"


graph_app = typer.Typer(
    cls=ShowByDefault,
    help="The knowledge graph (setting graph = true): `isotope graph ENTITY [--hops N]` "
    "shows an entity's neighbourhood, `isotope graph export --format memory-jsonl` writes "
    "the graph in the MCP Memory server's file format. An entity named like a subcommand: "
    "`isotope graph show export`.")
app.add_typer(graph_app, name="graph")


@graph_app.command("show")
def graph_command(
    entity: Annotated[str, typer.Argument(help="An entity's name or one of its aliases.")],
    hops: Annotated[int, typer.Option("--hops", min=1, max=MAX_HOPS,
                                      help="How many relations away to follow.")] = 1,
    as_principal: AsOpt = None,
    index: IndexOpt = None,
    project: ProjectOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show an entity of the knowledge graph and its neighbourhood: the relations up to
    --hops away, each with the chunks that state it. --json gives `center`, `entities`,
    `relations` (subject, predicate, object as entity keys, with `chunks`) and
    `truncated`."""
    with errors(), open_index(index, project) as iso:
        found = iso.graph(entity, hops=hops, principal=as_principal)
    if as_json:
        print_json(found.to_json())
        return
    names = {e.key: e.name for e in found.entities}
    c = found.center
    out.print(Text.assemble((c.name, "bold"), f" ({c.type}): named in {c.chunks} chunk(s), "
                            f"{c.mentions} time(s)"))
    if not found.relations:
        out.print("no relations stated about it" + (f" within {hops} hops" if hops > 1 else ""))
        return
    table = Table("subject", "relation", "object", "chunks")
    for r in found.relations:
        table.add_row(names.get(r.subject, r.subject), r.predicate,
                      names.get(r.object, r.object), str(len(r.chunks)))
    out.print(table)
    if found.truncated:
        out.print("more relations are within reach than shown; lower --hops")


@graph_app.command("export")
def export_command(
    fmt: Annotated[Format, typer.Option(
        "--format", help="memory-jsonl: the MCP Memory server's file (MEMORY_FILE_PATH), "
        "one entity or relation per line.")] = Format.memory_jsonl,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Write to this file (default: standard output).")] = None,
    as_principal: AsOpt = None,
    index: IndexOpt = None,
    project: ProjectOpt = None,
) -> None:
    """Write the knowledge graph (of what --as may see) in the MCP Memory server's file
    format: an entity per line with its type and its statements as observations, then a
    relation per line. Point that server's MEMORY_FILE_PATH at the file."""
    with errors(), open_index(index, project) as iso:
        graph = iso.memory_graph(principal=as_principal)
    lines = [line + "\n" for line in memory.jsonl(graph)]
    if output is None:
        sys.stdout.writelines(lines)
        return
    try:
        write_atomically(output, "".join(lines))
    except OSError as exc:
        fail(f"{output}: cannot write it ({exc.strerror}); give another --output")
    err.print(f"wrote {len(graph['entities'])} entities and {len(graph['relations'])} "
              f"relations ({fmt.value}) to {output}")


@app.command("entities")
def entities_command(
    top: Annotated[int, typer.Option("--top", min=1, help="How many to list.")] = 20,
    match: Annotated[str | None, typer.Option(
        "--match", help="Only entities whose name, type or a statement naming them holds "
        "this text (case ignored).")] = None,
    chunk: Annotated[str | None, typer.Option(
        "--chunk", help="Only the entities this chunk names (a chunk id, as `isotope "
        "query --json` gives it: a result's chunk.id).")] = None,
    as_principal: AsOpt = None,
    index: IndexOpt = None,
    project: ProjectOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the knowledge graph's entities, those named in the most chunks first, with
    their type and counts. --json gives `key`, `name`, `type`, `chunks`, `mentions`."""
    with errors(), open_index(index, project) as iso:
        found = iso.entities(top, match=match, chunk=chunk, principal=as_principal)
    if as_json:
        print_json([dataclasses.asdict(e) for e in found])
        return
    if not found:
        out.print("no entities" + (" match" if match or chunk else "; the graph is made with the "
                                   "setting graph = true (then `isotope ingest --force`)"))
        return
    table = Table("entity", "type", "chunks", "mentions")
    for e in found:
        table.add_row(e.name, e.type, str(e.chunks), str(e.mentions))
    out.print(table)
