"""API keys of ``isotope serve``: each key reads, or reads and writes, and may name who
it is. Keys come from the ``api_keys`` setting (``KEY`` or ``KEY:read``) and the
``api_keys_file`` setting, one per line::

    KEY                                    # reads and writes, an administrator
    KEY read                               # reads, an administrator
    KEY read user=alice groups=finance,hr  # reads what alice and her groups may see
    KEY read projects=sales,support        # only these projects of a server of several

A key naming a ``user`` or ``groups`` is that principal (:mod:`isotope.access`): it sees
only the sources whose access lists let it, and sources without a list not at all (a key
that names a user turns access control on). A key naming neither is an administrator.

The file is read again at the next request after it changes (new keys, scopes, users and
groups take effect then; a removed key is refused from then on); a file that no longer
reads, or that holds no key any more, is refused whole (every request answers 503) until
it is fixed, never served with its old keys nor opened to requests without one. A key on
two lines is an error.

A key with ``projects=`` may use only those projects of a server that serves several
(``isotope serve --project a --project b``); any other project's routes answer 404, as a
project that does not exist. Without it, a key may use every project served.

A presented key is compared with every configured key in constant time
(``hmac.compare_digest``), so the time taken says nothing about how much of a key was
right."""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from isotope.access import ADMIN, AccessError, Principal, file_version, served
from isotope.errors import SettingsError
from isotope.settings import ServerSettings

Scope = Literal["read", "write"]
SCOPES: tuple[Scope, ...] = ("read", "write")
FORM = ("an API key line is KEY [read|write] [user=NAME] [groups=A,B] [projects=A,B]: a "
        "key of at least "
        "16 printable ASCII characters, no spaces or control characters (e.g. from "
        "`python -c 'import secrets; print(secrets.token_urlsafe())'`)")


@dataclass(frozen=True)
class Keys:
    """The configured keys with their scopes and principals (empty: no key is asked
    for)."""

    entries: tuple[tuple[bytes, Scope, Principal], ...] = ()
    projects: tuple[tuple[str, ...] | None, ...] = ()
    """The projects each key may use (None: every one), in the order of ``entries``."""
    inline: tuple[str, ...] = ()
    """The keys of the ``api_keys`` setting (as lines)."""
    path: Path | None = None
    stamp: tuple[int, ...] | None = None
    """The file's modification time and size when it was read."""
    broken: str = ""
    """Why the file no longer reads (every request is refused meanwhile)."""

    def __bool__(self) -> bool:
        return bool(self.entries) or bool(self.broken)

    @property
    def names_users(self) -> bool:
        """Whether a key names a user or groups (access control is then on)."""
        return any(not principal.admin for _, _, principal in self.entries)

    def lookup(self, presented: str
               ) -> tuple[Scope, Principal, tuple[str, ...] | None] | None:
        """The scope, principal and projects of ``presented`` (None: not a key). Every
        key is compared."""
        given = presented.encode()
        found = None
        for (key, scope, principal), projects in zip(self.entries, self.projects,
                                                     strict=True):
            if hmac.compare_digest(given, key):
                found = (scope, principal, projects)
        return found

    def scope(self, presented: str) -> Scope | None:
        """The scope of ``presented`` (None: not a key)."""
        found = self.lookup(presented)
        return found[0] if found else None

    def fresh(self) -> Keys:
        """These keys, or the file's as it is now if it changed since it was read."""
        if self.path is None:
            return self
        try:
            stat = os.stat(self.path)
            stamp = file_version(stat)
        except OSError:
            stamp = None
        if stamp == self.stamp and stamp is not None:
            return self
        try:
            made = _read(self.inline, self.path)
        except SettingsError as exc:
            return Keys(inline=self.inline, path=self.path, stamp=stamp, broken=str(exc))
        if self and not made:  # emptied (an editor truncating it, every key revoked)
            return Keys(inline=self.inline, path=self.path, stamp=stamp,
                        broken=f"api_keys_file {self.path} holds no key now")
        return made

    @classmethod
    def from_settings(cls, settings: ServerSettings) -> Keys:
        inline = tuple(k.get_secret_value().replace(":", " ", 1) for k in settings.api_keys)
        return _read(inline, None if settings.api_keys_file is None
                     else Path(settings.api_keys_file))


def _read(inline: tuple[str, ...], path: Path | None) -> Keys:
    lines = list(inline)
    stamp = None
    if path is not None:
        try:
            stat = os.stat(path)
            stamp = file_version(stat)
            lines += [line for line in path.read_text().splitlines()
                      if line.strip() and not line.lstrip().startswith("#")]
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingsError(f"api_keys_file {path}: cannot be read "
                                f"({getattr(exc, 'strerror', None) or exc}); fix the path"
                                ) from None
    made = [_entry(line, path) for line in lines]
    keys = [m[0] for m in made]
    if len(set(keys)) < len(keys):  # (which line would win is no one's guess)
        raise SettingsError(f"{'api_keys_file ' + str(path) if path else 'api_keys'}: a key "
                            "appears twice; give each key one line")
    return Keys(tuple(m[:3] for m in made), tuple(m[3] for m in made), inline, path, stamp)


def _entry(line: str, path: Path | None
           ) -> tuple[bytes, Scope, Principal, tuple[str, ...] | None]:
    parts = line.split()
    where = f"api_keys_file {path}: " if path is not None else ""
    if not parts or len(parts[0]) < 16 or not _printable(parts[0]):
        raise SettingsError(where + FORM)
    key, rest = parts[0], parts[1:]
    scope: Scope = "write"
    if rest and rest[0] in SCOPES:
        scope = "read" if rest.pop(0) == "read" else "write"
    user: str | None = None
    groups: tuple[str, ...] = ()
    projects: tuple[str, ...] | None = None
    for part in rest:
        name, equals, value = part.partition("=")
        if not equals or name not in ("user", "groups", "projects") or not value:
            raise SettingsError(f"{where}{part!r} is not part of a key line; " + FORM)
        names = tuple(value.split(","))
        if not all(n.strip() for n in names):  # (groups=, makes no administrator)
            raise SettingsError(f"{where}{part!r} names an empty {name}: give each one a "
                                "name, or leave the field out; " + FORM)
        if name == "user":
            user = value
        elif name == "groups":
            groups = names
        else:
            projects = names
    try:
        principal = (served(Principal(user, groups)) if user is not None or groups
                     else ADMIN)
    except AccessError as exc:
        raise SettingsError(f"{where}{exc}") from None
    return key.encode(), scope, principal, projects


def _printable(key: str) -> bool:
    """Whether a key is printable ASCII (what an HTTP header carries as it is)."""
    return all(33 <= ord(c) <= 126 for c in key)
