"""Finding the files to ingest: folders walked (links followed, loops walked once),
include/exclude globs applied, each file named by the path it was reached by
(:func:`isotope.files.source_path`) with the folder it was found under. Pure: it reads
directory entries and file status, never file contents."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from isotope import loaders
from isotope.files import source_path
from isotope.reports import FileError


def inside(path: str | Path, roots: Sequence[Path]) -> bool:
    """Whether ``path``, its links followed, is one of ``roots`` (resolved) or below one."""
    real = Path(os.path.realpath(path))
    return any(real == root or root in real.parents for root in roots)


Names = dict[tuple[int, int], dict[str, str]]
"""The files found, by identity (device, inode): each path it was reached by, with the
root it was found under (hard links: one identity, several paths)."""


def discover(
    paths: Iterable[str | Path], include: Sequence[str], exclude: Sequence[str],
    confine: Sequence[Path] | None = None, *, names: Names | None = None,
) -> tuple[dict[Path, Path], list[FileError], list[FileError]]:
    """Files to ingest under ``paths`` (directories are walked), each as the absolute path
    it was reached by (see :mod:`isotope.files`) with the path it was found under (its
    root); files skipped; and paths that do not exist. A file reached twice (a symbolic
    link to a file already found) is ingested once, under the first path.

    With ``confine`` (resolved folders: a server's ``serve_roots``), a file or folder
    whose links lead out of them is not read: the file is listed with the errors, the
    folder is not walked.

    ``names``: filled with every file found by identity, the names of one file (hard
    links: a file under ``hr/`` and ``d/``) together, those skipped as the same file
    included: who may see a file is decided from all its names
    (:meth:`isotope.ingest.pipeline.Pipeline.ingest_files`)."""
    files: dict[Path, Path] = {}
    skipped: list[FileError] = []
    missing: list[FileError] = []
    seen: dict[tuple[int, int], Path] = {}
    roots = None if confine is None else [Path(os.path.realpath(r)) for r in confine]

    def add(file: Path, root: Path) -> None:
        if roots is not None and not inside(file, roots):
            missing.append(FileError(str(file), "a link leading out of the serve_roots "
                                     f"({os.path.realpath(file)}); not read"))
            return
        try:
            stat = file.stat()
        except OSError:
            files.setdefault(file, root)  # reported when it is read
            return
        if names is not None:  # (every file: its link count may change before the read)
            names.setdefault((stat.st_dev, stat.st_ino), {}).setdefault(str(file), str(root))
        first = seen.setdefault((stat.st_dev, stat.st_ino), file)
        if first != file:
            skipped.append(FileError(str(file), f"the same file as {first} (a link to it); "
                                     "ingested once"))
        else:
            files.setdefault(file, root)

    for raw in paths:
        path = source_path(raw)
        if not path.exists():
            missing.append(FileError(str(path), "no such file or directory"))
        elif path.is_dir():
            for file in _walk(path, include, exclude, roots, missing):
                if file.suffix.lower() in loaders.COMPANIONS:
                    continue  # read with the files it belongs to (a .bib with its .tex)
                if loaders.loader_for(file) is None:
                    skipped.append(FileError(str(file), f"unsupported file type {file.suffix!r}"))
                else:
                    add(file, path)
        else:
            add(path, path)  # named explicitly: an unsupported type is an error, not a skip
    return files, skipped, missing


def _walk(root: Path, include: Sequence[str], exclude: Sequence[str],
          confine: Sequence[Path] | None = None, refused: list[FileError] | None = None,
          ) -> Iterator[Path]:
    seen: set[tuple[int, int]] = set()
    for folder, dirs, names in os.walk(root, followlinks=True):
        if confine is not None and not inside(folder, confine):  # a link out of them
            dirs[:] = []
            if refused is not None:
                refused.append(FileError(folder, "a link leading out of the serve_roots "
                                         f"({os.path.realpath(folder)}); not read"))
            continue
        stat = os.stat(folder)
        if (stat.st_dev, stat.st_ino) in seen:  # a symlink loop
            dirs[:] = []
            continue
        seen.add((stat.st_dev, stat.st_ino))
        rel_folder = Path(folder).relative_to(root)
        dirs[:] = sorted(
            d for d in dirs if not _matches((rel_folder / d).as_posix() + "/", exclude)
        )
        for name in sorted(names):
            rel = (rel_folder / name).as_posix()
            if _matches(rel, exclude) or (include and not _matches(rel, include)):
                continue
            yield Path(folder) / name


def _matches(rel: str, patterns: Sequence[str]) -> bool:
    name = rel.rstrip("/").rsplit("/", 1)[-1]
    return any(
        fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(rel.rstrip("/"), p) or fnmatch.fnmatch(name, p)
        for p in patterns
    )
