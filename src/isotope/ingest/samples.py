"""The sample documents the package carries (the repository's ``examples/``), written out
for a first try from ``pip install`` alone: ``isotope sample`` or :func:`write_sample`."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from isotope.errors import InvalidArgument
from isotope.files import write_atomically

SAMPLE = "data/sample"
"""Where the sample documents are in the package."""


def write_sample(folder: str | Path) -> list[Path]:
    """Write the sample documents into ``folder`` (made if missing; refused if it holds
    anything, so nothing is overwritten); the files written."""
    target = Path(folder).expanduser()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise InvalidArgument(f"{target} is not an empty folder; give a new one (nothing "
                              "was written)")
    written: list[Path] = []

    def copy(source: resources.abc.Traversable, to: Path) -> None:
        to.mkdir(parents=True, exist_ok=True)
        for item in sorted(source.iterdir(), key=lambda i: i.name):
            if item.is_dir():
                copy(item, to / item.name)
            else:
                write_atomically(to / item.name, item.read_bytes())
                written.append(to / item.name)

    copy(resources.files("isotope") / SAMPLE, target)
    return written
