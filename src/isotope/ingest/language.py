"""The language a passage is written in, for the question prompts.

Asked in English about a German passage, the offline model writes English questions
(all 198 for the 12 German passages of benchmarks/multilingual.py); told the language, it
writes them in German (benchmarks/history/2026-11.md, "German documents"). A passage in one of
:data:`LANGUAGES` therefore gets one more sentence at the end of its question prompts; an
English passage (or one this cannot tell) gets the prompts unchanged, so English indexes
keep their fingerprints and cached replies.
The guess counts each language's most common short words: no model, no dependency.
"""

from __future__ import annotations

import re

from isotope.providers import Prompt

LANGUAGES: dict[str, frozenset[str]] = {
    name: frozenset(words.split()) for name, words in {
        "German": "der die das und ist nicht mit sich auf für dem den des ein eine einer "
                  "wird wurde sind von zu im auch er sie es war bei sein seine ihr ihre "
                  "alle aber oder nach über unter aus vor hat haben jeder jede jedes zwei "
                  "drei noch nur sehr kann werden diese dieser durch wenn",
        "French": "le la les des est une dans pour qui que sur pas par avec sont au aux du "
                  "ce cette été il elle et de à l d un en ne se son sa ses leur mais ou où "
                  "plus très était avait",
        "Spanish": "el la los las del es una por que con para como más fue se al sus su "
                   "en y de un lo pero sobre entre también cuando muy desde hasta era este "
                   "esta",
        "Italian": "il lo gli della delle che è una per con non sono del alla nel dei di e "
                   "un nella anche come più ma tra questo questa era ha",
        "Portuguese": "o os da das do dos é uma em para com não que se por foi são ao e um "
                      "no na nos nas mais mas pelo pela também como muito este esta era "
                      "tem",
        "Dutch": "de het een van en is niet op voor met zijn werd wordt dat die bij ook te "
                 "om aan naar uit er maar als nog over door hij zij",
    }.items()}
"""The languages recognised, each by its most common short words."""
ENGLISH = frozenset("the of and to in is was for on that with as by at from it are be this "
                    "which an a not or he she they has had have were but you we his her "
                    "its their all".split())
MIN_WORDS = 3
"""Fewest common words of a language a passage must have to be called so."""
MIN_SHARE = 0.15
"""Least share of a passage's lower-case words its language's common words must be."""


def language_of(text: str) -> str | None:
    """The language of ``text`` when it is clearly one of :data:`LANGUAGES`, else None:
    among its lower-case words (names left out: "Los Angeles", "van der Berg"), that
    language's common words are at least :data:`MIN_WORDS`, :data:`MIN_SHARE` of them,
    twice English's and more than any other language's."""
    words = [w for w in re.findall(r"\w+", text) if w.islower()]
    english = sum(w in ENGLISH for w in words)
    counts = sorted(((sum(w in common for w in words), name)
                     for name, common in LANGUAGES.items()), reverse=True)
    (best, name), (second, _) = counts[0], counts[1]
    clear = (best >= MIN_WORDS and best >= MIN_SHARE * len(words) and best >= 2 * english
             and best > second)
    return name if clear else None


def in_language(prompt: Prompt, language: str | None) -> Prompt:
    """``prompt`` asking for questions in ``language`` (a passage's :func:`language_of`;
    None: English or not told, the prompt as it is). The sentence comes last, so prompts
    that share a passage still share their start."""
    if language is None:
        return prompt
    last = prompt[-1]
    return [*prompt[:-1], {**last, "content": f"{last['content']}\nWrite the questions in "
                                              f"{language}, the language of the passage."}]
