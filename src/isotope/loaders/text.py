"""Plain text and Markdown."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from isotope.errors import LoaderError
from isotope.loaders import Document, heading_sections

_CONTROL = re.compile(rb"[\x00-\x08\x0e-\x1a\x1c-\x1f]")


def decode_text(path: Path, data: bytes) -> str:
    """Decode a text file strictly: UTF-8 (BOM allowed) or UTF-16 with a BOM.

    Binary data and invalid UTF-8 raise :class:`LoaderError` with the fix in the message.
    """
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise LoaderError(path, f"invalid UTF-16 at byte {exc.start}") from exc
    head = data[:8192]
    if b"\x00" in head or len(_CONTROL.findall(head)) > max(8, len(head) // 100):
        raise LoaderError(
            path, "looks like a binary file, not text; check its extension or exclude it"
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise LoaderError(
            path,
            f"not valid UTF-8 (byte {exc.start}); re-save it as UTF-8, "
            "e.g. iconv -f LATIN1 -t UTF-8",
        ) from exc


def load_text(path: Path, data: bytes) -> Document:
    return Document(decode_text(path, data), {"type": "text", "title": path.stem})


_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_ATX = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_SETEXT = re.compile(r"^\s{0,3}(=+|-+)\s*$")
_FRONT = re.compile(r"\A---\r?\n(.*?)\r?\n(?:---|\.\.\.)\r?\n", re.S)


def load_markdown(path: Path, data: bytes) -> Document:
    """Markdown: text kept as written (offsets are the file's); each section carries its
    heading path (``headings``); YAML front matter becomes metadata and is blanked out."""
    text = decode_text(path, data)
    metadata: dict[str, object] = {"type": "markdown", "title": path.stem}
    front = _FRONT.match(text)
    has_front_title = False
    warnings: list[str] = []
    if front:
        found = front_matter(front.group(1), warnings)
        if "type" in found:  # the loader's type stays the document's type
            found["doc_type"] = found.pop("type")
        metadata.update(found)
        has_front_title = "title" in found
        # Same length, so offsets still point into the file.
        text = re.sub(r"[^\n]", " ", front.group(0)) + text[front.end() :]

    headings: list[tuple[int, int, str]] = []  # (offset, level, title)
    offset, in_fence, previous = 0, "", ""
    for line in text.splitlines(keepends=True):
        fence = _FENCE.match(line)
        if fence and (not in_fence or fence.group(1)[0] == in_fence[0]):
            in_fence = "" if in_fence else fence.group(1)
        elif not in_fence:
            atx = _ATX.match(line)
            setext = _SETEXT.match(line)
            if atx:
                headings.append((offset, len(atx.group(1)), atx.group(2)))
            elif setext and previous.strip() and not _ATX.match(previous):
                level = 1 if setext.group(1)[0] == "=" else 2
                headings.append((offset - len(previous), level, previous.strip()))
        previous = line
        offset += len(line)

    if headings and not has_front_title and headings[0][1] == 1:
        metadata["title"] = headings[0][2]
    return Document(text, metadata, heading_sections(headings, len(text)), warnings=warnings)


MAX_FRONT_MATTER = 65_536
"""Characters of front matter read as YAML (more is left out, with a warning)."""


def front_matter(yaml_text: str, warnings: list[str]) -> dict[str, object]:
    """Front matter as metadata: YAML (``tags: [red, blue]`` a list, quoted keys
    unquoted, ``null`` no value, dates as ISO text), safely (no objects, no aliases: a
    billion-laughs document is refused); nested values kept as JSON. Front matter that
    is not a YAML mapping is left out with a warning."""
    import datetime

    import yaml

    class NoAliases(yaml.SafeLoader):  # type: ignore[misc]
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.events.AliasEvent):
                raise yaml.YAMLError("YAML aliases are not read in front matter")
            return super().compose_node(parent, index)

    if len(yaml_text) > MAX_FRONT_MATTER:
        warnings.append(f"front matter over {MAX_FRONT_MATTER:,} characters: left out")
        return {}
    try:
        found = yaml.load(yaml_text, Loader=NoAliases)  # a SafeLoader
    except yaml.YAMLError as exc:
        said = " ".join(str(exc).split())[:120]
        warnings.append(f"front matter is not readable YAML ({said}): left out")
        return {}
    if not isinstance(found, dict):
        warnings.append("front matter is not a YAML mapping (key: value lines): left out")
        return {}

    def plain(value: Any) -> Any:
        if isinstance(value, datetime.date | datetime.datetime | datetime.time):
            return value.isoformat()
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)  # (JSON has no NaN or infinity)
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple | set):
            return [plain(v) for v in value]
        if value is None or isinstance(value, bool | int | float | str):
            return value
        return str(value)

    return {str(k).strip(): plain(v) for k, v in found.items()
            if v is not None and str(k).strip()}
