"""The reference pages, made from the code at build time (never written by hand): the
command line from the Typer app, the settings from the settings model, the HTTP API from
the server's OpenAPI schema. ``docs/hooks.py`` puts them into the pages that ask for them
(``<!-- reference:cli -->`` and so on); the tests call :func:`undescribed` so that a
command, option, setting or route without a description fails the suite."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MARKERS = ("cli", "settings", "http")


# -- the command line ------------------------------------------------------------------
def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...],
                                                                         Any]]:
    """Every command of the app (groups too), by its words after ``isotope``."""
    if path:
        yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        if not getattr(sub, "hidden", False):
            yield from _commands(sub, (*path, name))


def _root() -> Any:
    import typer

    from isotope.cli import app

    return typer.main.get_command(app)


def _cell(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def _default(param: Any) -> str:
    default = getattr(param, "default", None)
    if getattr(param, "is_flag", False) or default in (None, (), [], False) or callable(
            default):
        return ""
    return f"`{default}`"


def cli_markdown() -> str:
    """Each command, its help, its arguments and options, as Markdown."""
    root = _root()
    lines = ["## isotope", "", "Options before any command:", "",
             "| option | what it does |", "|---|---|"]
    lines += [f"| {', '.join(f'`{o}`' for o in [*p.opts, *p.secondary_opts])} | "
              f"{_cell(getattr(p, 'help', ''))} |" for p in root.params]
    lines.append("")
    for path, command in _commands(root):
        lines += [f"## isotope {' '.join(path)}", ""]
        if command.help:
            lines += [command.help.strip().split("\f")[0].strip(), ""]
        if hasattr(command, "commands"):
            subs = ", ".join(f"`isotope {' '.join(path)} {name}`"
                             for name in sorted(command.commands))
            lines += [f"Commands: {subs}.", ""]
            continue
        params = [p for p in command.params if getattr(p, "name", "") != "help"]
        if params:
            lines += ["| argument or option | default | what it does |", "|---|---|---|"]
            for p in params:
                if p.param_type_name == "argument":
                    name = f"`{p.name.upper()}`"
                else:
                    name = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
                lines.append(f"| {name} | {_default(p)} | {_cell(getattr(p, 'help', ''))} |")
            lines.append("")
    return "\n".join(lines)


# -- settings --------------------------------------------------------------------------
def _choices(annotation: Any) -> list[Any]:
    """The values a ``Literal`` (or ``Literal | None``, or an alias of one) allows."""
    from typing import Literal, get_args, get_origin

    if hasattr(annotation, "__value__"):  # (a type alias)
        annotation = annotation.__value__
    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    return [c for arg in get_args(annotation) if arg is not type(None)
            for c in _choices(arg)]


def _bounds(field: Any) -> str:
    said = []
    for meta in field.metadata:
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            value = getattr(meta, attr, None)
            if value is not None:
                said.append(f"{sign} {value}")
        if getattr(meta, "pattern", None):
            said.append(f"matches `{meta.pattern}`")
    choices = _choices(field.annotation)
    if choices:
        said.append("one of " + ", ".join(f"`{c}`" for c in choices))
    return ", ".join(said)


def _setting_default(name: str, field: Any) -> str:
    """The default as a user reads it: a folder's value is the path on this machine's
    layout (the builder's home replaced by ``~``); a secret or an unset value shows
    nothing."""
    from pydantic import SecretStr
    from pydantic_core import PydanticUndefined

    value = field.default_factory() if field.default_factory is not None else field.default
    if value is PydanticUndefined or value is None or isinstance(value, SecretStr):
        return ""
    if isinstance(value, Path):
        return f"`{str(value).replace(str(Path.home()), '~')}`"
    if isinstance(value, list | dict | tuple):
        return f"`{json.dumps(value)}`" if value else ""
    return f"`{value}`"


def settings_markdown() -> str:
    """Every setting: its name, environment variable, default, bounds, description."""
    from isotope.settings import Settings

    prefix = Settings.model_config.get("env_prefix", "")
    lines = ["| setting | environment variable | default | bounds | what it does |",
             "|---|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        lines.append(f"| `{name}` | `{prefix}{name.upper()}` | {_setting_default(name, field)} | "
                     f"{_cell(_bounds(field))} | {_cell(field.description)} |")
    return "\n".join(lines) + "\n"


# -- the HTTP API ----------------------------------------------------------------------
def openapi() -> dict[str, Any]:
    """The server's OpenAPI schema (an app over an empty index in a temporary folder)."""
    from isotope import Isotope
    from isotope.server.app import create_app
    from isotope.server.auth import Keys

    with tempfile.TemporaryDirectory() as folder, Isotope.open(
            Path(folder) / "index", cache=False) as iso:
        app = create_app(iso, keys=Keys(), roots=[], max_bytes=1_000_000,
                         uploads=Path(folder) / "uploads", mcp=False)
        return app.openapi()


def http_markdown(schema: dict[str, Any] | None = None) -> str:
    """Each route: its method and path, description, parameters and request body."""
    schema = schema or openapi()
    lines = [_cell(schema.get("info", {}).get("description")), ""]
    for path, methods in schema.get("paths", {}).items():
        for method, op in methods.items():
            lines += [f"## {method.upper()} {path}", ""]
            said = op.get("description") or op.get("summary") or ""
            lines += [said.strip(), ""]
            params = op.get("parameters", [])
            if params:
                lines += ["| parameter | in | required | what it is |", "|---|---|---|---|"]
                for p in params:
                    lines.append(f"| `{p['name']}` | {p['in']} | "
                                 f"{'yes' if p.get('required') else 'no'} | "
                                 f"{_cell(p.get('description'))} |")
                lines.append("")
            body = op.get("requestBody", {}).get("content", {})
            for kind, content in body.items():
                ref = content.get("schema", {}).get("$ref", "")
                model = ref.rsplit("/", 1)[-1]
                fields = schema.get("components", {}).get("schemas", {}).get(model, {})
                if fields.get("properties"):
                    lines += [f"Body ({kind}):", "", "| field | what it is |", "|---|---|"]
                    lines += [f"| `{name}` | {_cell(spec.get('description'))} |"
                              for name, spec in fields["properties"].items()]
                    lines.append("")
    return "\n".join(lines)


# -- what has no description -----------------------------------------------------------
def undescribed(schema: dict[str, Any] | None = None) -> list[str]:
    """Every command, option, argument, setting and route that has no description."""
    from isotope.settings import Settings

    missing = []
    for path, command in _commands(_root()):
        shown = f"isotope {' '.join(path)}"
        if not (command.help or "").strip():
            missing.append(shown)
        missing += [f"{shown} {getattr(p, 'name', '?')}" for p in command.params
                    if not (getattr(p, "help", None) or "").strip()]
    missing += [f"setting {name}" for name, field in Settings.model_fields.items()
                if not (field.description or "").strip()]
    root = _root()
    missing += [f"isotope {getattr(p, 'name', '?')}" for p in root.params
                if not (getattr(p, "help", None) or "").strip()]
    schema = schema or openapi()
    for path, methods in schema.get("paths", {}).items():
        for method, op in methods.items():  # (FastAPI's summary is the function's name)
            route = f"{method.upper()} {path}"
            if not (op.get("description") or "").strip():
                missing.append(route)
            missing += [f"{route} {p['name']}" for p in op.get("parameters", [])
                        if not (p.get("description") or "").strip()]
    return missing


def generated(marker: str) -> str:
    """The Markdown for ``<!-- reference:MARKER -->``."""
    return {"cli": cli_markdown, "settings": settings_markdown,
            "http": http_markdown}[marker]()
