"""``isotope questions show``: the questions of a source's chunks (generated, kept and
dropped with why, manual and learned ones with their origin), or a random sample across
the index. The group's other commands (``review``, ``orphaned``, ``add``, ``edit``,
``disable``, ``enable``) are in :mod:`isotope.cli.learning_commands`."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from isotope.cli.console import errors, fail, out, print_json
from isotope.cli.shell import AsOpt, IndexOpt, JsonOpt, ProjectOpt, ShowByDefault, app, open_index
from isotope.models import GeneratedQuestion

questions_app = typer.Typer(
    cls=ShowByDefault,
    help="The questions of a source's chunks: `isotope questions SOURCE` (generated ones, "
    "kept and dropped with why; manual and learned ones with their origin), `isotope "
    "questions --sample N`, `isotope questions review` (learned questions waiting for "
    "approval), `isotope questions orphaned` (questions whose chunk changed and no new "
    "chunk covers it). Learned questions are marked (user); --json gives each one's "
    "origin. A source named like a subcommand: `./review`.")
app.add_typer(questions_app, name="questions")


def _shown(question: GeneratedQuestion) -> str:
    return question.text + ("" if question.origin == "generated" else f"  ({question.origin})")


@questions_app.command("show")
def questions_command(
    source: Annotated[str | None, typer.Argument(
        help="The source's path or identifier (as `isotope list` shows it).")] = None,
    chunk: Annotated[int | None, typer.Option(
        "--chunk", min=0, help="Only the chunk with this number (0 is the first).")] = None,
    sample: Annotated[int | None, typer.Option(
        "--sample", min=1, help="A random sample of N questions across the index instead "
        "of a source.")] = None,
    seed: Annotated[int | None, typer.Option(
        "--seed", help="Repeat a --sample draw.")] = None,
    as_principal: AsOpt = None,
    index: IndexOpt = None,
    project: ProjectOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show the questions generated for a source's chunks, each with the atom (statement)
    it was written for: the kept ones (searched) and the dropped ones with why they were
    dropped (off their atom, pronoun only, repeated, near-duplicate)."""
    if (source is None) == (sample is None):
        fail("give a SOURCE or --sample N (not both); `isotope list` shows the sources")
    with errors(), open_index(index, project) as iso:
        found = iso.questions(source, chunk=chunk, sample=sample, seed=seed,
                              principal=as_principal)
    if as_json:
        print_json([q.model_dump() for q in found])
        return
    if not found:
        out.print("no generated questions" + (
            f" for chunk {chunk}" if chunk is not None else "") + (
            "; the chunks may still wait for them (`isotope enrich`)" if source else ""))
        return
    place = None
    atom = None
    for q in found:
        if sample is None and (q.chunk_index, q.atom_id) != (place, atom):
            if q.chunk_index != place:
                out.print(Text(f"\nchunk {q.chunk_index}", "bold"))
            place, atom = q.chunk_index, q.atom_id
            out.print(Text(f"  atom: {q.atom or '(removed)'}", "cyan"))
        elif sample is not None:
            out.print(Text(f"\n{q.source} chunk {q.chunk_index}", "bold"))
            out.print(Text(f"  atom: {q.atom or '(removed)'}", "cyan"))
        if q.kept:
            out.print(Text(f"    + {_shown(q)}"))
        else:
            out.print(Text(f"    - {q.text}  ", "dim") + Text(f"dropped: {q.reason}", "yellow"))
    kept = sum(q.kept for q in found)
    out.print(f"\n{kept} kept, {len(found) - kept} dropped")
