"""``isotope access set`` and ``isotope access show`` (who may see each source) and
``isotope audit`` (who searched what)."""

from __future__ import annotations

from typing import Annotated

import typer

from isotope.cli.console import errors, fail, out, print_json
from isotope.cli.shell import IndexOpt, JsonOpt, ProjectOpt, WaitOpt, app, open_index

access_app = typer.Typer(
    help="Who may see each source: its access list (public, user:NAME, group:NAME). With "
    "access control on (the access_control setting, or `isotope serve` with keys that "
    "name users), a source without a list is seen by administrators only. Lists come "
    "from ingest --allow, from the .isotope-access rules file of an ingested folder (lines "
    "GLOB = ENTRY, ENTRY...; the last matching line wins), or from `isotope access set`.",
    no_args_is_help=True)
app.add_typer(access_app, name="access")


@access_app.command("set")
def access_set(
    source: Annotated[str, typer.Argument(
        help="A source's path or identifier, or a glob of them (as --where source= takes).")],
    allow: Annotated[list[str] | None, typer.Option(
        "--allow", metavar="public|user:NAME|group:NAME",
        help="Who may see it (repeatable; comma-separated also).")] = None,
    none: Annotated[bool, typer.Option(
        "--none", help="Remove the list (with access control on: administrators only).")
    ] = False,
    index: IndexOpt = None,
    project: ProjectOpt = None,
    wait: WaitOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Change who may see the sources matching SOURCE, at once for every search, without
    ingesting them again or calling a model."""
    if none == bool(allow):
        fail("give --allow ENTRY (repeatable) or --none")
    with errors(), open_index(index, project, lock_wait=wait) as iso:
        changed = iso.set_access(source, None if none else allow)
        listed = iso.get_access(changed[0])
    if as_json:
        print_json({"sources": changed, "access": listed})
        return
    for uri in changed:
        out.print(uri)
    out.print(f"{len(changed)} source(s) now: " + (", ".join(listed) if listed is not None
                                                   else "no list"))


@access_app.command("show")
def access_show(
    source: Annotated[str, typer.Argument(help="The source's path or identifier.")],
    index: IndexOpt = None,
    project: ProjectOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Who may see a source: its access list, or that it has none (and what that means
    with access control on or off)."""
    with errors(), open_index(index, project) as iso:
        listed = iso.get_access(source)
        control = iso.access_control
    if as_json:
        print_json({"source": source, "access": listed, "access_control": control})
        return
    if listed is None:
        out.print("no access list: " + ("administrators only (access control is on)"
                                        if control else "everyone (access control is off)"))
    else:
        out.print(", ".join(listed) if listed else "administrators only (an empty list)")


@app.command()
def audit(
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=10_000,
                                       help="How many searches, newest first.")] = 50,
    index: IndexOpt = None,
    project: ProjectOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Who searched what: the audit log of the index (the audit_log setting; kept
    audit_days), newest first: when, the principal, the query, the mode and the chunks
    returned."""
    from dataclasses import asdict

    with errors(), open_index(index, project) as iso:
        entries = iso.audit_log(limit)
        on = iso.settings.audit_log
    if as_json:
        print_json([asdict(e) for e in entries])
        return
    if not entries:
        out.print("the audit log is empty" + ("" if on else " (the audit_log setting is "
                                                         "off)"))
    for e in entries:
        out.print(f"{e.at}  {e.principal}  {e.mode}  {e.query!r}  -> "
                  f"{len(e.chunk_ids)} chunk(s)")
