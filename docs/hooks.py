"""MkDocs hook: each ``<!-- reference:NAME -->`` in a page becomes the reference made
from the code at build time (docs/reference.py), so the command line, settings and HTTP
pages cannot drift from what they describe."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import reference

_MARKER = re.compile(r"<!-- reference:(\w+) -->")


def on_page_markdown(markdown: str, **_: Any) -> str:
    return _MARKER.sub(lambda m: reference.generated(m.group(1)), markdown)


_ROLE = re.compile(r":(?:meth|class|func|data|attr|mod|exc|obj|const|ref):(?=<code>)")
"""A Sphinx role before the code it names (``:meth:`search``` renders as
``:meth:<code>search</code>``): the code alone is shown."""


def on_page_content(html: str, **_: Any) -> str:
    return _ROLE.sub("", html)
