"""``isotope serve`` and ``isotope mcp``: the HTTP API (``isotope.server.app``, its routes
in ``routes_*``), the MCP tools (``isotope.server.mcp``), the gate every request passes
(``isotope.server.gate``), its API keys (``isotope.server.auth``), the table of what each
operation may do (``isotope.server.operations``) and the work both shells share
(``isotope.server.work``). Needs the ``server`` extra: ``pip install
'isotopedb[server]'``."""

from __future__ import annotations

from isotope.server.auth import Keys

__all__ = ["Keys"]
