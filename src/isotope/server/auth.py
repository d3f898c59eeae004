"""API keys of ``isotope serve``: each key reads, or reads and writes. Keys come from the
``api_keys`` setting (``KEY`` or ``KEY:read``) and the ``api_keys_file`` setting (one per
line: ``KEY`` or ``KEY read``). A presented key is compared with every configured key in
constant time (``hmac.compare_digest``), so the time taken says nothing about how much of
a key was right."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from isotope.errors import SettingsError
from isotope.settings import ServerSettings

Scope = Literal["read", "write"]
SCOPES: tuple[Scope, ...] = ("read", "write")


@dataclass(frozen=True)
class Keys:
    """The configured keys with their scopes (empty: no key is asked for)."""

    entries: tuple[tuple[bytes, Scope], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.entries)

    def scope(self, presented: str) -> Scope | None:
        """The scope of ``presented`` (None: not a key). Every key is compared."""
        given = presented.encode()
        found: Scope | None = None
        for key, scope in self.entries:
            if hmac.compare_digest(given, key):
                found = scope
        return found

    @classmethod
    def from_settings(cls, settings: ServerSettings) -> Keys:
        lines = [k.get_secret_value().replace(":", " ", 1) for k in settings.api_keys]
        path = settings.api_keys_file
        if path is not None:
            try:
                lines += [line for line in Path(path).read_text().splitlines()
                          if line.strip() and not line.lstrip().startswith("#")]
            except OSError as exc:
                raise SettingsError(f"api_keys_file {path}: cannot be read "
                                    f"({exc.strerror or exc}); fix the path") from None
        entries: list[tuple[bytes, Scope]] = []
        for line in lines:
            parts = line.split()
            scope = parts[1] if len(parts) > 1 else "write"
            if (len(parts) > 2 or scope not in SCOPES or len(parts[0]) < 16
                    or not _printable(parts[0])):
                raise SettingsError(
                    "an API key is KEY (reads and writes) or KEY read: at least 16 "
                    "printable ASCII characters, no spaces or control characters (e.g. from "
                    "`python -c 'import secrets; print(secrets.token_urlsafe())'`)")
            entries.append((parts[0].encode(), scope))
        return cls(tuple(entries))


def _printable(key: str) -> bool:
    """Whether a key is printable ASCII (what an HTTP header carries as it is)."""
    return all(33 <= ord(c) <= 126 for c in key)
