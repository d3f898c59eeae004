"""Every prompt isotope sends to a language model, in one place: a name, a version and the
text. The index fingerprint and ``isotope status`` are read from here, so no prompt can
change without the index knowing; bump a prompt's version whenever its text changes.

Each prompt is a system message and a user template (``string.Template``: ``$chunk``),
plus, for the atomizer, one worked example. The ``prompts_dir`` setting overrides any
prompt with a file ``NAME.txt`` in that folder: the system text, a line ``---``, then the
user template (and, optionally, ``---``, an example's user text, ``---``, its reply). An
override may use only the fields of the prompt it replaces. Its text enters the index
fingerprint (only the work of that prompt is redone; the model cache is keyed on the whole
prompt, so nothing else is paid again).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path
from string import Template

from isotope.errors import SettingsError
from isotope.providers import Prompt

SEPARATOR = "---"


@dataclass(frozen=True)
class PromptSpec:
    name: str
    version: str
    system: str
    user: str
    """A ``string.Template`` (``$field``)."""
    example: tuple[str, str] | None = None
    """One worked example: the user's text and the reply, shown before the real request."""
    source: Path | None = None
    """The file that overrides this prompt (``prompts_dir``), or None."""

    @property
    def fields(self) -> set[str]:
        return set(Template(self.user).get_identifiers())

    def text(self, **fields: object) -> str:
        """The user message with ``fields`` filled in."""
        return Template(self.user).substitute({k: str(v) for k, v in fields.items()})

    def render(self, **fields: object) -> Prompt:
        """The messages: system, the worked example if any, then the user message."""
        prompt: Prompt = [{"role": "system", "content": self.system}]
        if self.example:
            prompt += [{"role": "user", "content": self.example[0]},
                       {"role": "assistant", "content": self.example[1]}]
        return [*prompt, {"role": "user", "content": self.text(**fields)}]

    @property
    def digest(self) -> str:
        """What the fingerprint records of an overridden prompt: a hash of its text."""
        blob = "\x1f".join([self.system, self.user, *(self.example or ())])
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


_NO_PRONOUNS = ("Every question must make sense on its own: name people, places and things "
                "explicitly; never use pronouns such as he, she, it, they or this.")
_NUMBERED = ("You write search questions for a document index. You get a passage whose "
             "statements are numbered like [1], and the number of one statement. Write "
             "questions that this statement answers. " + _NO_PRONOUNS + " Write one question "
             "per line, with no numbering and no answers.")
"""The numbered question prompt's system text, which the graph prompt shares (batched
decoding then evaluates a chunk once for its questions and its facts)."""

DEFAULTS: tuple[PromptSpec, ...] = (
    PromptSpec(
        "questions", "q1",
        "You write search questions for a document index. Given a passage and one statement "
        "from it, write questions that the statement answers. " + _NO_PRONOUNS + " Write one "
        "question per line, with no numbering and no answers.",
        "Passage:\n$chunk\n\nStatement: $atom\n\nWrite $n different questions answered by the "
        "statement."),
    PromptSpec(
        "questions-chunk", "qc1",
        "You write search questions for a document index. You get a passage and its "
        "statements, numbered. For every statement, write questions that the statement "
        "answers. Every question must make sense on its own: name people, places and things "
        "explicitly; never use pronouns such as he, she, it, they or this. Reply with a JSON "
        "object that maps each statement number to a list of questions.",
        "Passage:\n$chunk\n\nStatements:\n$statements\n\nWrite $n questions for each of the "
        "$count statements."),
    PromptSpec(
        "questions-numbered", "qn1", _NUMBERED,
        "Passage:\n$passage\n\nWrite $n different questions answered by statement [$number]."),
    PromptSpec(
        "graph", "g1", _NUMBERED,
        "Passage:\n$passage\n\nNew task: no questions. List the names in the passage and "
        "how they relate. Reply with exactly two lines in this format:\nEntities: NAME "
        "(TYPE); NAME (TYPE, also OTHER NAME)\nRelations: SUBJECT | PREDICATE | OBJECT; "
        "SUBJECT | PREDICATE | OBJECT\nFor example:\nEntities: Marie Curie (person, also "
        "Curie); Warsaw (place); Nobel Prize (award)\nRelations: Marie Curie | born in | "
        "Warsaw; Marie Curie | won | Nobel Prize"),
    PromptSpec(
        "questions-repair", "r1", "",
        "Your reply was not in the requested format. Reply again with only the questions, one "
        "per line, each a complete question ending with a question mark."),
    PromptSpec(
        "atomizer", "a2",
        "Rewrite the passage as a list of atomic facts. One fact per line. Each fact is a "
        "short, complete sentence that can be understood alone: replace every pronoun (he, "
        "she, it, they, his, her, its, their, this) with the name of the person or thing it "
        "refers to. Keep names and numbers exactly as written. Write nothing else.",
        "Passage:\n$chunk",
        example=("Passage:\nThe Acme X1 is a drone. It weighs 900 grams and its battery lasts "
                 "30 minutes.",
                 "The Acme X1 is a drone.\nThe Acme X1 weighs 900 grams.\n"
                 "The battery of the Acme X1 lasts 30 minutes.")),
    PromptSpec(
        "context", "context-1",
        "You help a search engine by situating passages within their documents.",
        "<document>\n$title$document\n</document>\nHere is the chunk we want to situate within "
        "the whole document:\n<chunk>\n$chunk\n</chunk>\nGive a short succinct context (one or "
        "two sentences) to situate this chunk within the overall document for the purposes of "
        "improving search retrieval of the chunk: what the document is about and what this "
        "part of it covers. Answer only with the succinct context and nothing else."),
    PromptSpec(
        "answer", "ans4",
        "Answer the question from the numbered notes, in one short sentence, and cite the "
        "note you used like [1]. If the notes do not say, reply: not found.",
        "Notes:\n$passages\n\nQuestion: $query"),
    PromptSpec(
        "check", "chk1",
        "You check answers against a passage. Reply with one word: yes or no.",
        "Passage: $passage\n\nQuestion: $query\n\nProposed answer: $answer\n\nDoes the "
        "passage say that the proposed answer is the right answer to the question? yes or no?"),
    PromptSpec(
        "transform", "t1",
        "Rewrite the user's search query as one to three short, complete questions that a "
        "document could answer. Keep every name and number. Write one question per line and "
        "nothing else.",
        "$query"),
)
PROMPTS: dict[str, PromptSpec] = {p.name: p for p in DEFAULTS}
"""The built-in prompts by name."""

CONTENT = ("questions", "questions-chunk", "questions-numbered")
"""Prompts whose output is stored in every index (the question prompts); the atomizer's
and the context's count when those features are on."""
GRAPH = ("graph",)
"""The prompt of a chunk's entities and relations (setting ``graph``): in the fingerprint
only when it is on."""


def load(prompts_dir: Path | None) -> dict[str, PromptSpec]:
    """The prompts in effect: the built-in ones, each overridden by ``NAME.txt`` in
    ``prompts_dir`` when there is one. A file that names no prompt, or uses a field its
    prompt does not have, is a :class:`SettingsError` naming it."""
    found = dict(PROMPTS)
    if prompts_dir is None:
        return found
    folder = Path(prompts_dir).expanduser()
    if not folder.is_dir():
        raise SettingsError(f"prompts_dir {folder} is not a folder; create it, or unset "
                            "ISOTOPE_PROMPTS_DIR")
    for path in sorted(folder.glob("*.txt")):
        name = path.stem
        if name not in PROMPTS:
            raise SettingsError(f"{path}: no prompt is named {name!r}; name the file after "
                                f"one of: {', '.join(PROMPTS)}")
        found[name] = _override(PROMPTS[name], path)
    return found


def _override(default: PromptSpec, path: Path) -> PromptSpec:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{path}: cannot read it as UTF-8 text ({exc})") from None
    parts = [p.strip("\n") for p in _split(text)]
    if len(parts) not in (2, 4):
        raise SettingsError(
            f"{path}: write the system text, a line {SEPARATOR}, then the user text (and "
            f"optionally {SEPARATOR}, an example's user text, {SEPARATOR}, its reply)")
    spec = replace(default, system=parts[0], user=parts[1], source=path,
                   example=(parts[2], parts[3]) if len(parts) == 4 else default.example)
    if not Template(spec.user).is_valid():  # a lone $, or ${ without a name
        raise SettingsError(f"{path}: a $ that starts no field; write $$ for a dollar sign")
    unknown = spec.fields - default.fields
    if unknown:
        raise SettingsError(
            f"{path}: unknown field(s) {', '.join('$' + f for f in sorted(unknown))}; the "
            f"{default.name} prompt has {', '.join('$' + f for f in sorted(default.fields))}")
    return spec


def _split(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    for line in text.splitlines(keepends=True):
        if line.strip() == SEPARATOR:
            parts.append("".join(current))
            current = []
        else:
            current.append(line)
    return [*parts, "".join(current)]


def fingerprint(prompts: dict[str, PromptSpec], names: tuple[str, ...]) -> list[str]:
    """What an index's fingerprint records of the prompts ``names``: each version, and
    for an overridden prompt a hash of its text."""
    return [prompts[n].version + (f"+{prompts[n].digest}" if prompts[n].source else "")
            for n in names]


def versions(prompts: dict[str, PromptSpec]) -> dict[str, str]:
    """Every prompt's version, for ``status``; an overridden one also names its file."""
    return {n: p.version + (f" (overridden by {p.source})" if p.source else "")
            for n, p in prompts.items()}
