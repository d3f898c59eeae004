"""Who may see what: principals, the access lists of sources, and the rules file.

A **principal** is who asks: a user and the groups they belong to, or an administrator
(who sees everything). A **source's access list** names who may see it: ``public``,
``user:NAME`` and ``group:NAME`` entries; a source without a list has ``None``. Chunks,
atoms and questions take their source's list: a search for a principal is a search over
the sources it may see (:func:`condition`, a condition of every vector and keyword search,
never a filter on its top k).

With access control on (the ``access_control`` setting, or a server whose keys name
users), a source without a list is seen by administrators only (fail closed); off (a
local index, the default), it is seen by everyone, and a list, where one is set, still
restricts its source.

The rules file, :data:`RULES_FILE` in an ingested folder, gives lists by path::

    # the last matching line wins
    **          = public
    hr/**       = group:hr
    board/*.eml = user:ceo, group:board

A pattern is matched against the path relative to the folder, ``/`` between folders:
``*`` and ``?`` stay within one folder, ``**`` crosses them, and a pattern without ``/``
matches a file name in any folder."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, overload

from isotope.errors import IsotopeError
from isotope.models import ACCESS_BY_HAND, ACCESS_KEY, READ_AS, Condition, Source

PUBLIC = "public"
RULES_FILE = ".isotope-access"
_NAME = re.compile(r"^[^\s,:=\x00-\x1f\x7f]{1,200}$")


class AccessError(IsotopeError):
    """An access list, principal or rules file that cannot be read; the message names
    the accepted forms."""


def entry(text: str) -> str:
    """One access list entry, checked: ``public``, ``user:NAME`` or ``group:NAME`` (a
    name of 1-200 characters without spaces, commas, colons, ``=`` or control
    characters)."""
    value = str(text).strip()
    if value == PUBLIC:
        return value
    kind, _, name = value.partition(":")
    if kind not in ("user", "group") or not _NAME.match(name):
        raise AccessError(f"{text!r} is not an access entry: use public, user:NAME or "
                          "group:NAME (no spaces, commas, colons or '=' in a name)")
    return f"{kind}:{name}"


def access_list(entries: Iterable[str]) -> list[str]:
    """An access list: its entries checked, each once, sorted (an empty list lets only
    administrators see the source). Entries may also come comma-separated."""
    found: set[str] = set()
    for item in entries:
        for part in str(item).split(","):
            if part.strip():
                found.add(entry(part))
    return sorted(found)


@dataclass(frozen=True)
class Principal:
    """Who asks: a user and their groups, or an administrator (``admin``: sees every
    source, with a list or not)."""

    user: str | None = None
    groups: tuple[str, ...] = ()
    admin: bool = False
    strict: bool = False
    """Sources without a list are hidden from it even with the ``access_control`` setting
    off: a principal named by a server's API key (keys naming users turn access control
    on)."""

    def __post_init__(self) -> None:
        if self.user is not None:
            entry(f"user:{self.user}")
        for group in self.groups:
            entry(f"group:{group}")

    @classmethod
    def parse(cls, text: str) -> Principal:
        """``user:NAME[,group:NAME...]`` (groups alone are allowed too)."""
        user: str | None = None
        groups: list[str] = []
        for part in access_list([text]):
            kind, _, name = part.partition(":")
            if kind == "user":
                if user is not None and user != name:
                    raise AccessError(f"{text!r} names two users; a principal is one user "
                                      "with any number of groups")
                user = name
            elif kind == "group":
                groups.append(name)
            else:
                raise AccessError(f"{text!r}: a principal is user:NAME[,group:NAME...]")
        if user is None and not groups:
            raise AccessError(f"{text!r}: a principal is user:NAME[,group:NAME...]")
        return cls(user, tuple(groups))

    def entries(self) -> tuple[str, ...]:
        """The list entries that let this principal see a source."""
        return (PUBLIC, *([f"user:{self.user}"] if self.user else []),
                *(f"group:{g}" for g in self.groups))

    def sees(self, access: Sequence[str] | None, *, control: bool) -> bool:
        """Whether this principal may see a source with list ``access`` (None: none)."""
        if self.admin:
            return True
        if access is None:
            return not (control or self.strict)
        return bool(set(access) & set(self.entries()))

    def __str__(self) -> str:
        if self.admin:
            return "administrator"
        return ",".join([*([f"user:{self.user}"] if self.user else []),
                         *(f"group:{g}" for g in self.groups)])


ADMIN = Principal(admin=True)

ENTITLED: dict[str, str] = {
    "access_lists": "the access lists of the sources it lists (the names of other users "
                    "and groups)",
    "index_details": "the index's location, size on disk, models, settings and replicas "
                     "in its status",
    "learned_questions": "learned questions (other users' queries): shown among a chunk's "
                         "questions, and raising their chunk in a search (a user too with "
                         "the show_learned setting)",
    "hidden_members": "deleting a container (a mailbox) that holds sources it may not see",
    "learning_at_once": "a useful mark learning its question at once (a user's waits for "
                        "review; the learn setting, access control or a read-only key can "
                        "hold anyone's)",
}
"""What only whoever sees everything (the owner, an administrator) is given: every
decision of the library and the server that shapes what an operation shows or does by
whether the principal is an administrator, one row each, asked through :func:`entitled`.
The table of operations (:data:`isotope.server.operations.OPERATIONS`, its ``shapes``)
names the rows each operation's reply or work is shaped by, and
``tests/test_operations.py`` checks them with every kind of key."""


def sees_all(principal: Principal | None) -> bool:
    """Whether ``principal`` is the owner (None) or an administrator: what an operation
    needing an administrator (:func:`isotope.server.operations.permit`) and each row of
    :data:`ENTITLED` (:func:`entitled`) ask."""
    return principal is None or principal.admin


def entitled(what: str, principal: Principal | None) -> bool:
    """Whether ``principal`` is given ``what`` (a row of :data:`ENTITLED`; a name not in
    it is a ``KeyError``): the owner (None) and administrators are, a user is not."""
    ENTITLED[what]
    return sees_all(principal)


def principal_of(value: Principal | str | dict[str, Any] | None) -> Principal | None:
    """A principal from what the API takes: a :class:`Principal`, its text form
    (``user:alice,group:finance``), a dict (``{"user": ..., "groups": [...]}``) or None
    (the owner: no restriction)."""
    if value is None or isinstance(value, Principal):
        return value
    if isinstance(value, str):
        return Principal.parse(value)
    if isinstance(value, dict):
        groups = value.get("groups") or []
        if isinstance(groups, str) or not isinstance(groups, list | tuple):
            raise AccessError("a principal's groups are a list of names")
        return Principal(value.get("user"), tuple(str(g) for g in groups),
                         bool(value.get("admin", False)))
    raise AccessError(f"a principal is user:NAME[,group:NAME...], not {type(value).__name__}")


@overload
def served(principal: Principal) -> Principal: ...
@overload
def served(principal: None) -> None: ...
def served(principal: Principal | None) -> Principal | None:
    """The principal a served surface answers for (an HTTP API key naming a user or
    groups, ``isotope mcp --as``): one definition of its rights everywhere. It is strict
    (sources without a list are hidden from it, access control on or off) and reads
    only: its marks wait for review unless the ``learn`` setting says otherwise, and it
    cannot ingest. None or an administrator: the owner."""
    if principal is None or sees_all(principal):
        return principal
    return Principal(principal.user, principal.groups, strict=True)


def condition(principal: Principal | None, *, control: bool) -> Condition | None:
    """The search condition for ``principal`` (None: sees everything): the source's list
    holds one of its entries, or (access control off) the source has no list. Its first
    value says whether sources without a list are seen."""
    if principal is None or sees_all(principal):
        return None
    return Condition(ACCESS_KEY, "eq", (not (control or principal.strict),
                                        *principal.entries()))


def conditions(principal: Principal | None, *, control: bool) -> list[Condition]:
    """The search conditions of ``principal``: its :func:`condition`, or none for whoever
    sees everything (the owner, an administrator)."""
    found = condition(principal, control=control)
    return [found] if found is not None else []


def email_list(metadata: dict[str, Any]) -> list[str] | None:
    """An email's sender and recipients as ``user:ADDRESS`` entries (None: no address)."""
    found: list[str] = []
    for key in ("from", "to", "cc"):
        value = metadata.get(key)
        for address in value if isinstance(value, list) else [value]:
            if isinstance(address, str) and address.strip() and _NAME.match(
                    address.strip().lower()):
                found.append(f"user:{address.strip().lower()}")
    return sorted(set(found)) or None


# -- the rules file --------------------------------------------------------------------
@dataclass(frozen=True)
class Rules:
    """The lines of a rules file: (pattern, its regular expression, the list)."""

    path: Path
    lines: tuple[tuple[str, re.Pattern[str], tuple[str, ...]], ...]

    def match(self, relative: str) -> list[str] | None:
        """The list of the last line matching ``relative`` (a ``/``-separated path under
        the rules file's folder), or None."""
        found: tuple[str, ...] | None = None
        for _, pattern, entries in self.lines:
            if pattern.match(relative):
                found = entries
        return list(found) if found is not None else None


UNSUPPORTED = "[]{}\\!"
"""Characters of other glob syntaxes (classes, alternatives, escapes, negation) a rules
pattern does not have: refused rather than matched literally (a line that never matches
would leave its files with the list of an earlier line)."""


def _pattern(glob: str) -> re.Pattern[str]:
    """A rules-file glob as a regular expression over a relative path."""
    glob = glob.strip()
    anywhere = "/" not in glob.rstrip("/")  # (a leading "/" anchors it to the folder)
    glob = glob.lstrip("/")
    out, i = [], 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    body = "".join(out)
    if glob.endswith("/"):
        body += ".*"  # a folder: everything under it
    return re.compile(("(?:.*/)?" if anywhere else "") + body + r"\Z")


def read_rules(path: Path) -> Rules:
    """The rules file at ``path``; :class:`AccessError` naming the line and the form."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AccessError(f"{path}: cannot be read ({exc}); fix or remove it") from None
    lines = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        glob, equals, listed = line.partition("=")
        try:
            if not equals or not glob.strip():
                raise AccessError("no '='")
            if unsupported := sorted(set(glob) & set(UNSUPPORTED)):
                raise AccessError(
                    f"{' '.join(unsupported)} in a pattern: a pattern has * (any name), ** "
                    "(any folders) and ? (any one character), nothing else; '?' stands for "
                    "one of these characters in a name")
            entries = tuple(access_list([listed.replace(" ", ",")]))
        except AccessError as exc:
            raise AccessError(
                f"{path}, line {number}: {raw.strip()!r} is not a rule ({exc}); a rule is "
                "GLOB = ENTRY[, ENTRY...], each entry public, user:NAME or group:NAME, "
                "e.g. 'hr/** = group:hr'") from None
        lines.append((glob.strip(), _pattern(glob), entries))
    return Rules(path, tuple(lines))


@lru_cache(maxsize=64)
def _rules_at(path: str, changed: tuple[int, ...]) -> Rules:
    return read_rules(Path(path))


def file_version(stat: os.stat_result) -> tuple[int, ...]:
    """What tells a file's versions apart without reading it: its inode, size and
    modification and change times in nanoseconds (the change time cannot be set back,
    so an edit of the same length with the old modification time restored is seen)."""
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def rules_for(root: str | Path | None) -> Rules | None:
    """The rules file of an ingested root (a folder, or a file's folder), re-read when
    it changes; None where there is none."""
    if root is None:
        return None
    folder = Path(root)
    if not folder.is_dir():
        folder = folder.parent
    path = folder / RULES_FILE
    try:
        stat = path.stat()
    except OSError:
        return None
    return _rules_at(str(path), file_version(stat))


def _real_relative(root: str, real: str | None) -> str | None:
    """The path the rules of ``root`` match for a file whose real path, as it was read,
    is ``real`` (links followed by the open itself), relative to the real folder of the
    rules, so a link named ``0-readme.md`` to ``hr/pay.md`` takes the list of
    ``hr/pay.md``. None: outside the folder (a link to ``~/.aws/credentials``), or not
    known to be the file read (never resolved again: a link may point elsewhere since):
    no rule of the folder speaks for it."""
    if real is None:
        return None
    folder = Path(root) if Path(root).is_dir() else Path(root).parent
    try:
        return Path(real).relative_to(folder.resolve()).as_posix()
    except (OSError, ValueError, RuntimeError):  # (outside the folder, or a link loop)
        return None


def file_of(uri: str, metadata: dict[str, Any]) -> str:
    """The file source ``uri`` is read from: a member's (an attachment, a mailbox's
    message) is the file it is in; a file's is its own path, which may hold a ``#``."""
    return str(metadata.get("file") or (
        uri.split("#", 1)[0] if metadata.get("container") else uri))


def strictest(lists: Sequence[list[str] | None]) -> list[str] | None:
    """One list letting see a file only who may see it under every one of ``lists`` (the
    lists of a file's several names): ``public`` restricts nothing; the entries every
    other list holds; no list beside a list, or nothing in common: an empty list
    (administrators only)."""
    if all(listed == lists[0] for listed in lists):
        return lists[0]
    if any(listed is None for listed in lists):
        return []  # (without a list, a name is everyone's or administrators' alone)
    common: set[str] | None = None
    for listed in lists:
        if listed is not None and PUBLIC not in listed:
            common = set(listed) if common is None else common & set(listed)
    return [PUBLIC] if common is None else sorted(common)


def set_for(uri: str) -> str:
    """The real path of source ``uri``'s file now (a member's: the file it is in; links
    followed), or ``uri`` itself when it is no file's (an identifier given to
    ``ingest_chunks``)."""
    file = uri.split("#", 1)[0]
    return os.path.realpath(file) if os.path.isabs(file) else uri


def mark_for(source: Source) -> str:
    """What a list set by hand on ``source`` is set for: the real path of the file its
    text was read from, as the ingest that stored it read it (never the path resolved
    when the list is set: a link pointed at another file since would make the list that
    file's); a source that is no file's, its own name. One stored before isotope kept
    that path: its file's real path now if that is its own path (no link in the way),
    else a mark no file matches (the rules speak at the next sync)."""
    if source.loader == "chunks":
        return source.uri
    read = source.metadata.get(READ_AS)
    if read:
        return str(read)
    file, now = source.uri.split("#", 1)[0], set_for(source.uri)
    return now if not os.path.isabs(file) or now == os.path.abspath(file) else (
        UNBOUND + source.uri)


UNBOUND = "unbound:"
"""The start of a mark set for no file (:func:`mark_for`): it never holds."""


def held_by_hand(source: Source | None, real: str | None) -> str | None:
    """The mark of ``source``'s list set by hand while it still holds: the file read now,
    whose real path as it was read is ``real``, is the one it was set for (replaced by a
    link to another file, the list set by hand is not that file's: the rules speak
    again). Where no file was read (``ingest_chunks``), a source that is no file's holds
    it as its own name. None: no list by hand, or it no longer holds."""
    mark = None if source is None else source.metadata.get(ACCESS_BY_HAND)
    if not mark or source is None:
        return None
    file = source.uri.split("#", 1)[0]
    if real is not None:  # (a file was read: it decides, whatever was stored before)
        target = real
    elif source.loader == "chunks" or not os.path.isabs(file):
        target = source.uri
    else:
        return None
    if mark is True:  # (marked before the mark said what for: its own file only)
        return target if real is None or real == os.path.abspath(file) else None
    return str(mark) if mark == target else None


EMAIL_LOADERS = frozenset({"email", "email-thread"})
"""The loaders whose ``from``/``to``/``cc`` are an email's headers (a Markdown file's
front matter may name the same keys: they give it no list)."""


@dataclass
class Assigner:
    """The access list a source gets when it is stored or seen again by an ingest: the
    lists given (``--allow``), else the rules file of its root, else its sender and
    recipients (an email, with ``email_access``), else the list it had (a member of a
    container, such as an email's attachment: its container's). A list set by hand
    holds against all but the lists given."""

    allow: tuple[str, ...] | None = None
    email_access: bool = False

    def __call__(self, uri: str, root: str | None, metadata: dict[str, Any],
                 had: list[str] | None, *, loader: str = "",
                 by_hand: bool = False, real: str | None = None) -> list[str] | None:
        """The list of source ``uri`` (its ``loader``; ``by_hand``: ``had`` was set by
        hand and holds, unless lists are given; ``real``: the real path of its file as it
        was read: a file not known to be the one read matches no rule)."""
        if self.allow is not None:
            if root is not None and real is not None and _real_relative(root, real) is None:
                return []  # (a link out of the folder given: not what the lists were for)
            return list(self.allow)
        if by_hand:
            return had
        rules = rules_for(root)
        if rules is not None and root is not None:
            relative = _real_relative(root, real)  # (a member: as the file it is in)
            if relative is None:  # outside the rules' folder: administrators only
                return []
            found = rules.match(relative)
            if found is not None:
                return found
        if self.email_access and loader in EMAIL_LOADERS and (
                metadata.get("from") or metadata.get("to")):  # (not a file's front matter)
            listed = email_list(metadata)
            if listed is not None:
                return listed
        return had
