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
two lines is an error. The 503 says only that the keys file is invalid; why (the file and
the line) is in the server's log, once. No error quotes any of a line (it may be a key, or
two keys joined).

A key with ``projects=`` may use only those projects of a server that serves several
(``isotope serve --project a --project b``); any other project's routes answer 404, as a
project that does not exist. Without it, a key may use every project served.

A presented key is compared with every configured key in constant time
(``hmac.compare_digest``), so the time taken says nothing about how much of a key was
right."""

from __future__ import annotations

import hmac
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from isotope.access import ADMIN, AccessError, Principal, file_version, served
from isotope.errors import SettingsError
from isotope.settings import ServerSettings

log = logging.getLogger(__name__)

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
    """Why the file no longer reads (every request is refused meanwhile): for the log,
    never a reply (it names the file)."""

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
            return self._broken(stamp, str(exc))
        if self and not made:  # emptied (an editor truncating it, every key revoked)
            return self._broken(stamp, f"api_keys_file {self.path} holds no key now")
        if self.broken:
            log.warning("api_keys_file %s reads again; requests are answered", self.path)
        return made

    def _broken(self, stamp: tuple[int, ...] | None, why: str) -> Keys:
        """These keys refused whole for ``why`` (which names the file and the line, never
        a key), said in the server's log once, not at each request."""
        if why != self.broken:
            log.error("%s; every request is refused (503) until the file is fixed", why)
        return Keys(inline=self.inline, path=self.path, stamp=stamp, broken=why)

    @classmethod
    def from_settings(cls, settings: ServerSettings) -> Keys:
        inline = tuple(k.get_secret_value().replace(":", " ", 1) for k in settings.api_keys)
        return _read(inline, None if settings.api_keys_file is None
                     else Path(settings.api_keys_file))


def _read(inline: tuple[str, ...], path: Path | None) -> Keys:
    """The keys of the ``api_keys`` setting and the file. An error names the setting's
    entry or the file and line, and never holds any of a line's text: a line may be a
    key, or two keys joined, and the message reaches the server's log (and the file's
    path never reaches a reply: see :class:`~isotope.server.gate.Gate`)."""
    # (where each line is from, its place there, its text)
    lines = [("api_keys", f"key {n}", line) for n, line in enumerate(inline, 1)]
    stamp = None
    if path is not None:
        try:
            stat = os.stat(path)
            stamp = file_version(stat)
            data = path.read_bytes()
        except OSError as exc:
            raise SettingsError(f"api_keys_file {path}: cannot be read "
                                f"({exc.strerror or type(exc).__name__}); fix the path"
                                ) from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:  # (its message quotes the bytes: not shown)
            line = data[:exc.start].count(b"\n") + 1
            raise SettingsError(f"api_keys_file {path}, line {line}: not UTF-8 text; save "
                                "the file as UTF-8 (a key is printable ASCII)") from None
        lines += [(f"api_keys_file {path}", f"line {n}", line)
                  for n, line in enumerate(text.splitlines(), 1)
                  if line.strip() and not line.lstrip().startswith("#")]
    made = [_entry(line, f"{source}, {place}") for source, place, line in lines]
    first: dict[bytes, tuple[str, str]] = {}
    for (source, place, _), (key, *_) in zip(lines, made, strict=True):
        if key in first:  # (which line would win is no one's guess)
            other, there = first[key]
            raise SettingsError(f"{source}, {place}: the same key as "
                                f"{there if other == source else f'{other}, {there}'}; "
                                "give each key one line")
        first[key] = source, place
    return Keys(tuple(m[:3] for m in made), tuple(m[3] for m in made), inline, path, stamp)


def _entry(line: str, where: str
           ) -> tuple[bytes, Scope, Principal, tuple[str, ...] | None]:
    """One key line, read; ``where`` names it in an error, which quotes none of it."""
    parts = line.split()
    if not parts or len(parts[0]) < 16:
        raise SettingsError(f"{where}: the key (its first field) is too short; " + FORM)
    if not _printable(parts[0]):
        raise SettingsError(f"{where}: the key (its first field) holds a character that "
                            "is not printable ASCII; " + FORM)
    key, rest = parts[0], parts[1:]
    scope: Scope = "write"
    if rest and rest[0] in SCOPES:
        scope = "read" if rest.pop(0) == "read" else "write"
    user: str | None = None
    groups: tuple[str, ...] = ()
    projects: tuple[str, ...] | None = None
    for field, part in enumerate(rest, len(parts) - len(rest) + 1):
        name, equals, value = part.partition("=")
        if not equals or name not in ("user", "groups", "projects") or not value:
            # (a second key on the line lands here: the field is never quoted)
            raise SettingsError(f"{where}: field {field} is not part of a key line (a typo, "
                                "or two keys on one line?); " + FORM)
        names = tuple(value.split(","))
        if not all(n.strip() for n in names):  # (groups=, makes no administrator)
            raise SettingsError(f"{where}: field {field} names an empty {name}: give each "
                                "one a name, or leave the field out; " + FORM)
        if name == "user":
            user = value
        elif name == "groups":
            groups = names
        else:
            projects = names
    try:
        principal = (served(Principal(user, groups)) if user is not None or groups
                     else ADMIN)
    except AccessError:  # (its message quotes the name)
        raise SettingsError(f"{where}: a user or group name is not valid (1-200 "
                            "characters, no spaces, commas, colons, '=' or control "
                            "characters); " + FORM
                            ) from None
    return key.encode(), scope, principal, projects


def _printable(key: str) -> bool:
    """Whether a key is printable ASCII (what an HTTP header carries as it is)."""
    return all(33 <= ord(c) <= 126 for c in key)
