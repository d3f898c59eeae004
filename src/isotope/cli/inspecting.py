"""``isotope list``, ``delete``, ``status``, ``config``, ``check``, ``compact`` and
``copy``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Column, Table
from rich.text import Text

from isotope.cli.console import err, errors, labelled, out, print_json
from isotope.cli.shell import AsOpt, IndexOpt, JsonOpt, ProjectOpt, WaitOpt, app, open_index
from isotope.errors import IsotopeError

if TYPE_CHECKING:
    from isotope.stores import VectorBackend


@app.command("list")
def list_sources(index: IndexOpt = None, project: ProjectOpt = None,
                 as_principal: AsOpt = None, as_json: JsonOpt = False) -> None:
    """List the ingested sources: status (current, changed on disk, missing, incomplete),
    chunk, atom and question counts, chunks waiting for questions, and who may see each
    (its access list), then how many sources have no list. --json adds atoms,
    `chunks_waiting` and `access`."""
    with errors(), open_index(index, project) as iso:
        infos = iso.sources(principal=as_principal)
        control = iso.access_control
    if as_json:
        from isotope.reports import source_listing

        print_json([source_listing(i) for i in infos])
        return
    if not infos:
        out.print("the index has no sources")
        return
    stale = sum(i.state in ("changed", "missing") for i in infos)
    waiting = sum(i.pending for i in infos)
    listed = control or any(i.source.access is not None for i in infos)
    table = Table("status", "type", "chunks", "questions", "ingested")
    if listed:  # who may see each, once access lists are in use
        table.columns.append(Column("access"))
    if waiting:  # chunks waiting for their questions, only when there are some
        table.columns.insert(4, Column("waiting"))
    table.columns.insert(0, Column("source", overflow="fold"))
    labels = {"changed": Text("changed on disk", "yellow"), "missing": Text("missing", "red"),
              "incomplete": Text("incomplete", "yellow")}
    for i in infos:
        table.add_row(i.source.uri, labels.get(i.state, i.state or "-"),
                      i.source.loader, str(i.chunks),
                      str(i.questions),
                      *([str(i.pending) if i.pending else "-"] if waiting else []),
                      i.source.ingested_at.strftime("%Y-%m-%d") if i.source.ingested_at
                      else "", *([", ".join(i.source.access) if i.source.access is not None
                                  else "-"] if listed else []))
    out.print(table)
    unlisted = sum(i.source.access is None for i in infos)
    if unlisted and listed:
        out.print(f"{unlisted} source(s) have no access list: seen by " + (
            "administrators only (access control is on)" if control else
            "everyone (access control is off)") + "; `isotope access set` gives one")
    if waiting:
        out.print(f"{waiting} chunk(s) of {sum(bool(i.pending) for i in infos)} source(s) "
                  "wait for their questions (searchable by text and atoms meanwhile); "
                  "`isotope enrich` generates them")
    if stale:
        out.print(f"{stale} source(s) differ from their files; `isotope sync DIR` updates them")


@app.command()
def delete(
    source: Annotated[str, typer.Argument(help="The source's path or identifier.")],
    index: IndexOpt = None,
    project: ProjectOpt = None,
    wait: WaitOpt = None,
) -> None:
    """Delete a source and its chunks, atoms and questions."""
    with errors(), open_index(index, project, lock_wait=wait) as iso:
        iso.delete(source)
    out.print(f"deleted {source}")


@app.command()
def status(index: IndexOpt = None, project: ProjectOpt = None,
           as_principal: AsOpt = None, as_json: JsonOpt = False) -> None:
    """Counts, disk size, models, every prompt's version (and its file when overridden),
    the read replicas of a PostgreSQL index with their lag, the query adapter (whether it
    is on, when it was fitted) and the settings of an index (--as: the counts of what a
    principal may see)."""
    from isotope.search import adapter

    with errors(), open_index(index, project) as iso:
        info = iso.status(principal=as_principal)
    if as_json:
        print_json(info.model_dump(mode="json"))
        return
    table = Table(show_header=False, box=None)
    table.add_column()
    table.add_column(overflow="fold")
    table.add_row("index", info.index + (f" (project {info.project})" if info.project else ""))
    table.add_row("schema", f"{info.schema_version} (created by isotope {info.isotope_version}"
                  f" on {info.created_at})")
    for name, count in info.counts.items():
        if name == "sources_without_access" and not info.settings.get("access_control"):
            continue  # (access control off: a source without a list is open to all)
        table.add_row(name, str(count))
    if info.disk_bytes is not None:
        table.add_row("disk", f"{info.disk_bytes / 1e6:.1f} MB")
    for role, model in info.models.items():
        table.add_row(f"{role} model", model)
    table.add_row("embedding", f"{info.embedding.get('model_id')} ({info.embedding.get('dim')}-d)")
    table.add_row("prompts", ", ".join(f"{name} {version}"
                                       for name, version in info.prompt_versions.items()))
    table.add_row("vector backend", info.vector_backend)
    table.add_row("keyword search", info.keyword_engine)
    table.add_row("graph", "on" if info.graph else "off")
    table.add_row("query adapter", adapter.summary(info.query_adapter))
    for name in ("chunk_size", "chunk_overlap", "questions_per_atom", "dedup_threshold"):
        table.add_row(name, str(info.settings[name]))
    for replica in info.replicas:
        lag = f"lag {replica['lag_s']} s"
        said = (f"healthy, {lag}" if replica["healthy"] else
                f"skipped: {replica.get('error') or lag}")
        table.add_row("read replica", f"{replica['url']} ({said})")
    out.print(table)


@app.command()
def config(index: IndexOpt = None, project: ProjectOpt = None,
           as_json: JsonOpt = False) -> None:
    """Show the resolved settings and where each value came from."""
    from isotope import Isotope, projects, stores
    from isotope import prompts as prompt_specs
    from isotope.opening.meta import fixed_conflicts, keep_fixed
    from isotope.settings import (
        Settings,
        group_of,
        resolve,
        shown,
    )

    with errors():
        base, first = resolve(None, index=index, project=project)
        path = projects.index_path(base, first)
        settings, origins = resolve(Isotope.saved_settings(path), index=path, project=project)
        if index is None:  # the location came from where the first reading found it
            origins["index"] = first["index"] if base.index == path else "project"
        # (the settings the index fixed: its values; one given otherwise is said refused)
        fixed, where = Isotope.fixed_settings(path), stores.describe(path)
        refused = [str(p) for p in fixed_conflicts(settings, origins, fixed, where)]
        settings, origins = keep_fixed(settings, origins, fixed, where, refuse=False)
        overridden = {name: str(spec.source) for name, spec in
                      prompt_specs.load(settings.prompts_dir).items() if spec.source}
    values = shown(settings)
    for problem in refused:
        err.print(labelled("refused:", "red", problem))
    if as_json:
        print_json({**{name: {"value": values[name], "from": origins[name],
                              "group": group_of(name)} for name in values},
                    "overridden_prompts": overridden, "refused": refused})
        return
    table = Table("group", "setting (env ISOTOPE_<NAME>)", Column("value", overflow="fold"),
                  "from")
    for name in Settings.model_fields:
        table.add_row(group_of(name), name, json.dumps(values[name]), origins[name])
    out.print(table)
    for name, file in overridden.items():
        out.print(f"prompt {name}: overridden by {file}")


@app.command()
def check(
    index: IndexOpt = None,
    project: ProjectOpt = None,
    repair: Annotated[bool, typer.Option(
        "--repair", help="Repair first: rebuild the keyword indexes and the vector cache, "
        "ingest again the sources that lost rows, remove those that cannot be (each "
        "named).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Check the index's integrity: every question has its atom, chunk and vector, every
    chunk its source, each source holds what it stored, keyword and vector indexes agree
    with the tables. Problems name the sources involved. Exit code 1 if a problem is
    left."""
    from dataclasses import asdict

    with errors(), open_index(index, project) as iso:
        done = iso.repair() if repair else None
        problems = done.problems if done else iso.check()
        try:
            counts = iso.counts()
        except IsotopeError:  # a damaged database: the problems above say so
            counts = {}
    if as_json:
        print_json({"ok": not problems, "problems": problems, "counts": counts,
                     **({"repair": asdict(done)} if done else {})})
        if problems:
            raise typer.Exit(1)
        return
    if done:
        for uri in done.reingested:
            out.print(f"ingested again: {uri}")
        for uri in done.removed:
            err.print(labelled("removed:", "yellow", f"{uri} (damaged, and it "
                                "cannot be ingested again from here: ingest it yourself)"))
        for uri in done.kept:
            err.print(labelled("kept:", "yellow", f"{uri} (damaged, but the folder "
                                "it was ingested from is gone: mount it and repair again, "
                                "or delete it)"))
        for failed in done.errors:
            err.print(labelled("error:", "red", f"{failed.path}: {failed.message}"))
    if problems:
        for problem in problems:
            err.print(labelled("problem:", "red", problem))
        if not done:
            err.print("`isotope check --repair` rebuilds the keyword and vector indexes and "
                      "ingests the sources named again (or removes those whose files are "
                      "gone)")
        raise typer.Exit(1)
    out.print("ok: " + ", ".join(f"{n} {name}" for name, n in counts.items()))


@app.command()
def compact(index: IndexOpt = None, project: ProjectOpt = None, wait: WaitOpt = None,
            as_json: JsonOpt = False) -> None:
    """Fold the vectors written since the vector indexes were last saved into new ones
    (exact, or HNSW from 20,000 items, as the vector_index setting says) and give freed
    space back. Writes do this by themselves when enough has changed; searches, in this
    process or others, never wait for it."""
    import time

    with errors(), open_index(index, project, lock_wait=wait) as iso:
        started = time.perf_counter()
        done = iso.compact()
        seconds = time.perf_counter() - started
        size = iso.disk_size()
    if as_json:
        print_json({"vector_indexes": done, "seconds": round(seconds, 3), "disk_bytes": size})
        return
    out.print("compacted: " + ", ".join(f"{kind} {impl}" for kind, impl in done.items())
              + f" in {seconds:.1f} s" + (f"; {size / 1e6:.1f} MB on disk" if size else ""))


@app.command("copy")
def copy_command(
    source: Annotated[str, typer.Argument(help="The index to copy: a directory or a store "
                                          "URL (postgresql://...).")],
    target: Annotated[str, typer.Argument(help="Where to copy it: a new directory or an "
                                          "empty store URL (e.g. a new ?schema=).")],
    resume: Annotated[bool, typer.Option(
        "--resume", help="Finish an interrupted copy: skip the sources the target already "
        "holds unchanged.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Copy an index to another place, engine or vector backend (a folder with usearch or
    Chroma vectors, Chroma embedded or a server, PostgreSQL; in any direction): every
    source with its chunks, atoms, questions and vectors, and the index's settings and
    models; a new folder takes the vector_backend setting of the environment or .env.
    No model is called; searches give the same results in the copy. The target must hold
    no sources yet (or pass --resume after an interrupted copy)."""
    from pathlib import Path

    from isotope import stores
    from isotope.stores.copying import copy_index

    def progress(done: int, total: int, uri: str) -> None:
        if not as_json and (done == total or done % 50 == 0):
            err.print(f"{done}/{total} sources copied")

    where = [s if stores.scheme(s) else str(Path(s)) for s in (source, target)]
    with errors():
        if stores.scheme(where[0]) is None and not stores.exists(where[0]):
            raise IsotopeError(f"no index at {stores.describe(where[0])}; give the index "
                               "directory or URL to copy")
        report = copy_index(where[0], where[1], resume=resume, progress=progress,
                            vector_build=_vector_build(), backend=_vector_backend())
    if as_json:
        print_json({"from": report.source, "to": report.target, "sources": len(report.sources),
                    "skipped": len(report.skipped), "chunks": report.chunks,
                    "atoms": report.atoms, "questions": report.questions})
        return
    out.print(f"copied {len(report.sources)} sources ({report.chunks} chunks, {report.atoms} "
              f"atoms, {report.questions} questions) from {report.source} to {report.target}")


def _vector_backend() -> VectorBackend | None:
    """Where a new embedded target keeps its vectors (the vector_backend and chroma_*
    settings, from .env and the environment); None when they are not set."""
    from isotope.errors import SettingsError
    from isotope.index import vector_backend
    from isotope.settings import resolve

    try:
        chosen, origins = resolve(None)
    except SettingsError as exc:  # (warned of by _vector_build)
        if "vector_backend" in str(exc) or "chroma" in str(exc):
            raise
        return None
    if origins.get("vector_backend") == "default":
        return None
    return vector_backend(chosen, origins)


def _vector_build() -> tuple[str, str, int]:
    """The pg_vector_index and hnsw_build_* settings a copy builds with (from .env and the
    environment): a bad value of another setting does not stop a copy, which reads none
    of them (it is warned of); a bad value of these does."""
    from isotope.errors import SettingsError
    from isotope.settings import resolve

    try:
        chosen = resolve(None)[0]
    except SettingsError as exc:
        if "hnsw_build" in str(exc) or "pg_vector_index" in str(exc):
            raise
        err.print(f"warning: {exc}; the copy builds its vector indexes with the defaults")
        return ("hnsw", "auto", 0)
    return (chosen.pg_vector_index, chosen.hnsw_build_memory, chosen.hnsw_build_workers)
