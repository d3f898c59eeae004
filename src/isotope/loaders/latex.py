"""LaTeX ``.tex`` with the ``.bib`` files beside it (the ``latex`` extra: bibtexparser,
which brings pylatexenc, whose tolerant parser reads the source).

- Text with the commands stripped: a command's argument text is kept (``\\emph{x}`` is
  x; an unknown macro too, with a warning naming it); labels, references, packages and
  layout commands are dropped; ``\\item`` is a list item; a table's ``&`` is ``|``.
- Sections (``\\part`` to ``\\subparagraph``) are headings: sections with their heading
  path, as Markdown's. ``\\title`` and ``\\author`` are metadata.
- Math is kept as its LaTeX source (``$...$``, ``\\[...\\]``, ``equation``, ``align``,
  ...), so questions and answers can quote it.
- ``\\input`` and ``\\include`` are followed (relative to the file, as LaTeX does), but
  only to files inside the folder being ingested: anything else (``/etc/passwd``,
  ``../../x``) is left out with a warning.
- ``\\cite{key}`` (and natbib's and biblatex's variants) is resolved against the .bib
  files the document names, else every .bib beside it: the text reads "(Smith and
  Müller 2020, Deep Learning for Cats)", and each chunk's metadata ``cites`` lists the
  works it cites (key, authors, year, title, doi; ``cite_keys`` the keys, for
  ``--where``). An unknown key, a missing or broken .bib, or unbalanced braces: the text
  is kept, with a warning.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from isotope.errors import LoaderError, MissingDependency
from isotope.loaders import (
    READ,
    ROOT,
    SEALED,
    TEXT_BUDGET,
    Document,
    Section,
    heading_sections,
)
from isotope.loaders.text import decode_text

MAX_INPUT_DEPTH = 10
MAX_INPUTS = 200
"""The most ``\\input``/``\\include`` a document may make in all (a file that inputs
another ten times, nested, would otherwise read it billions of times)."""
MAX_EXPANDED = 4_000_000
"""The most LaTeX a document and its inputs may make, in characters (and at most the
``max_text_mb`` budget). pylatexenc parses about 6 s of one core per MB here (a
300-page thesis is about 1.5 MB); a 2 KB file inputting a 320 KB one 200 times made 64
MB and ran for minutes at 4 GB. An input past it is left out with a warning; a document
over it on its own is refused."""
_COMMENT = re.compile(r"(?<!\\)%.*")
_INPUT = re.compile(r"\\(input|include)(?![A-Za-z@])\s*(?:\{([^{}]*)\}|([^\s{}\\%]+))")
_SECTIONS = {"part": 1, "chapter": 1, "section": 2, "subsection": 3, "subsubsection": 4,
             "paragraph": 5, "subparagraph": 6}
_CITES = {"cite", "citep", "citet", "citealp", "citealt", "parencite", "textcite",
          "autocite", "footcite", "citeauthor", "citeyear", "nocite", "Cite", "Citep",
          "Citet", "Parencite", "Textcite", "Autocite", "supercite"}
_DROP = {"label", "ref", "eqref", "pageref", "autoref", "cref", "Cref", "usepackage",
         "documentclass", "includegraphics", "bibliographystyle", "bibliography",
         "addbibresource", "newcommand", "renewcommand", "providecommand", "newenvironment",
         "renewenvironment", "DeclareMathOperator", "setlength", "setcounter", "vspace",
         "hspace", "vskip", "hskip", "maketitle", "tableofcontents", "title", "author",
         "date", "thanks", "centering", "noindent", "newpage", "clearpage", "pagebreak",
         "linebreak", "small", "footnotesize", "large", "Large", "LARGE", "huge", "Huge",
         "normalsize", "bfseries", "itshape", "rmfamily", "ttfamily", "sffamily",
         "appendix", "frontmatter", "mainmatter", "backmatter", "hline", "toprule",
         "midrule", "bottomrule", "cline", "printbibliography", "graphicspath", "input",
         "include", "def", "let", "protect", "index", "hypersetup",
         "smallskip", "medskip", "bigskip", "par", "relax", "today", "and",
         "quad", "qquad", "newline", "indent", "begingroup", "endgroup"}
_TEXT = {"emph", "textbf", "textit", "texttt", "textsc", "textrm", "textsf", "textup",
         "underline", "mbox", "hbox", "text", "url", "caption", "footnote", "textsuperscript",
         "textsubscript", "uline", "enquote", "mathrm", "abstract", "href"}
_SYMBOLS = {"&": "&", "%": "%", "$": "$", "#": "#", "_": "_", "{": "{", "}": "}",
            "\\": "\n", " ": " ", ",": " ", ";": " ", ":": " ", "!": "", "/": "", "-": "",
            "ldots": "...", "dots": "...", "LaTeX": "LaTeX", "TeX": "TeX", "S": "§",
            "textendash": "–", "textemdash": "—", "textasciitilde": "~", "copyright": "©",
            "textbackslash": "\\"}
_MATH_ENVS = {"equation", "equation*", "align", "align*", "gather", "gather*", "multline",
              "multline*", "eqnarray", "eqnarray*", "displaymath", "math", "flalign",
              "flalign*", "alignat", "alignat*"}
_SKIP_ENVS = {"comment", "verbatim*", "thebibliography", "tikzpicture", "filecontents"}


def load_tex(path: Path, data: bytes) -> Document:
    try:
        from pylatexenc.latexwalker import LatexWalker
    except ImportError as exc:
        raise MissingDependency.from_import(exc, ".tex files", "latex") from exc
    warnings: list[str] = []
    sealed = SEALED.get()  # an attachment: no other file is read
    given = ROOT.get() or path.parent
    root = _resolved(given if given.is_dir() else given.parent)
    budget = _Budget()
    own = decode_text(path, data)
    if len(own) > budget.chars:
        raise LoaderError(path, f"{len(own) / 1e6:.1f} MB of LaTeX, over the "
                          f"{budget.chars / 1e6:g} MB a document may make with its inputs; "
                          "split it into files joined by \\input")
    budget.chars -= len(own)
    real = READ.get() or _resolved(path)  # (as the ingest read it: its list's file)
    source = _COMMENT.sub("", own) if sealed or root is None or real is None else \
        _expand(own, path, real, root, warnings, 0, {real}, budget)
    if sealed and _INPUT.search(source):
        warnings.append("an attachment's \\input and \\include are not followed")
        source = _INPUT.sub("", source)
    depth = _balance(source)
    if depth:
        warnings.append(f"unbalanced braces ({abs(depth)} {'{' if depth > 0 else '}'} "
                        "unmatched): the text is read as far as it can be")
    works = ({} if sealed or root is None or real is None
             else _bibliography(path, real, root, source, warnings))
    try:
        nodes, _, _ = LatexWalker(_breakable(source), latex_context=_context(),
                                  tolerant_parsing=True).get_latex_nodes()
    except Exception as exc:  # the tolerant parser still gives up on some input
        raise LoaderError(path, f"cannot parse the LaTeX ({type(exc).__name__}: {exc})"
                          ) from exc
    writer = _Writer(works)
    body = next((n for n in nodes if _env(n) == "document"), None)
    writer.walk(body.nodelist if body is not None else nodes)
    text, moved = _squeeze(writer.text())
    writer.headings = [(moved(at), level, title) for at, level, title in writer.headings]
    writer.cites = [(moved(a), moved(b), works_) for a, b, works_ in writer.cites]
    if writer.unknown:
        names = ", ".join(f"\\{n}" for n in sorted(writer.unknown)[:10])
        warnings.append(f"unknown macros kept as the text of their arguments: {names}")
    if writer.missing:
        warnings.append("citations not found in the .bib files: "
                        + ", ".join(sorted(writer.missing)[:10]))
    metadata: dict[str, Any] = {"type": "latex", "title": path.stem}
    meta = _Writer({})
    for node in nodes:
        if _macro(node) in ("title", "author") and node.nodeargd and node.nodeargd.argnlist:
            meta.parts.clear()
            meta.walk([node.nodeargd.argnlist[-1]])
            value = " ".join(meta.text().split())
            if value:
                metadata[_macro(node) or ""] = value
    sections = heading_sections(writer.headings, len(text))
    sections += [Section(start, end, {"cites": cited}) for start, end, cited in writer.cites]
    return Document(text, metadata, sections, warnings=warnings)


_PLAIN_RUN = re.compile(r"[^\\{}$%]{2000,}")


def _breakable(source: str, every: int = 1000) -> str:
    """``source`` with an empty group ``{}`` (which writes nothing) after a space every
    ``every`` characters of a long run of plain text: pylatexenc gathers a run of plain
    characters by adding to a string one character at a time, which costs the square of
    the run's length (a 3.9 MB document of plain prose: 150 s; broken up: seconds)."""

    def broken(match: re.Match[str]) -> str:
        run, out, last = match.group(0), [], 0
        while len(run) - last > every:
            space = run.find(" ", last + every)
            if space < 0:
                break
            out.append(run[last:space + 1] + "{}")
            last = space + 1
        out.append(run[last:])
        return "".join(out)

    return _PLAIN_RUN.sub(broken, source)


class _Budget:
    """What the inputs of one document may still read."""

    def __init__(self) -> None:
        self.inputs = MAX_INPUTS
        self.chars = min(MAX_EXPANDED, TEXT_BUDGET.get())


def _resolved(path: Path) -> Path | None:
    """``path`` with its links resolved (None: a link loop, or unreadable)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return None


def same_list(real: Path, other: Path, root: Path) -> bool:
    """Whether the rules file of ``root`` (resolved) gives ``other`` (the real path of a
    file read in, as it was read) the list it gives ``real`` (the reading file's, as it
    was read): a public file never takes in an HR file's text. Neither path is resolved
    again: a link pointed elsewhere since would decide for another file."""
    from isotope.access import rules_for

    rules = rules_for(root)
    if rules is None:
        return True

    def listed(file: Path) -> list[str] | None:
        try:
            return rules.match(file.relative_to(root).as_posix())
        except ValueError:
            return []

    return listed(real) == listed(other)


def _read_in(target: Path, real: Path, root: Path, said: str, warnings: list[str]
             ) -> tuple[Path, bytes] | None:
    """A file the document whose real path is ``real`` reads in (``\\input``, a .bib):
    read first, then judged by the real path of the very file read (inside ``root``, the
    same list, one name only: a hard link's other name may have another list); None,
    with a warning, when it is left out."""
    from isotope.files import read_opened

    first = _resolved(target)  # (nothing outside the folder is even opened)
    if first is None or not first.is_relative_to(root):
        warnings.append(f"{said} is outside the folder being ingested: left out")
        return None
    try:
        stat, data, got = read_opened(target, MAX_EXPANDED)  # a regular file, never a FIFO
    except (OSError, LoaderError) as exc:
        reason = exc.reason if isinstance(exc, LoaderError) else str(exc)
        warnings.append(f"{said}: cannot read it ({reason}): left out")
        return None
    if not got.is_relative_to(root):
        warnings.append(f"{said} is outside the folder being ingested: left out")
        return None
    if not same_list(real, got, root) or stat.st_nlink > 1:
        warnings.append(f"{said} has another access list than this file (the folder's "
                        ".isotope-access), or is a hard link (another name of it may): "
                        "left out")
        return None
    return got, data


def _expand(text: str, path: Path, real: Path, root: Path, warnings: list[str],
            depth: int, seen: set[Path | None], budget: _Budget) -> str:
    """``text`` (of ``path``, whose real path as read is ``real``) without comments, with
    its ``\\input``/``\\include`` files in place (only regular files inside ``root`` of
    its list, within the budget)."""
    text = _COMMENT.sub("", text)

    def replace(match: re.Match[str]) -> str:
        name = (match.group(2) or match.group(3) or "").strip()
        said = f"\\{match.group(1)}{{{name}}}"
        target = (path.parent / name)
        if not target.suffix:
            target = target.with_suffix(".tex")
        if depth >= MAX_INPUT_DEPTH or budget.inputs <= 0:
            warnings.append(f"{said} includes itself, nests deeper than {MAX_INPUT_DEPTH} or "
                            f"is past the {MAX_INPUTS} inputs a document may make: left out")
            return ""
        budget.inputs -= 1
        found = _read_in(target, real, root, said, warnings)
        if found is None:
            return ""
        resolved, data = found
        if resolved in seen:
            warnings.append(f"{said} includes itself, nests deeper than {MAX_INPUT_DEPTH} or "
                            f"is past the {MAX_INPUTS} inputs a document may make: left out")
            return ""
        try:
            included = decode_text(target, data)
        except LoaderError as exc:
            warnings.append(f"{said}: cannot read it ({exc.reason}): left out")
            return ""
        if len(included) > budget.chars:
            warnings.append(f"{said}: past the {min(MAX_EXPANDED, TEXT_BUDGET.get()) / 1e6:g} "
                            "MB of LaTeX a document may make with its inputs: left out "
                            "(and any after it that does not fit)")
            return ""
        budget.chars -= len(included)
        return "\n" + _expand(included, resolved, resolved, root, warnings, depth + 1,
                              seen | {resolved}, budget) + "\n"

    return _INPUT.sub(replace, text)


def _squeeze(text: str) -> tuple[str, Any]:
    """``text`` without spaces before a line break and with at most one blank line in a
    row, and the function that moves an offset of ``text`` to the same place in it."""
    cuts = [(m.start(), m.end()) for m in re.finditer(r"[ \t]+(?=\n)|(?<=\n\n)\n+", text)]
    kept = "".join(text[a:b] for a, b in zip([0] + [e for _, e in cuts],
                                             [s for s, _ in cuts] + [len(text)], strict=True))
    starts = [a for a, _ in cuts]
    removed = [0]
    for a, b in cuts:
        removed.append(removed[-1] + b - a)

    def moved(offset: int) -> int:
        import bisect

        i = bisect.bisect_right(starts, offset)  # cuts starting at or before the offset
        if i and offset < cuts[i - 1][1]:  # inside a cut: where it was cut
            return cuts[i - 1][0] - removed[i - 1]
        return offset - removed[i]

    return kept, moved


def _context() -> Any:
    """pylatexenc's macros, with the citation commands it does not know (biblatex's)
    taking their arguments."""
    from pylatexenc.latexwalker import get_default_latex_context_db
    from pylatexenc.macrospec import MacroSpec

    db = get_default_latex_context_db()
    db.add_context_category("isotope-citations", prepend=True,
                            macros=[MacroSpec(name, "*[[{") for name in _CITES])
    return db


def _balance(text: str) -> int:
    """Unmatched ``{`` (positive) or ``}`` (negative), escaped braces aside."""
    depth = low = 0
    for match in re.finditer(r"(?<!\\)[{}]", text):
        depth += 1 if match.group() == "{" else -1
        low = min(low, depth)
    return low if low < 0 else depth


def _bibliography(path: Path, real: Path, root: Path, source: str, warnings: list[str]
                  ) -> dict[str, dict[str, Any]]:
    """The works of the .bib files the document names (else all beside it), by key: only
    regular files inside ``root`` of its list (``real``: its real path as read)."""
    named = [n.strip() for group in re.findall(
        r"\\(?:bibliography|addbibresource)\s*(?:\[[^\]]*\])?\{([^{}]*)\}", source)
        for n in group.split(",") if n.strip()]
    files = [path.parent / (n if n.endswith(".bib") else n + ".bib") for n in named]
    if not files:
        files = sorted(path.parent.glob("*.bib"))
    if not re.search(r"\\[A-Za-z]*cite[a-z]*\*?\s*[\[{]", source, re.I):
        return {}
    if not files:
        warnings.append("cites works but no .bib file is beside it: citations kept as keys")
        return {}
    try:
        from bibtexparser.entrypoint import parse_string
        from bibtexparser.middlewares import LatexDecodingMiddleware
    except ImportError as exc:
        raise MissingDependency.from_import(exc, ".tex citations", "latex") from exc
    logging.getLogger("bibtexparser").setLevel(logging.CRITICAL)
    works: dict[str, dict[str, Any]] = {}

    for bib in files:
        found = _read_in(bib, real, root, bib.name, warnings)
        if found is None:
            continue
        text = found[1].decode("utf-8", errors="replace")
        try:
            library = parse_string(text, append_middleware=[LatexDecodingMiddleware()])
        except Exception as exc:
            warnings.append(f"{bib.name}: cannot parse it ({type(exc).__name__})")
            continue
        if library.failed_blocks:
            warnings.append(f"{bib.name}: {len(library.failed_blocks)} entr(ies) could not "
                            "be parsed and were left out")
        for entry in library.entries:
            fields = {k.lower(): str(f.value) for k, f in entry.fields_dict.items()}
            authors = [" ".join(a.split()) for a in re.split(r"\s+and\s+",
                                                              _plain(fields.get("author", "")))
                       if a.strip()]
            work: dict[str, Any] = {"key": entry.key, "authors": authors,
                                    "year": _plain(fields.get("year", "")),
                                    "title": _plain(fields.get("title", ""))}
            if fields.get("doi"):
                work["doi"] = fields["doi"].strip()
            works[entry.key] = work
    return works


def _plain(value: str) -> str:
    return " ".join(value.replace("{", "").replace("}", "").split())


def _surname(author: str) -> str:
    return author.split(",")[0].strip() if "," in author else author.split()[-1]


def readable(work: dict[str, Any]) -> str:
    """A citation as it reads in the text: (Smith and Müller 2020, Title)."""
    names = [_surname(a) for a in work["authors"] if a]
    who = (names[0] if len(names) == 1 else f"{names[0]} and {names[1]}" if len(names) == 2
           else f"{names[0]} et al." if names else "")
    head = " ".join(p for p in (who, work["year"]) if p)
    return ", ".join(p for p in (head, work["title"]) if p)


def _macro(node: Any) -> str | None:
    return getattr(node, "macroname", None)


def _env(node: Any) -> str | None:
    return getattr(node, "environmentname", None)


class _Writer:
    """Walks pylatexenc's nodes and writes the text, noting headings and citations."""

    def __init__(self, works: dict[str, dict[str, Any]]) -> None:
        self.works = works
        self.parts: list[str] = []
        self.length = 0
        self.headings: list[tuple[int, int, str]] = []
        self.cites: list[tuple[int, int, list[dict[str, Any]]]] = []
        self.unknown: set[str] = set()
        self.missing: set[str] = set()

    def text(self) -> str:
        return "".join(self.parts)

    def write(self, text: str) -> None:
        self.parts.append(text)
        self.length += len(text)

    def walk(self, nodes: Any) -> None:
        swallow = False
        for node in nodes or []:
            kind = type(node).__name__
            if swallow and (kind == "LatexGroupNode" or (kind == "LatexCharsNode" and
                            re.fullmatch(r"\s*\[[^\]]*\]\s*", node.chars))):
                continue  # the arguments of a dropped command the parser did not know
            swallow = (kind == "LatexMacroNode" and node.macroname in _DROP
                       and not self._args(node))
            self.node(node)

    def node(self, node: Any) -> None:
        kind = type(node).__name__
        if node is None or kind == "LatexCommentNode":
            return
        if kind == "LatexCharsNode":
            self.write(node.chars.replace("~", " ").replace("``", "\"").replace("''", "\"")
                       .replace("---", "—").replace("--", "–"))
        elif kind == "LatexMathNode":
            self.write(node.latex_verbatim())
        elif kind == "LatexGroupNode":
            self.walk(node.nodelist)
        elif kind == "LatexSpecialsNode":
            chars = node.specials_chars
            self.write(" | " if chars == "&" else " " if chars == "~" else
                       "\"" if chars in ("``", "''") else "–" if chars == "--" else
                       "—" if chars == "---" else chars)
        elif kind == "LatexEnvironmentNode":
            name = node.environmentname
            if name in _MATH_ENVS:
                self.write("\n" + node.latex_verbatim() + "\n")
            elif name not in _SKIP_ENVS:
                self.write("\n\n" if name != "abstract" else "\n\nAbstract\n\n")
                self.walk(node.nodelist)
                self.write("\n\n")
        elif kind == "LatexMacroNode":
            self.macro(node)

    def _args(self, node: Any) -> list[Any]:
        return [a for a in (node.nodeargd.argnlist if node.nodeargd else []) if a is not None]

    def macro(self, node: Any) -> None:
        name = node.macroname
        args = self._args(node)
        if name in _SECTIONS:
            start = self.length + 2
            self.write("\n\n")
            before = len(self.parts)
            self.walk([args[-1]] if args else [])
            title = " ".join("".join(self.parts[before:]).split())
            del self.parts[before:]
            self.length = start
            self.write(title + "\n\n")
            if title:
                self.headings.append((start, _SECTIONS[name], title))
        elif name in _CITES:
            self.cite(args)
        elif name in _SYMBOLS:
            self.write(_SYMBOLS[name])
        elif name == "item":
            self.write("\n- ")
        elif name in _DROP:
            return
        elif name == "href" and len(args) == 2:
            self.walk([args[1]])
        elif name == "footnote":
            self.write(" (")
            self.walk(args[-1:])
            self.write(")")
        else:
            if name not in _TEXT and not args:
                self.unknown.add(name)
            self.walk(args[-1:] if name in _TEXT else [a for a in args
                                                          if type(a).__name__ ==
                                                          "LatexGroupNode"])

    def cite(self, args: list[Any]) -> None:
        braced = [a for a in args if type(a).__name__ == "LatexGroupNode"]
        if not braced:
            return
        keys = [k.strip() for k in braced[-1].latex_verbatim().strip("{}").split(",")
                if k.strip()]
        found = [self.works[k] for k in keys if k in self.works]
        self.missing.update(k for k in keys if k not in self.works)
        start = self.length
        shown = [readable(w) for w in found] + [k for k in keys if k not in self.works]
        self.write("(" + "; ".join(shown) + ")")
        if found:
            self.cites.append((start, self.length, found))
