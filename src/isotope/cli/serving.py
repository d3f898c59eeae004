"""``isotope serve`` (the HTTP API over an index, with the MCP tools at ``/mcp``:
:mod:`isotope.server`) and ``isotope mcp`` (the MCP tools over stdio)."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated

import typer

from isotope.cli.console import err, errors, fail
from isotope.cli.shell import AsOpt, IndexOpt, ProjectOpt, app, open_index
from isotope.server.auth import Keys
from isotope.server.operations import BY_TOOL


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@app.command()
def serve(
    index: IndexOpt = None,
    project: Annotated[list[str] | None, typer.Option(
        "--project", "-p", help="A named index to serve (repeatable: the first at /, each "
        "at /p/NAME/ too; a key's projects= lists those it may use).",
        show_default=False)] = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535,
                                      help="Port to listen on.")] = 8000,
    workers: Annotated[int, typer.Option(
        "--workers", min=1, max=64, help="Server processes (each with its own models); "
        "searches in one process share its CPU time with Python's lock.")] = 1,
    create: Annotated[bool, typer.Option(
        "--create", help="Serve an empty new index when there is none at the location "
        "(without it, a location that holds no index is an error: a typo is not served "
        "as an empty index).")] = False,
) -> None:
    """Serve the index over HTTP: POST /search and /ask, GET /sources and /status,
    DELETE /sources?source=NAME, POST /ingest (file upload) and /sync (below the
    serve_roots setting), GET /chunks/{id}/questions, MCP tools at /mcp, a search page at
    /; OpenAPI at /docs. With no API key configured (the api_keys or api_keys_file
    setting) it listens on loopback only; a request naming another host or sent by a
    page of another site is refused. Several --project: each project's routes are at
    /p/NAME/ (the first's also unprefixed), each its own index, sharing nothing."""
    import json
    import os

    try:
        import uvicorn

        from isotope.server.app import serving_app
    except ImportError as exc:
        from isotope.errors import MissingDependency

        fail(str(MissingDependency.from_import(exc, "isotope serve", "server")))
    from isotope.server import workers as processes

    names = list(dict.fromkeys(project or []))
    with errors():
        iso = open_index(index, names[0] if names else None, create=create)  # checked once
        keys = Keys.from_settings(iso.settings)
        location = str(iso.settings.index)
        described = repr(iso)
        iso.close()
        others: dict[str, str] = {}
        for name in names[1:]:
            with open_index(None, name) as other:
                others[name] = str(other.settings.index)
        if others:
            described += " and " + ", ".join(f"{n} at /p/{n}/" for n in others)
        if not keys and not _loopback(host):
            fail(f"refusing to listen on {host} without an API key: set api_keys (e.g. "
                 "ISOTOPE_API_KEYS=$(python -c 'import secrets; "
                 "print(secrets.token_urlsafe())')) or keep --host 127.0.0.1")
    os.environ["ISOTOPE_SERVE_INDEX"] = location  # what each worker process opens
    os.environ["ISOTOPE_SERVE_PROJECT"] = names[0] if names else ""
    os.environ["ISOTOPE_SERVE_PROJECTS"] = json.dumps(others)
    os.environ["ISOTOPE_SERVE_HOST"] = host
    os.environ["ISOTOPE_SERVE_WORKERS"] = str(workers)  # each takes its share of the cores
    try:  # bound before "serving" is said: a port in use is the only line
        listener = processes.listening_socket(host, port)
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    shown = f"[{host}]" if ":" in host else host
    err.print(f"serving {described} on http://{shown}:{port} with {workers} process(es) "
              f"(API keys: {'required' if keys else 'none, loopback only'}); search page "
              "at /, OpenAPI at /docs")
    if workers == 1:
        processes.more_files()
        with errors():
            server = uvicorn.Server(processes.server_config(serving_app()))
        server.run(sockets=[listener])
        return
    try:
        processes.run(host, port, workers, listener=listener)
    except OSError as exc:
        fail(f"cannot serve on {host}:{port}: {exc.strerror or exc}")


@app.command("mcp")
def mcp_command(index: IndexOpt = None, project: ProjectOpt = None,
                create: Annotated[bool, typer.Option(
                    "--create", help="Serve an empty new index when there is none at the "
                    "location (without it, a location that holds no index is an error).")
                                  ] = False, as_principal: AsOpt = None) -> None:
    """Serve the index to an agent as an MCP server over stdio: the tools {tools} (the
    same tools are at /mcp of `isotope serve`; the graph tools read the knowledge graph,
    setting graph). ingest reads any path the user running it may read, unless the
    serve_roots setting is set (then only below those folders).

    With --as, the agent is that principal as a user's API key is over HTTP: it sees only
    what the principal may see (never a source without a list), its feedback waits for
    review, and it cannot ingest."""
    try:
        from isotope.server.mcp import create_mcp
    except ImportError as exc:
        from isotope.errors import MissingDependency

        fail(str(MissingDependency.from_import(exc, "isotope mcp", "server")))
    with errors():
        from isotope.access import principal_of, served

        principal = served(principal_of(as_principal))
        iso = open_index(index, project, create=create)
    iso.log_by_default()  # (feedback names logged searches)
    roots = [Path(r).expanduser().resolve() for r in iso.settings.serve_roots] or None
    try:
        create_mcp(iso, roots=roots, principal=principal,
                   writable=principal is None).run("stdio")
    finally:
        iso.close()


# (the tools named from the table of operations, which tests/test_operations.py holds
# equal to the tools the server registers: the help cannot drift from them)
_TOOLS = list(BY_TOOL)
mcp_command.__doc__ = (mcp_command.__doc__ or "").format(
    tools=f"{', '.join(_TOOLS[:-1])} and {_TOOLS[-1]}")
