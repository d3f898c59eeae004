"""``isotope query`` (and ``isotope ask``, the same command)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.text import Text

from isotope.cli.console import errors, out, print_json
from isotope.cli.shell import AsOpt, IndexOpt, JsonOpt, ProjectOpt, app, open_index
from isotope.search.retrieval import MODES


def _printing(piece: str) -> None:
    """Print a piece of the answer as it comes."""
    out.print(piece, end="", style="dim", markup=False, highlight=False)


def _print_explain(told: dict[str, Any]) -> None:
    """A result's explanation, one line per signal."""
    for name, row in told["signals"].items():
        found = (f"rank {row['rank']:>3}  raw {row['raw']:.3f}" if row["rank"]
                 else "not found          ")
        part = ("" if row["standardized"] is None else
                f"  standardised {row['standardized']:+.3f} x weight {row['weight']:.2f} = "
                f"{row['contribution']:+.3f}")
        out.print(f"    {name:<16} {found}{part}", style="dim")
        for path in row.get("paths", [])[:3]:  # (how the graph reached the chunk)
            out.print(f"      path: {path}", style="dim")
    if told["fused"] is not None:
        scale = f" x {told['scale']:.2f} (waiting for questions)" if told["scale"] != 1 else ""
        out.print(f"    fused {told['fused']:+.3f}{scale} -> score {told['score']:.3f}",
                  style="dim")
    for atom in told["matched_atoms"][:3]:
        out.print(f"    atom: {atom}", style="dim")


@app.command("ask", help="Answer a question from the index, citing the chunks it used "
             "(the same as `isotope query`: the library, HTTP and MCP call it ask).")
@app.command()
def query(
    text: Annotated[str, typer.Argument(help="Your question.")],
    index: IndexOpt = None,
    k: Annotated[int | None, typer.Option("-k", help="Number of chunks to return.")] = None,
    raw: Annotated[bool, typer.Option(
        "--raw", help="Only the chunks found; no synthesised answer.")] = False,
    mode: Annotated[str | None, typer.Option(
        "--mode", "-m", help="Retrieval mode: " + ", ".join(MODES) + " (default: the mode "
        "setting).")] = None,
    transform: Annotated[bool | None, typer.Option(
        "--transform/--no-transform",
        help="Rewrite a keyword query into questions first (default: the query_transform "
        "setting).")] = None,
    where: Annotated[list[str] | None, typer.Option(
        "--where", "-w", help="Only chunks whose metadata match: key=value, key!=value, "
        "key>=value, key<value...; source=GLOB, type=pdf (repeatable; all must hold).")] = None,
    explain: Annotated[bool, typer.Option(
        "--explain", help="Say how each result's score was made: each signal's rank, raw "
        "and standardised score, weight and contribution; the questions and atoms that "
        "matched (--json: an explain object per result).")] = False,
    as_principal: AsOpt = None,
    project: ProjectOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer a question from the index, citing the chunks it used. On a terminal the
    answer is printed as the model writes it, then as checked against the passages
    (generated, quoted from the best match, or declined). --json has the search's
    `query_id`, for `isotope feedback QUERY_ID CHUNK_ID`."""
    from isotope.search.filters import parse_where

    live = out.is_terminal and not as_json and not raw
    with errors():
        filters = parse_where(where or [])
        with open_index(index, project) as iso:
            iso.log_by_default()  # (for `isotope feedback QUERY_ID CHUNK_ID`)
            response = iso.search(text, k, mode=mode, transform=transform, filters=filters,
                                  for_answer=not raw, principal=as_principal,
                                  explain=explain)
            if not raw:
                if live:
                    out.print(f"{len(response.results)} passages found; the answer:",
                              style="dim")
                response = iso.answer(response, on_token=_printing if live else None,
                                      principal=as_principal)
                if live:
                    out.print()
    if as_json:
        print_json(response.model_dump(mode="json"))
        return
    if response.rewrites:
        out.print("searched also: " + " | ".join(response.rewrites), )
    if response.answer is not None:
        if live:
            out.print(f"checked ({response.answer_kind}): ", style="bold", end="")
        out.print(response.answer)
        if response.answer_kind != "declined" and response.answer_confidence is not None:
            out.print(f"answer confidence {response.answer_confidence:.2f} "
                      f"({response.answer_kind})", style="dim")
        out.print()
    if not response.results:
        out.print("no results")
    for r in response.results:
        place = r.chunk.source
        if "page" in r.chunk.metadata:
            place += f" (page {r.chunk.metadata['page']})"
        elif r.chunk.metadata.get("headings"):
            place += " > " + " > ".join(r.chunk.metadata["headings"])
        out.print(Text.assemble(
            (f"[{r.rank}]", "bold"), f" {r.score:.3f}  {place}",
            ("  (stale: the file changed; run isotope sync)" if r.chunk.stale else "",
             "yellow")))
        if r.matched_questions:
            out.print(f"    matched: {r.matched_questions[0].text}")
        if r.bridge is not None:
            out.print(f"    reached through the graph: {'; '.join(r.bridge)}")
        if r.explain:
            _print_explain(r.explain)
        if raw or response.answer is None:
            if r.chunk.context:
                out.print(f"    context: {r.chunk.context}", style="dim")
            snippet = " ".join(r.chunk.text.split())
            out.print(f"    {snippet[:300]}{'…' if len(snippet) > 300 else ''}")
    if response.results:
        out.print(f"suggested action: {response.suggested_action} (top score "
                  f"{response.top_score:.3f}, lead {response.score_spread:.3f})")
    if response.query_id and response.results:
        out.print(f"query id {response.query_id}: isotope feedback {response.query_id} "
                  f"{response.results[0].chunk.id} [--not-useful] marks the first result",
                  style="dim")
