"""``isotope serve``: the HTTP API (``isotope.server.app``) and its API keys
(``isotope.server.auth``). Needs the ``server`` extra: ``pip install 'isotopedb[server]'``."""

from __future__ import annotations

from isotope.server.auth import Keys

__all__ = ["Keys"]
