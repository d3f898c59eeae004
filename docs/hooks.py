"""MkDocs hook: each ``<!-- reference:NAME -->`` in a page becomes the reference made
from the code at build time (docs/reference.py), so the command line, settings and HTTP
pages cannot drift from what they describe; the benchmark pages' links between the
current figures and their history lead to the site's pages."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import reference

_MARKER = re.compile(r"<!-- reference:(\w+) -->")


_HISTORY = re.compile(r"\]\((?:\.\./)?history/(\d{4}-\d{2})\.md\)")
"""A link of benchmarks/RESULTS.md to a month of benchmarks/history/: the site's page of
that month."""
_CURRENT = re.compile(r"\]\(\.\./RESULTS\.md\)")
"""A link of a month of benchmarks/history/ to the current figures: the site's page."""


_BENCHMARKS = re.compile(r'^--8<-- "(benchmarks/[\w/-]+\.md)"$', re.MULTILINE)
"""A benchmark page's inclusion of its file of ``benchmarks/`` (made here rather than by
the snippets extension, so that its links are rewritten before they are checked)."""
ROOT = Path(__file__).resolve().parent.parent


def _benchmarks(match: re.Match[str]) -> str:
    text = (ROOT / match.group(1)).read_text(encoding="utf-8")
    text = _HISTORY.sub(r"](benchmarks-history-\1.md)", text)
    return _CURRENT.sub("](benchmarks.md)", text)


def on_page_markdown(markdown: str, **_: Any) -> str:
    markdown = _BENCHMARKS.sub(_benchmarks, markdown)
    return _MARKER.sub(lambda m: reference.generated(m.group(1)), markdown)


_ROLE = re.compile(r":(?:meth|class|func|data|attr|mod|exc|obj|const|ref):(?=<code>)")
"""A Sphinx role before the code it names (``:meth:`search``` renders as
``:meth:<code>search</code>``): the code alone is shown."""


def on_page_content(html: str, **_: Any) -> str:
    return _ROLE.sub("", html)
