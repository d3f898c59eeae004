"""Email: an ``.eml`` file is one message (stdlib ``email``); an ``.mbox`` mailbox holds
many, each ingested as its own source (``archive.mbox#<message-id>``), read one at a
time so that a mailbox of any size takes the memory of its largest message.

What is indexed is what the sender wrote: quoted replies (``> ...`` lines, and an
"On ... wrote:" or "-----Original Message-----" block with all after it) and the
signature (after a ``-- `` line) are left out, so a thread does not index the same text
once per reply. The subject heads the text. Metadata, for results and ``--where``:
``from`` (the address, lowercase; ``from_name``), ``to`` and ``cc`` (lists of
addresses), ``subject``, ``date`` (ISO 8601), ``message_id``, ``in_reply_to``, ``thread``
(the message id the thread started with) and ``attachments`` (their file names). An
attachment of a type isotope reads (.txt, .md, .pdf, .docx, ...) is ingested as its own
source, ``message.eml#agenda.txt``, linked to the message (``container``).

A header or a body in a broken or unknown encoding is read with what can be decoded and
a warning; a message nested deeper than :data:`MAX_DEPTH` parts is read down to there.
"""

from __future__ import annotations

import contextlib
import email
import email.header
import email.parser
import email.policy
import re
from collections.abc import Iterator
from email.message import Message
from email.utils import getaddresses, parsedate_to_datetime
from pathlib import Path
from typing import Any, BinaryIO

from isotope.errors import LoaderError
from isotope.loaders import Document, Member

MAX_DEPTH = 20
"""MIME parts nested deeper than this are not read (a hostile message nests thousands)."""
_ORIGINAL = re.compile(r"^\s*(?:-{2,}\s*Original Message\s*-{2,}\s*$|_{10,}\s*\n\s*From:)",
                       re.M | re.I)
_ATTRIBUTION = re.compile(r"^\s*On\b.{0,300}\bwrote:\s*$", re.I)
_ID = re.compile(r"<[^<>\s]+>")


def load_eml(path: Path, data: bytes) -> Document:
    warnings: list[str] = []
    try:
        message = email.message_from_bytes(data, policy=email.policy.compat32)
        flat = False
    except RecursionError:  # parts nested thousands deep: the parser recurses per level
        message = email.parser.BytesHeaderParser(policy=email.policy.compat32).parsebytes(data)
        flat = True
    except Exception as exc:  # the parser is lenient; this is a last resort
        raise LoaderError(path, f"not an email message ({exc})") from exc
    if not message.keys():
        raise LoaderError(path, "not an email message: no headers (From:, Subject:, ...)")
    metadata = headers(message, warnings)
    attachments: list[str] = []
    members: list[Member] = []
    if flat:
        warnings.append(f"MIME parts nested deeper than {MAX_DEPTH} levels: the text was "
                        "read without its part structure")
        body = _unparsed(message, warnings)
    else:
        body, attachments, members = _body(message, warnings)
    if attachments:
        metadata["attachments"] = attachments
    subject = metadata.get("subject", "")
    text = (f"{subject}\n\n" if subject else "") + written(body)
    metadata["type"] = "email"
    metadata["title"] = subject or path.stem
    return Document(text.strip() + "\n", metadata, warnings=list(dict.fromkeys(warnings)),
                    members=members)


def headers(message: Message, warnings: list[str]) -> dict[str, Any]:
    """The message's headers as metadata (see the module docstring)."""
    found: dict[str, Any] = {}
    senders = _addresses(message, "From", warnings)
    if senders:
        name, address = senders[0]
        if address:
            found["from"] = address
        if name:
            found["from_name"] = name
    for key in ("To", "Cc"):
        values = [a for _, a in _addresses(message, key, warnings) if a]
        if values:
            found[key.lower()] = values
    subject = " ".join(_header(message, "Subject", warnings).split())
    if subject:
        found["subject"] = subject
    date = _header(message, "Date", warnings)
    if date:
        try:
            found["date"] = parsedate_to_datetime(date).isoformat()
        except (TypeError, ValueError, IndexError, OverflowError):
            warnings.append(f"unreadable Date header {date[:60]!r}")
    own = _ids(_header(message, "Message-ID", warnings))
    replied = _ids(_header(message, "In-Reply-To", warnings))
    references = _ids(_header(message, "References", warnings))
    if own:
        found["message_id"] = own[0]
    if replied:
        found["in_reply_to"] = replied[0]
    thread = (references or replied or own)[:1]
    if thread:
        found["thread"] = thread[0]
    return found


_ADDRESS = re.compile(r"^[^@\s<>()\[\]\\,;:\"]+@[^@\s<>()\[\]\\,;:\"]+$")


def _addresses(message: Message, key: str, warnings: list[str]) -> list[tuple[str, str]]:
    """The (display name, address) pairs of an address header. The header is split into
    addresses first, and only display names are decoded (RFC 2047): an encoded word can
    never become an address (``=?utf-8?b?Y2VvQGNvbXBhbnkuY29t?= <x@evil.example>`` is
    from x@evil.example, shown as "ceo@company.com"). An address that is not one (an
    encoded word, no ``@``) is left out with a warning; addresses are lowercase."""
    raws = message.get_all(key) or []
    pairs = []
    for name, address in getaddresses([_raw(raw) for raw in raws]):
        shown = _decoded(name, f"{key} header", warnings) if name else ""
        address = address.strip().lower()
        if address and not _ADDRESS.match(address):
            warnings.append(f"the {key} header holds no valid address ({address[:60]!r}); "
                            "left out")
            address = ""
        if address or shown:
            pairs.append((" ".join(shown.split()), address))
    return pairs


def _raw(value: Any) -> str:
    """A header's text as sent, encoded words not decoded (raw 8-bit bytes as UTF-8)."""
    if isinstance(value, str):
        return value
    try:
        parts = email.header.decode_header(value)
    except Exception:
        return str(value)
    return "".join(p.decode("utf-8", "replace") if isinstance(p, bytes) else p
                   for p, _ in parts)


def _ids(value: str) -> list[str]:
    return _ID.findall(value)


def _header(message: Message, key: str, warnings: list[str]) -> str:
    """A header decoded (RFC 2047), with what cannot be decoded replaced and a warning."""
    raw = message.get(key)
    if raw is None:
        return ""
    return _decoded(raw, f"{key} header", warnings, unreadable=f"unreadable {key} header")


def _decoded(raw: Any, what: str, warnings: list[str], *, unreadable: str | None = None
             ) -> str:
    """An encoded header value (RFC 2047) as text; a Header object (raw 8-bit bytes)
    keeps its bytes, marked unknown-8bit. One that cannot be split into its encoded
    words is given as it is (with the warning ``unreadable``, if any)."""
    try:
        parts = email.header.decode_header(raw if isinstance(raw, email.header.Header)
                                           else str(raw))
    except Exception:
        if unreadable:
            warnings.append(unreadable)
        return str(raw)
    return "".join(v if isinstance(v, str) else _decode(v, c, what, warnings)
                   for v, c in parts).strip()


def _decode(data: bytes, charset: str | None, what: str, warnings: list[str]) -> str:
    name = (charset or "utf-8").strip().lower()
    if name in ("unknown-8bit", "x-unknown"):
        name = "utf-8"
    try:
        return data.decode(name)
    except UnicodeDecodeError:
        warnings.append(f"{what} is not valid {charset or 'UTF-8'}: unreadable bytes replaced")
    except (LookupError, ValueError):  # an unknown name, "undefined", a NUL in the name
        warnings.append(f"{what} in an unknown charset {str(charset)[:40]!r}: read as UTF-8, "
                        "unreadable bytes replaced")
    return data.decode("utf-8", errors="replace")


def _parts(message: Message) -> Iterator[Message]:
    """The message's leaf parts in order (a walk without recursion); a multipart part at
    MAX_DEPTH is yielded unread."""
    stack: list[tuple[Message, int]] = [(message, 0)]
    while stack:
        part, level = stack.pop()
        payload = part.get_payload() if part.is_multipart() else None
        if isinstance(payload, list) and level < MAX_DEPTH:
            stack.extend((p, level + 1) for p in reversed(payload) if isinstance(p, Message))
        else:
            yield part


def _body(message: Message, warnings: list[str]
          ) -> tuple[str, list[str], list[Member]]:
    """The message's text (its plain parts; its HTML parts when it has no plain one), its
    attachments' file names, and those of a type isotope reads (not a container) as
    members, to be ingested as their own sources."""
    from isotope.loaders import loader_for

    plain: list[str] = []
    html: list[str] = []
    attachments: list[str] = []
    members: list[Member] = []
    too_deep = False
    for part in _parts(message):
        if part.is_multipart():
            too_deep = True
            continue
        try:
            name = part.get_filename()
        except Exception:  # an undecodable name parameter
            name = "(unnamed)"
        disposition = str(part.get("Content-Disposition") or "").split(";")[0].strip().lower()
        if name or disposition == "attachment":
            shown = _decoded_name(name or "(unnamed)", warnings)
            attachments.append(shown)
            reader = loader_for(Path(shown))
            if reader is not None and reader.members is None and reader.name != "email":
                data = part.get_payload(decode=True)
                if isinstance(data, bytes) and data.strip():
                    unique = _member_name(shown) or "attachment"
                    while unique in {m.name for m in members}:
                        unique = "_" + unique
                    members.append(Member(unique, data, reader.name))
            continue
        kind = part.get_content_type()
        if kind not in ("text/plain", "text/html"):
            continue
        try:
            payload = part.get_payload(decode=True)
        except Exception:
            warnings.append("an undecodable body part was left out")
            continue
        if not isinstance(payload, bytes):
            continue
        text = _decode(payload, part.get_content_charset(), "the body", warnings)
        (plain if kind == "text/plain" else html).append(text)
    if too_deep:
        warnings.append(f"MIME parts nested deeper than {MAX_DEPTH} levels were not read")
    if plain:
        return "\n\n".join(plain), attachments, members
    if html:
        from isotope.loaders.html import html_text

        return "\n\n".join(html_text(h) for h in html), attachments, members
    return "", attachments, members


def _unparsed(message: Message, warnings: list[str]) -> str:
    """The text of a message the parser could not take apart: its body without the MIME
    boundary lines and part headers."""
    payload = message.get_payload()
    raw = payload.encode("utf-8", "surrogateescape") if isinstance(payload, str) else b""
    text = _decode(raw, "utf-8", "the body", warnings)
    lines = [line for line in text.splitlines()
             if not re.match(r"^(--\S+|Content-[\w-]+:.*|MIME-Version:.*)$", line.strip(),
                             re.I)]
    return "\n".join(lines)


def _decoded_name(name: str, warnings: list[str]) -> str:
    return " ".join(_decoded(name, "an attachment name", warnings).split())


def written(body: str) -> str:
    """What the sender wrote: the body without quoted lines (``> ...``), the line that
    introduces them ("On ... wrote:", when quoted lines follow it), a forwarded or
    top-posted original ("-----Original Message-----", Outlook's rule then ``From:``)
    with all after it, and the signature (after a ``-- `` line near the end). An
    interleaved reply keeps every answer between the quotes."""
    body = body.replace("\r\n", "\n")
    original = _ORIGINAL.search(body)
    if original:
        body = body[:original.start()]
    lines = body.split("\n")
    for i in range(len(lines) - 1, -1, -1):  # the signature: "-- " within the last lines
        if lines[i].rstrip("\n") in ("-- ", "--") and len(lines) - i <= 12:
            lines = lines[:i]
            break
    kept: list[str] = []
    for i, line in enumerate(lines):
        if line.lstrip().startswith(">"):
            continue
        if _ATTRIBUTION.match(line):
            following = next((n for n in lines[i + 1:] if n.strip()), "")
            if following.lstrip().startswith(">") or not following:
                continue
        kept.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()


def mbox_members(path: Path, max_bytes: int, grouping: str = "message", *,
                 handle: BinaryIO | None = None) -> Iterator[Member]:
    """The messages of an mbox mailbox, in order, streamed: a message starts at a line
    beginning ``From `` at the start of the file or after a blank line (mboxrd's
    ``>From `` lines are unescaped). Each is named by its Message-ID (else its number),
    made unique; one over ``max_bytes`` is yielded empty (the caller reports it).

    ``grouping="thread"``: one member per thread instead (``thread-<first id>``, in the
    order threads start), its messages read back by their offsets in a second pass, so
    memory stays one thread's.

    ``handle``: the mailbox already opened by the caller (who decided from that very
    file who may see its messages): every pass reads through it, never ``path`` again."""
    names: set[str] = set()

    def unique(name: str) -> str:
        base, n = name, 1
        while name in names:
            n += 1
            name = f"{base}-{n}"
        names.add(name)
        return name

    if grouping == "thread":
        yield from _threads(path, max_bytes, unique, handle)
        return
    for number, (_, _, data) in enumerate(_split(path, max_bytes, handle), start=1):
        found = _MESSAGE_ID.search(data[:65536]) if data else None
        name = _member_name(found.group(1).decode("ascii", "replace")) if found else ""
        yield Member(unique(name or f"message-{number}"), data, "email")


def _opened(path: Path, handle: BinaryIO | None) -> contextlib.AbstractContextManager[BinaryIO]:
    """``handle`` from its start (left open: its opener closes it), else ``path`` opened,
    a regular file only (a FIFO named box.mbox would block)."""
    from isotope.files import open_regular

    if handle is None:
        return open_regular(path)
    handle.seek(0)
    return contextlib.nullcontext(handle)


def _split(path: Path, max_bytes: int, opened: BinaryIO | None = None
           ) -> Iterator[tuple[int, int, bytes]]:
    """Each message of a mailbox as (its first byte, its end, its bytes unescaped; empty
    when over ``max_bytes``), read a line (at most 64 KB of one) at a time."""

    def finish(lines: list[bytes], size: int) -> bytes:
        # the blank line before the next "From " belongs to the separator, so appending
        # a message leaves the one before it as it was
        return b"".join(lines).rstrip(b"\r\n") + b"\n" if size <= max_bytes else b""

    with _opened(path, opened) as handle:
        lines: list[bytes] = []
        size, previous_blank, started, line_start, begin = 0, True, False, True, 0
        while piece := handle.readline(65536):  # a line, or 64 KB of one: memory bounded
            at_start, line_start = line_start, piece.endswith(b"\n")
            if at_start and piece.startswith(b"From ") and previous_blank:
                end = handle.tell() - len(piece)
                if started:
                    yield begin, end, finish(lines, size)
                lines, size, started, previous_blank = [], 0, True, False
                while not line_start and (piece := handle.readline(65536)):
                    line_start = piece.endswith(b"\n")  # the rest of the separator line
                begin = handle.tell()
                continue
            if not started:
                if piece.strip():
                    raise LoaderError(path, "not an mbox mailbox: it does not start with a "
                                      "'From ' line")
                continue
            if at_start and (piece.startswith(b">From ") or piece.startswith(b">>From ")):
                piece = piece[1:]
            size += len(piece)
            if size <= max_bytes:
                lines.append(piece)
            elif lines:
                lines = []  # too large: its bytes are not kept
            previous_blank = at_start and line_start and not piece.strip()
        if started:
            yield begin, handle.tell(), finish(lines, size)


_SEPARATOR = b"\nFrom isotope-thread\n"


def _threads(path: Path, max_bytes: int, unique: Any, opened: BinaryIO | None
             ) -> Iterator[Member]:
    """One member per thread: the first pass keeps each message's offsets and thread,
    the second reads each thread's messages back."""
    threads: dict[str, list[tuple[int, int]]] = {}
    for number, (begin, end, data) in enumerate(_split(path, max_bytes, opened), start=1):
        head = email.parser.BytesHeaderParser(policy=email.policy.compat32).parsebytes(
            data[:65536]) if data else None
        thread = headers(head, []).get("thread") if head is not None else None
        threads.setdefault(thread or f"<message-{number}>", []).append((begin, end))
    with _opened(path, opened) as handle:
        for thread, spans in threads.items():
            total = sum(end - begin for begin, end in spans)
            parts: list[bytes] = []
            if total <= max_bytes:
                for begin, end in spans:
                    handle.seek(begin)
                    raw = handle.read(end - begin)
                    parts.append(re.sub(rb"(?m)^>(>*From )", rb"\1", raw).rstrip(b"\r\n"))
            name = unique("thread-" + _member_name(thread.strip("<>")))
            yield Member(name, _SEPARATOR.join(parts) + b"\n" if parts else b"",
                         "email-thread")


def load_thread(path: Path, data: bytes) -> Document:
    """A thread of messages (``mbox_members(grouping="thread")``) as one document: each
    message's written text under its sender and date; metadata: the thread's ``subject``,
    ``from`` (every sender), ``to`` and ``cc`` (every recipient), ``date`` (the first),
    ``date_last``, ``message_ids``, ``thread`` and ``attachments``."""
    warnings: list[str] = []
    parts: list[str] = []
    merged: dict[str, Any] = {"type": "email", "message_ids": []}
    members: list[Member] = []
    for raw in data.split(_SEPARATOR):
        message = email.message_from_bytes(raw, policy=email.policy.compat32)
        found = headers(message, warnings)
        body, attachments, attached = _body(message, warnings)
        members += attached
        who = found.get("from_name") or found.get("from", "")
        parts.append(f"{who}, {found.get('date', '')}:\n{written(body)}".strip())
        for key in ("from", "to", "cc", "attachments"):
            values = found.get(key) if key != "attachments" else attachments
            for value in [values] if isinstance(values, str) else values or []:
                merged.setdefault(key, [])
                if value not in merged[key]:
                    merged[key].append(value)
        if found.get("message_id"):
            merged["message_ids"].append(found["message_id"])
        merged.setdefault("subject", found.get("subject", ""))
        merged.setdefault("thread", found.get("thread", ""))
        if found.get("date"):
            merged.setdefault("date", found["date"])
            merged["date_last"] = found["date"]
    merged["title"] = merged.get("subject") or path.name
    text = (f"{merged['subject']}\n\n" if merged.get("subject") else "") + "\n\n".join(parts)
    return Document(text + "\n", {k: v for k, v in merged.items() if v not in ("", [])},
                    warnings=list(dict.fromkeys(warnings)), members=members)


_MESSAGE_ID = re.compile(rb"^Message-ID:\s*<([^<>\r\n]{1,300})>", re.I | re.M)


def _member_name(message_id: str) -> str:
    """A Message-ID as a source name part: printable, no '#', '/' or spaces."""
    return re.sub(r"[^\w.@+=-]", "_", message_id)[:200]
