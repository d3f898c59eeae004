"""Answers that use what retrieval found, and say how they were made.

The answer model gets the passages found, numbered, each led by the statement of it that
matched the question best (the atom of its best matched question) with the rest of the
passage after it (:func:`passage_note`), and is asked for one short sentence citing the
passage it used. Small models answer well and cite badly: a right
answer without ``[n]``, or citing the wrong number ("Most of Warsaw's modern growth is
based on internal migration and urbanisation. [3]" when [1] says it). So a reply is
judged by what the passages support, not by its marks (:func:`judge`):

- its first sentence that says something (not "This is found in passage [1].") is the
  answer; a passage **supports** it when the answer's words that are not the question's,
  and every number and name in it (the question's too: "Express delivery to Japan takes
  3 days" is not supported by a passage about Austria), are in the passage
  (:func:`support`);
- how much of the question the passage says **where it says the answer**
  (:func:`evidence`: the question's own words in the sentences around it) tells an
  answer from a small model's usual invention, put together from another part of a
  passage on the right topic ("The Denver Broncos won Super Bowl LI"): it weighs in the
  answer's confidence;
- on an index with a knowledge graph, an answer no passage backs alone may be backed by
  **two joined by a name** (:func:`joined`): a two-hop question's answer is in a passage
  that shares no word with it ("In which city was the architect of the opera house
  born?"), so one passage says what was asked, the other the answer;
- such an answer gets its own **confidence** (:mod:`isotope.search.answer_check`): the
  answer model is asked whether the sentences of the passage that hold the answer say
  that it answers the question, and the probability of its "yes", with what the words
  said, makes ``answer_confidence``;
- ``generated``: the answer, citing the passages that support it (its own marks when
  they are among them, else the best one; both passages of a two-hop answer), when its
  confidence reaches the ``answer_strictness`` level's bar;
- ``quoted``: otherwise, the sentence of that passage that says most of the answer's
  words, as the passage writes it ("The index says: ... [n]"), when the confidence still
  reaches the level's quoting bar (the passage's words, never an invention; a search sure
  of its first result is no reason to quote it: the questions no passage answers are as
  often "sure" as the others);
- ``declined``: otherwise, :data:`NOT_FOUND`.

Measured on SQuAD (benchmarks/history/2026-11.md, "Answers"): the check this replaced declined
77% of answerable questions (the model had answered 74% of them rightly).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from functools import lru_cache, reduce
from operator import or_
from typing import TypeVar

from isotope.ingest.questions import content_words
from isotope.ingest.sentences import sentences
from isotope.models import AnswerKind, SearchResult
from isotope.prompts import PROMPTS, PromptSpec
from isotope.providers import Prompt
from isotope.search.answer_check import (
    LEVELS,
    WINDOW_CHARS,
    Check,
    Signals,
    check_prompt,
    confidence,
)
from isotope.settings import AnswerStrictness
from isotope.stores.keywords import TOKENIZER

T = TypeVar("T")

ANSWER_PROMPT_VERSION = PROMPTS["answer"].version
NOT_FOUND = "The indexed documents do not contain the answer."
QUOTED = "The index says: "
MAX_PASSAGE_CHARS = 2000
MAX_PASSAGES = 20
"""Passages given to the answer model at most (an ``/answer`` or ``/ask`` with a large
``k`` must not build a prompt of any size)."""
PROMPT_CHARS = 24_000
"""Characters of passages in one prompt at most (each passage gets its share)."""
ANSWER_TOKENS = 120
"""The longest reply asked for (one short sentence with its citation; replies averaged 86
characters on SQuAD)."""
SUPPORT_SHARE = 0.5
"""Share of an answer's new words that must be in a passage that supports it."""


JOINED: dict[AnswerStrictness, float | None] = {
    "lenient": 0.0, "balanced": 0.25, "strict": None}
"""For two passages that back an answer together (:func:`joined`, an index with a
graph): the share of the question's words the first one must say, per
``answer_strictness`` level (None: one passage must back an answer)."""

_DECLINES = re.compile(
    r"\b(?:not\s+found|(?:do|does|did)\s+not\s+(?:contain|mention|say|state|specify|"
    r"provide|include|answer|give|tell)|don't\s+(?:contain|mention|say)|doesn't\s+"
    r"(?:contain|mention|say)|(?:cannot|can't|unable\s+to)\s+(?:find|answer|determine|"
    r"be\s+determined|tell)|no\s+information|not\s+(?:mentioned|specified|provided|"
    r"stated|given|included|available)|isn't\s+(?:mentioned|stated)|there\s+is\s+no\s+"
    r"(?:mention|information))\b", re.I)
_CITATION = re.compile(r"\[([\d,\s]+)\]")
_ACCORDING = re.compile(
    r"^(?:according\s+to|based\s+on|as\s+(?:stated|said)\s+in)\s+(?:the\s+)?(?:first\s+|"
    r"second\s+|third\s+)?(?:passages?|notes?|text|context|information)\s*(?:\[[\d,\s]+\])?"
    r"\s*,\s*", re.I)
_AS_STATED = re.compile(
    r",?\s*\(?(?:as|which\s+is)\s+(?:stated|mentioned|noted|described|cited|reported|"
    r"seen|found|shown|given|explained)\s+in\s+(?:the\s+)?(?:first\s+|second\s+|third\s+)?"
    r"(?:passages?|notes?|text)?\s*\[[\d,\s]+\]\)?", re.I)
META = frozenset(
    "according passage passages note notes stated states state mentioned mention "
    "information found specifically inferred infer text given provided based following "
    "context answer question refers refer says say said above cited cites".split())
"""Words a reply uses to speak of the passages, not of the answer."""
FRAME = frozenset(
    "many much name named names year years kind type sort time times long often far old "
    "called call number amount percentage percent other if".split())
"""Words that frame a question ("How many", "What year", "What is the name of") and are
not what it asks about."""


def best_statement(result: SearchResult) -> str:
    """The statement of a result that matched best: the atom of its best matched
    question, or "" when none matched (a chunk found by its text)."""
    for question in result.matched_questions:
        if question.atom:
            return question.atom
    return ""


def answer_prompt(query: str, results: list[SearchResult],
                  spec: PromptSpec = PROMPTS["answer"], *,
                  max_chars: int = PROMPT_CHARS) -> Prompt:
    """The answer prompt over the first :data:`MAX_PASSAGES` results, each cut to its
    share of ``max_chars`` (at most :data:`MAX_PASSAGE_CHARS`) around its best matched
    statement, with that statement first (:func:`passage_note`)."""
    results = results[:MAX_PASSAGES]
    each = min(MAX_PASSAGE_CHARS, max(200, max_chars // max(1, len(results))))
    notes = [f"[{n}] {passage_note(r, each)}" for n, r in enumerate(results, start=1)]
    return spec.render(passages="\n\n".join(notes), query=query)


def passage_note(result: SearchResult, size: int) -> str:
    """A passage as the answer model sees it: about ``size`` characters of the chunk
    around the statement that matched best, that statement moved to the front
    ("STATEMENT ... the rest"); a statement the chunk does not hold word for word (an
    atomizer's rewording) is put before the chunk as ``(matched: "...")``, within the same
    size. Moved, not
    repeated: on the development set the model answered as well as with the statement
    repeated before the passage (78 and 79 of 100 replies right, 76 without it), with a
    prompt of today's size (benchmarks/history/2026-11.md, "Answers")."""
    statement = " ".join(best_statement(result).split())
    text = _around(result.chunk.text, statement, size)
    if not statement or len(statement) >= size // 2:
        return text  # (a statement that is most of the passage: the passage as it is)
    before, found, after = text.partition(statement)
    if not found:
        rest = _around(result.chunk.text, "", size - len(statement))
        return f'(matched: "{statement}") {rest}'
    rest = " ".join(part for part in (before.strip(), after.strip()) if part)
    return f"{statement} ... {rest}" if rest else statement


def _around(text: str, statement: str, size: int) -> str:
    """``text`` cut to about ``size`` characters around ``statement`` (at word
    boundaries; from the beginning when there is no statement)."""
    text = " ".join(text.split())
    if len(text) <= size:
        return text
    at = text.find(statement) if statement else -1
    start = max(0, min(at - (size - len(statement)) // 2, len(text) - size)) if at > 0 else 0
    end = start + size
    if start:
        start = text.rfind(" ", 0, start) + 1
    cut = text.rfind(" ", start, end) if end < len(text) else end
    return ("..." if start else "") + text[start:cut if cut > start else end] + (
        "..." if end < len(text) else "")


def citations(answer: str, count: int) -> list[int]:
    """The passage numbers an answer cites, in order of first citation."""
    found: list[int] = []
    for group in _CITATION.findall(answer):
        for number in re.findall(r"\d+", group):
            n = int(number)
            if 1 <= n <= count and n not in found:
                found.append(n)
    return found


def declines(reply: str) -> bool:
    """Whether the model's reply says the passages do not hold the answer."""
    head = reply.strip()[:300]
    return not head or bool(_DECLINES.search(head))


# -- words ------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _vocabulary() -> frozenset[str]:
    """The whole words of the embedding model's WordPiece vocabulary: a word outside it
    (a typo, a rare name) may be matched with one letter wrong."""
    from importlib import resources

    path = resources.files("isotope") / "data/all-MiniLM-L6-v2/tokenizer.json"
    vocab = json.loads(path.read_text(encoding="utf-8"))["model"]["vocab"]
    return frozenset(w for w in vocab if w.isalpha())


_IRREGULAR = dict(pair.split("=") for pair in (
    "got=get gotten=get went=go gone=go took=take taken=take made=make came=come held=hold "
    "won=win gave=give given=give began=begin begun=begin wrote=write written=write "
    "became=become led=lead ran=run saw=see seen=see told=tell left=leave found=find "
    "brought=bring bought=buy built=build sent=send spent=spend kept=keep stood=stand "
    "sold=sell paid=pay met=meet fell=fall fallen=fall grew=grow grown=grow knew=know "
    "known=know threw=throw thrown=throw chose=choose chosen=choose drove=drive "
    "driven=drive rose=rise risen=rise lost=lose taught=teach thought=think fought=fight "
    "caught=catch sang=sing sung=sing spoke=speak spoken=speak wore=wear worn=wear "
    "broke=break broken=break ate=eat eaten=eat drew=draw drawn=draw flew=fly flown=fly "
    "hid=hide hidden=hide shot=shoot struck=strike swam=swim showed=show shown=show "
    "stole=steal stolen=steal fed=feed felt=feel heard=hear meant=mean sat=sit slept=sleep "
    "understood=understand".split()))
"""Irregular past forms of English verbs, to their base ("got" answers "get")."""
_NUMBER_WORDS = {w: str(n) for n, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen "
    "fourteen fifteen sixteen seventeen eighteen nineteen twenty".split())} | {
    "thirty": "30", "forty": "40", "fifty": "50", "sixty": "60", "seventy": "70",
    "eighty": "80", "ninety": "90", "hundred": "100", "thousand": "1000"}


def _stems(text: str) -> set[str]:
    """Words of a text with their variants: lower case, without a possessive, British
    ``-is-`` spellings as American (``urbanisation``), irregular verbs as their base
    (``got``: ``get``), and each word's Porter stem (the keyword index's own
    tokenizer)."""
    words = set()
    for word in re.findall(r"[\w']+", text.lower()):
        word = re.sub(r"is(ation|e|ed|es|ing)$", r"iz\1", word.removesuffix("'s").strip("'"))
        if word:
            words.add(_IRREGULAR.get(word, word))
    return words | {t for terms in TOKENIZER.words(sorted(words)) for t in terms}


def _numbers(text: str) -> set[str]:
    return {n.replace(",", "") for n in re.findall(r"\d+(?:[.,]\d+)*", text)}


def _new_numbers(answer: str, question: str) -> set[str]:
    """The numbers of an answer (not its citation marks) that the question does not hold."""
    return _numbers(_CITATION.sub(" ", answer)) - _numbers(question)


class _Words:
    """What a text says, for matching words against it: its words, their variants and,
    for long words, their first six letters."""

    def __init__(self, text: str) -> None:
        self.words = set(re.findall(r"[\w']+", text.lower()))
        self.stems = _stems(text)
        self.prefixes = {w[:6] for w in self.words if len(w) >= 7}
        self.numbers = _numbers(text)

    def __or__(self, other: _Words) -> _Words:
        """What two texts say together."""
        both = _Words("")
        both.words, both.stems = self.words | other.words, self.stems | other.stems
        both.prefixes, both.numbers = self.prefixes | other.prefixes, self.numbers | other.numbers
        return both

    def has(self, word: str) -> bool:
        """Whether ``word`` is said: as any variant, with the same first six letters (a
        long word), or one letter off when it is not an English word (a typo in the
        question: "championshipt", "braodcast")."""
        if _stems(word) & self.stems or (len(word) >= 7 and word[:6] in self.prefixes):
            return True
        if word in _NUMBER_WORDS:  # "ten times" asked, "10 times" written
            return _NUMBER_WORDS[word] in self.numbers
        return (len(word) >= 5 and word not in _vocabulary()
                and any(_one_off(word, w) for w in self.words if abs(len(w) - len(word)) < 2))


def _one_off(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` differ by one letter added, dropped, changed or swapped."""
    if len(a) > len(b):
        a, b = b, a
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1
                                  and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    return any(a == b[:i] + b[i + 1:] for i in range(len(b)))


def _content(text: str) -> list[str]:
    return [w for w in content_words(_CITATION.sub(" ", text)) if w not in META]


def _new_words(answer: str, question: str) -> list[str]:
    """The answer's content words that are not the question's (nor about the passages,
    nor framing it: "33 yards long", "named ...")."""
    asked = _stems(question)
    return [w for w in _content(answer)
            if not w.isdigit() and w not in FRAME and not (_stems(w) & asked)]


def _asked(question: str) -> list[str]:
    """What a question asks about: its content words without the words that frame it."""
    return [w for w in _content(question) if w not in FRAME]


# -- judging ----------------------------------------------------------------------------
def support(answer: str, question: str, passage: str) -> float:
    """How well ``passage`` supports ``answer`` to ``question``: the share of the
    answer's new words (not the question's) that the passage says; 0 when a number of
    the answer that the question does not hold is not in the passage. An answer with no
    new word or number (a restated question) has no support."""
    return _support(answer, question, _Words(passage))


def _support(answer: str, question: str, said: _Words) -> float:
    numbers = _new_numbers(answer, question)
    if numbers - said.numbers or not _claims_said(answer, said):
        return 0.0
    new = _new_words(answer, question)
    if not new:
        return 1.0 if numbers else 0.0
    return sum(said.has(w) for w in new) / len(new)


def evidence(answer: str, question: str, passage: str) -> float:
    """Whether the passage says the answer where it speaks of what was asked: the share
    of the question's words (:func:`_asked`) in the passage's window (a sentence and its
    neighbours) that holds most of the answer's new words and numbers."""
    asked = _asked(question)
    if not asked:
        return 1.0
    new = _new_words(answer, question)
    numbers = _new_numbers(answer, question)
    best = (-1, 0)
    for around in _windows([_Words(p) for p in _sentences(passage)]):
        window = reduce(or_, around)  # (the window saying most of the answer, then of the question)
        best = max(best, (_said(window, new, numbers), sum(window.has(w) for w in asked)))
    return best[1] / len(asked)


def _sentences(passage: str) -> list[str]:
    """A passage's sentences (the whole passage when it has none)."""
    return sentences(passage) or [passage]


def _windows(parts: list[T]) -> list[list[T]]:
    """A passage's windows, from what each of its sentences says: each sentence with its
    neighbours."""
    return [parts[max(0, i - 1):i + 2] for i in range(len(parts))]


def _said(words: _Words, new: list[str], numbers: set[str]) -> int:
    """How many of an answer's new words and numbers ``words`` says."""
    return sum(words.has(w) for w in new) + len(numbers & words.numbers)


def _names(sentence: str, question: str) -> set[str]:
    """The names a sentence says that the question does not (:func:`_capitalised`; lower
    case, without a possessive)."""
    asked = _stems(question)
    return {low for low in (w.lower().removesuffix("'s") for w in _capitalised(sentence))
            if not _stems(low) & asked}


def joined(answer: str, question: str, results: list[SearchResult], needed: float
           ) -> tuple[int, int] | None:
    """Two passages that back an answer together, as a two-hop answer is made ("Which
    metal is the mace before the Presiding Officer's chair made of?" asked of a passage
    naming the Presiding Officer's mace and one saying it is silver): (``a``, ``b``),
    1-based positions among ``results``, or None. ``b`` says the answer: a window of it
    says at least half of the answer's new words and numbers (and the passage every new
    number), while ``a`` says less than half of them (else the answer is ``a``'s, and
    ``a`` alone must back it); the two together :func:`support` it (every name and number
    the answer asserts, the question's too, is in one of them); and a window of ``a``
    that says at least ``needed`` of the question's words (:func:`_asked`) shares a name
    the question does not say with the window of ``b`` that says the answer (the entity
    that joins the two hops; a name as :func:`_capitalised` reads it in the passages'
    text, the graph is not read). The pair whose ``a`` says most of the question wins."""
    new, numbers = _new_words(answer, question), _new_numbers(answer, question)
    part = len(new) + len(numbers)
    if not part:
        return None
    asked = _asked(question)
    # each passage's windows: what they say, the names in them, the share of the question
    windows: list[list[tuple[_Words, set[str], float]]] = []
    for result in results:
        parts = _sentences(result.chunk.text)
        windows.append([])
        for said, named in zip(_windows([_Words(p) for p in parts]),
                               _windows([_names(p, question) for p in parts]), strict=True):
            words = reduce(or_, said)
            share = sum(words.has(w) for w in asked) / len(asked) if asked else 1.0
            windows[-1].append((words, set().union(*named), share))
    whole = [reduce(or_, (w for w, _, _ in ws)) for ws in windows]  # (one sentence at least)
    best: tuple[float, int, int] | None = None
    for b, b_windows in enumerate(windows):
        if numbers - whole[b].numbers:
            continue
        counted = [(_said(words, new, numbers), names) for words, names, _ in b_windows]
        top = max(count for count, _ in counted)
        if 2 * top < part:
            continue
        link = set().union(*(names for count, names in counted if count == top))
        if not link:
            continue
        for a, a_windows in enumerate(windows):
            if (2 * _said(whole[a], new, numbers) >= part
                    or _support(answer, question, whole[a] | whole[b]) < SUPPORT_SHARE):
                continue  # (``b`` itself says at least half: never its own ``a``)
            for _, names, share in a_windows:
                if share >= needed and (best is None or share > best[0]) and names & link:
                    best = (share, a, b)
    return None if best is None else (best[1] + 1, best[2] + 1)


def _claims(answer: str) -> tuple[set[str], list[str]]:
    """What an answer asserts that must be the cited passage's own words, wherever else
    they come from (the question too): its numbers and the names it gives (capitalised
    words past a sentence's first, "Express delivery to Japan takes 3 days": Japan, 3)."""
    text = _CITATION.sub(" ", answer)
    names = []
    for sentence in _sentences(text):
        # ("Yes, New employees get ...": a clause after an interjection starts anew)
        names += _capitalised(_INTERJECTION.sub("", sentence))
    return _numbers(re.sub(r"\((?:passage|source)\s+\d+\)", " ", text, flags=re.I)), names


def _capitalised(sentence: str) -> list[str]:
    """A sentence's names: its capitalised words past its first ("Express delivery to
    Japan takes 3 days": Japan), words about passages and stopwords aside."""
    words = re.findall(r"[\w'][\w'.-]*", sentence)
    return [w for w in (w.strip(".'") for w in words[1:])
            if w[:1].isupper() and w[:1].isalpha() and len(w) > 1
            and w.lower() not in META and content_words(w.lower())]


_INTERJECTION = re.compile(r"^\s*(?:yes|no|yeah|indeed|correct|sure|right)\b\W*", re.I)


def _claims_said(answer: str, said: _Words) -> bool:
    """Whether a passage says every number and name the answer asserts (a question's
    word in an answer is no evidence: "Japan" asked and answered, "Austria" written),
    each name as it is or as a variant of it (not one letter off: "Vienne" is not
    "Vienna")."""
    numbers, names = _claims(answer)
    return not (numbers - said.numbers) and all(_stems(n) & said.stems for n in names)


def _says_something(sentence: str, question: str) -> bool:
    """Whether a sentence of a reply holds an answer (not only "This is found in [1]")."""
    return bool(_new_words(sentence, question) or _new_numbers(sentence, question))


def _tidy(sentence: str) -> str:
    """The answer as shown: without "According to passage [1], ", "as stated in [2]"
    and citation marks (the checked ones are added after it)."""
    text = _AS_STATED.sub("", _ACCORDING.sub("", sentence.strip()))
    text = re.sub(r"\s+([.,;:!?])", r"\1", _CITATION.sub("", text)).strip()
    return text[:1].upper() + text[1:]


@dataclass
class Judged:
    """What :func:`judge` made of a reply."""

    kind: AnswerKind
    text: str
    cited: list[int]
    """1-based positions (among the passages given) of the passages cited."""
    confidence: float = 0.0
    """The answer's own confidence (:mod:`isotope.search.answer_check`): 0 when
    declined."""


def judge(reply: str, question: str, results: list[SearchResult], *, sure: bool,
          strictness: AnswerStrictness = "balanced", two_hop: bool = False,
          check: Check | None = None, check_spec: PromptSpec = PROMPTS["check"]) -> Judged:
    """The answer to show for the model's ``reply`` to ``question`` over ``results``
    (the passages given, in order); ``sure``: the search is sure of its first result (its
    suggested action is ``deliver``); ``check``: asks the model whether a passage says
    the answer (P(yes), :meth:`isotope.providers.LLM.yes_probability`; None: the words
    alone decide). See the module docstring."""
    answer = _answer_sentence(reply, question)
    found = _backed(answer, question, results, JOINED[strictness], sure=sure,
                    two_hop=two_hop) if answer else None
    if found is None:
        return Judged("declined", NOT_FOUND, [])
    cited, signals, passage, source = found
    signals = replace(signals, checked=check(check_prompt(
        _tidy(answer), question, passage, check_spec)) if check is not None else None)
    trust = confidence(signals)
    generate, quote_at = LEVELS[strictness].bars(signals.checked is not None)
    if trust >= generate:
        marks = " ".join(f"[{n}]" for n in cited)
        return Judged("generated", f"{_tidy(answer)} {marks}", cited, trust)
    quote = _quote(answer, question, results[source - 1].chunk.text)
    if quote and trust >= quote_at:
        return Judged("quoted", f"{QUOTED}{quote} [{source}]", [source], trust)
    return Judged("declined", NOT_FOUND, [])


def _backed(answer: str, question: str, results: list[SearchResult],
            joined_share: float | None, *, sure: bool, two_hop: bool,
            ) -> tuple[list[int], Signals, str, int] | None:
    """The passages that back ``answer`` (1-based positions: those it cites among them,
    else the one that supports it best; or the two of a two-hop answer, the first saying
    ``joined_share`` of the question at least), the signals of its words (``checked`` not
    yet asked), the sentences the check reads and the passage that says the answer (to
    quote when it fails); None when no passage supports it."""
    scores = [support(answer, question, r.chunk.text) for r in results]
    backing = [n for n, score in enumerate(scores, start=1) if score >= SUPPORT_SHARE]
    shares = {n: evidence(answer, question, results[n - 1].chunk.text) for n in backing}
    if backing:
        own = [n for n in citations(answer, len(results)) if n in backing]
        cited = own or [max(backing, key=lambda n: (scores[n - 1], shares[n], -n))]
        first = cited[0]
        return cited, Signals(support=scores[first - 1], evidence=shares[first],
                              matched=_matched(results[first - 1]), top=results[0].score,
                              first=first == 1, sure=sure and first == 1), \
            window(answer, question, results[first - 1].chunk.text), first
    pair = joined(answer, question, results, joined_share) \
        if two_hop and joined_share is not None else None
    if pair is None:  # (the search being sure of its first result says nothing of a pair)
        return None
    asks, says = (results[n - 1].chunk.text for n in pair)
    return sorted(pair), Signals(support=1.0, evidence=evidence(answer, question, asks),
                                 matched=_matched(results[pair[0] - 1]),
                                 top=results[0].score, first=min(pair) == 1, sure=False), \
        f"{window(question, '', asks)} {window(answer, question, says)}", pair[1]


def _matched(result: SearchResult) -> float:
    """The best cosine of a result's indexed questions to the query (0: none matched)."""
    return max((q.score for q in result.matched_questions), default=0.0)


def _answer_sentence(reply: str, question: str) -> str:
    """The reply's first sentence that says something ("" when the model declined)."""
    if declines(reply):
        return ""
    # (sentences keeps initials and abbreviations whole: "C. J. Anderson", "U.S.")
    said = [s for s in sentences(reply.strip()) if _says_something(s, question)]
    return said[0] if said else ""


def window(answer: str, question: str, passage: str) -> str:
    """The sentences of ``passage`` that hold ``answer``: the window (a sentence and its
    neighbours) saying most of its new words and numbers, then most of the question's
    words; cut to :data:`~isotope.search.answer_check.WINDOW_CHARS` around its middle."""
    parts = _sentences(passage)
    new, numbers, asked = (_new_words(answer, question), _new_numbers(answer, question),
                           _asked(question or answer))
    best, chosen = (-1, -1), 0
    for i, around in enumerate(_windows([_Words(p) for p in parts])):
        said = reduce(or_, around)
        score = (_said(said, new, numbers), sum(said.has(w) for w in asked))
        if score > best:
            best, chosen = score, i
    text = " ".join(" ".join(parts[max(0, chosen - 1):chosen + 2]).split())
    return _around(text, parts[chosen].strip(), WINDOW_CHARS)


def _quote(answer: str, question: str, passage: str) -> str:
    """The sentence of ``passage`` that says most of ``answer``'s new words and numbers
    (then most of the question's), as the passage writes it; "" when none says any."""
    new, numbers, asked = (_new_words(answer, question), _new_numbers(answer, question),
                           _asked(question))
    best, chosen = (0, 0), ""
    for sentence in _sentences(passage):
        said = _Words(sentence)
        score = (_said(said, new, numbers), sum(said.has(w) for w in asked))
        if score > best:
            best, chosen = score, sentence
    return " ".join(chosen.split()) if best[0] else ""


def grounded(answer: str, question: str, results: list[SearchResult]) -> list[int]:
    """The passages an answer cites that support it (:func:`support`), for callers that
    judge a reply themselves; :func:`judge` is what ``ask`` uses."""
    return [n for n in citations(answer, len(results))
            if support(answer, question, results[n - 1].chunk.text) >= SUPPORT_SHARE]


__all__ = ["JOINED", "NOT_FOUND", "Judged", "answer_prompt", "citations",
           "declines", "evidence", "grounded", "judge", "support"]
