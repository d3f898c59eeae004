"""``isotope project ...``: named indexes."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.table import Column, Table

from isotope.cli.console import errors, fail, out, print_json
from isotope.cli.shell import JsonOpt, app, describe

project_app = typer.Typer(help="Named indexes, each with its own settings.",
                          no_args_is_help=True)
app.add_typer(project_app, name="project")


@project_app.command("create")
def project_create(
    name: Annotated[str, typer.Argument(help="Letters, digits, '.', '_' and '-'.")],
    setting: Annotated[list[str] | None, typer.Option(
        "--set", help="A setting saved in the project, KEY=VALUE (repeatable), e.g. "
        "--set chunk_size=512 --set mode=questions-dense.")] = None,
    use: Annotated[bool, typer.Option("--use", help="Make it the default project.")] = False,
    location: Annotated[str | None, typer.Option(
        "--index", "-i", help="Keep the project's index there (a store URL, or a directory "
        "elsewhere) instead of in the projects folder.")] = None,
) -> None:
    """Create a project (an empty index in the projects folder, or at --index)."""
    from isotope import projects

    values: dict[str, Any] = {}
    for item in setting or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            fail(f"--set {item!r}: write KEY=VALUE")
        values[key.strip()] = _setting_value(value.strip())
    with errors():
        path = projects.create(name, location=location, **values)
        if use:
            projects.set_default(name)
    where = path if location is None else describe(location)
    out.print(f"created project {name} at {where}" + (" (default)" if use else ""))


def _setting_value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


@project_app.command("list")
def project_list(as_json: JsonOpt = False) -> None:
    """List the projects with their counts; * marks the default."""
    from dataclasses import asdict

    from isotope import projects

    with errors():
        found = projects.listing()
    if as_json:
        print_json([asdict(p) for p in found])
        return
    if not found:
        out.print("no projects; create one with `isotope project create NAME`")
        return
    table = Table("", "project", "sources", "chunks", "questions", Column("path", overflow="fold"))
    for p in found:
        table.add_row("*" if p.is_default else "", p.name, str(p.counts["sources"]),
                      str(p.counts["chunks"]), str(p.counts["questions"]), str(p.path))
    out.print(table)


@project_app.command("show")
def project_show(name: Annotated[str, typer.Argument(help="The project to show.")],
                 as_json: JsonOpt = False) -> None:
    """A project's path, counts and saved settings."""
    from dataclasses import asdict

    from isotope import projects

    with errors():
        found = projects.info(name)
    if as_json:
        print_json(asdict(found))
        return
    table = Table(show_header=False, box=None)
    table.add_row("project", found.name + (" (default)" if found.is_default else ""))
    table.add_row("path", str(found.path))
    if found.location != str(found.path):
        table.add_row("index", found.location)
    for key, count in found.counts.items():
        table.add_row(key, str(count))
    for key, value in found.settings.items():
        table.add_row(key, json.dumps(value))
    out.print(table)


@project_app.command("use")
def project_use(name: Annotated[str, typer.Argument(
        help="The project used when no --index or --project is given.")]) -> None:
    """Make a project the default: commands given no --index or --project use it."""
    from isotope import projects

    with errors():
        projects.set_default(name)
    out.print(f"default project: {name}")


@project_app.command("delete")
def project_delete(
    name: Annotated[str, typer.Argument(help="The project to delete, with its index.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete a project and its index (asks first)."""
    from isotope import projects

    with errors():
        found = projects.info(name)
        if not yes:
            if not sys.stdin.isatty():
                fail(f"deleting project {name} needs confirmation: pass --yes")
            typer.confirm(f"delete project {name} ({found.counts['sources']} sources, "
                          f"{found.path})?", abort=True)
        deleted = projects.delete(name)
    out.print(deleted.message())
