"""Credentials never shown: an index location (a database URL) as a user may see it, and
any text (a driver's error message, a log line) with the secrets of a location taken
out. Every place that shows or logs a location or passes on a driver's message goes
through here: ``isotope status``/``config``/``list``, ``GET /status``, error messages,
project files."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, unquote

MASK = "***"
SECRET_PARAMETERS = frozenset({"password", "sslpassword", "passfile_password", "token",
                               "access_token", "api_key", "apikey"})
"""Query parameters of a location that hold a secret (a token or key too: a location of a
kind isotope does not serve is named back in the error that says so)."""
_URL_CREDENTIALS = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s/@:]*):[^\s@/]*@")
_PARAMETER = re.compile(r"(?i)\b(password|sslpassword)\s*=\s*('[^']*'|\"[^\"]*\"|[^\s&;,]+)")


_NESTED = re.compile(r"[?&][^=&?]*=[a-zA-Z][a-zA-Z0-9+.-]*://")
"""A parameter whose value is a URL written as it is (not URL-encoded): a read replica's."""
_NESTED_PASSWORD = re.compile(r"://[^\s/@:?&]*:([^\s@/]*)@")


def mask_location(location: str) -> str:
    """A URL with its password and secret parameters replaced by ``***``; anything else
    as it is."""
    text = str(location)
    if "://" not in text:
        return text
    head, rest = text.split("://", 1)
    nested = _NESTED.search(rest)
    if nested:  # the location up to it, then each URL inside with its password masked
        inner = rest[nested.start():]
        return (mask_location(f"{head}://{rest[:nested.start()]}")
                + _URL_CREDENTIALS.sub(rf"\1:{MASK}@", inner))
    credentials, at, after = rest.rpartition("@")
    if at and ":" in credentials.split("/", 1)[0]:
        # the last @ ends the user information (a password may hold ?, / or @ that
        # libpq takes as written); one in a later parameter only masks more
        user = credentials.split(":", 1)[0]
        rest = after
        address, mark, query = rest.partition("?")
        address = f"{user}:{MASK}@{address}"
    else:
        address, mark, query = rest.partition("?")
    if mark:
        query = "&".join(_masked_parameter(part) for part in query.split("&"))
    return f"{head}://{address}{mark}{query}"


def _masked_parameter(part: str) -> str:
    name, _, value = part.partition("=")
    if unquote(name).lower() in SECRET_PARAMETERS:
        return f"{name}={MASK}"
    if "://" in unquote(value):  # a URL inside (a read replica's): its password too
        return f"{name}={mask_location(unquote(value))}"
    return part


def secrets_of(location: str) -> list[str]:
    """The secret strings inside a location (its password as written and decoded, the
    values of its secret parameters), longest first."""
    text = str(location)
    if "://" not in text:
        return []
    rest = text.split("://", 1)[1]
    found: set[str] = set()
    nested = _NESTED.search(rest)
    if nested:  # each URL inside (a read replica's) has its own password
        for secret in _NESTED_PASSWORD.findall(rest[nested.start():]):
            found.update({secret, unquote(secret)})
        found.update(secrets_of(text[: len(text) - len(rest) + nested.start()]))
        return sorted((s for s in found if s), key=len, reverse=True)
    credentials, at, after = rest.rpartition("@")
    if at and ":" in credentials.split("/", 1)[0]:
        raw = credentials.split(":", 1)[1]
        found.update({raw, unquote(raw)})
        rest = after
    _, _, query = rest.partition("?")
    for part in query.split("&"):
        name, _, value = part.partition("=")
        if unquote(name).lower() in SECRET_PARAMETERS and value:
            found.update({value, unquote(value)})
        elif "://" in unquote(value):  # a URL inside (a read replica's)
            for secret in secrets_of(unquote(value)):
                found.update({secret, quote(secret, safe="")})
    return sorted((s for s in found if s), key=len, reverse=True)


def redact(text: str, *locations: str) -> str:
    """``text`` with the secrets of ``locations`` and any URL password or ``password=``
    value in it replaced by ``***``."""
    for location in locations:
        for secret in secrets_of(location):
            text = text.replace(secret, MASK)
    text = _URL_CREDENTIALS.sub(rf"\1:{MASK}@", text)
    return _PARAMETER.sub(rf"\1={MASK}", text)


def has_secret(location: str) -> bool:
    """Whether a location holds a password (then a file keeping it must be private)."""
    return bool(secrets_of(location)) or bool(
        any(n.lower() in SECRET_PARAMETERS
            for n, _ in parse_qsl(str(location).partition("?")[2])))


__all__ = ["MASK", "has_secret", "mask_location", "redact", "secrets_of"]
