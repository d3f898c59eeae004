"""Learning from use: the query log, feedback on a search's results, questions learned
from the queries users marked useful, and not-useful marks.

- Each logged search has a ``query_id`` (the ``query_log`` setting; on by default under
  ``isotope serve``). A mark names a logged search and one of the chunks it returned; only
  whoever searched may mark it (another principal's query id is not found), and a mark on
  the same search and chunk replaces the last one.
- A useful mark, with the ``learn`` setting ``auto``, makes the query a question of the
  chunk (origin ``user``), embedded and searchable at once, attached to the chunk's atom
  nearest to it, unless the chunk already has that question (the same words, or an
  embedding within :data:`DUPLICATE`). With ``review`` it waits for
  :func:`review` (``isotope questions review``); with ``off`` nothing is learned. The
  default is ``review`` where access control is on (the setting, or a server's key that
  names a user: a user's words would otherwise become part of what everyone's search
  reads), else ``auto``.
- A not-useful mark keeps the query's embedding: a later search by the same principal
  whose query is within :data:`CLOSE` of it does not rank that chunk first.
- A learned question is never shown as a matched question (its words are someone's
  query) unless the ``show_learned`` setting says so; ``isotope questions`` shows it to
  the index's owner with its origin."""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, Field

from isotope.access import Principal, entitled
from isotope.embedders import Embedder, Vectors
from isotope.errors import InvalidArgument, SourceNotFound
from isotope.models import Chunk, Condition, Origin, QueryResponse, Question
from isotope.stores import Feedback, LoggedQuery, Store, visible_chunk

if TYPE_CHECKING:
    from isotope.reports import IngestReport

CLOSE = 0.9
"""Two queries whose embeddings' cosine reaches this are the same query reworded (a
not-useful mark on one holds for the other)."""
DUPLICATE = 0.95
"""A learned question this close to one of its chunk's questions is not added again."""
LEARN_MODES = ("auto", "review", "off")


class FeedbackResult(BaseModel):
    """What :meth:`Isotope.feedback` did with a mark."""

    query_id: str
    chunk_id: str
    useful: bool
    learned: str | None = None
    """``learned`` (the query is now a question of the chunk), ``pending`` (waiting for
    review), ``waiting`` (for the chunk's questions: learned when an ingest or ``isotope
    enrich`` gives them), ``duplicate`` (the chunk had that question), or None (nothing
    learned)."""
    question_id: str | None = None


class LogSummary(BaseModel):
    """What the query log says (``isotope log``)."""

    searches: int
    since: str | None = None
    frequent: list[tuple[str, int]] = Field(default_factory=list)
    """The most frequent queries (as written, lowercase), with their counts."""
    refine: list[tuple[str, int]] = Field(default_factory=list)
    """Queries whose ``suggested_action`` was ``refine_query`` (probably not found)."""
    not_useful: list[tuple[str, int]] = Field(default_factory=list)
    """Queries marked not useful and never useful."""
    feedback_by_source: list[dict[str, Any]] = Field(default_factory=list)
    """Per source: ``useful`` and ``not_useful`` marks and the ``rate`` of useful ones."""
    latency_ms: dict[str, float] = Field(default_factory=dict)
    """``p50``, ``p95`` and ``p99`` of the searches' latency."""
    actions: dict[str, int] = Field(default_factory=dict)


def logged_as(principal: Principal | None) -> str:
    """The name a search is logged under: ``owner`` (no principal), ``administrator``,
    or the principal's text form."""
    return "owner" if principal is None else str(principal)


def same_principal(logged: str, principal: Principal | None) -> bool:
    """Whether ``principal`` is who made a search logged under ``logged``: the same user
    (whose groups may have changed since), else the same text."""
    now = logged_as(principal)
    if principal is not None and principal.user:
        return logged.split(",")[0] == now.split(",")[0]
    return logged == now


def normalized(text: str) -> str:
    """A query's words for comparing: lowercase, single spaces, no end punctuation."""
    return re.sub(r"\s+", " ", text.casefold()).strip().rstrip("?!. ")


def log(store: Store, response: QueryResponse, principal: Principal | None,
        filters: dict[str, Any] | None, started: float, now: float, *, keep_days: float
        ) -> None:
    """Write ``response`` to the query log (entries older than ``keep_days`` go) and give
    it its ``query_id``."""
    response.query_id = uuid.uuid4().hex
    store.log_query(LoggedQuery(
        query_id=response.query_id, at=datetime.now(UTC).isoformat(),
        principal=logged_as(principal), query=response.query, mode=response.mode,
        chunk_ids=[r.chunk.id for r in response.results],
        scores=[r.score for r in response.results], filters=filters or None,
        action=response.suggested_action, latency_ms=round((now - started) * 1000, 3)),
        keep_days)


VETTED = ("learned", "duplicate")
"""What a user's useful mark taught that a fit or an evaluation may read: a question
learned (``learn = auto`` where the user may teach, or approved by review) or one the
chunk had (confirmed). A user's pending or never learned mark is anyone's word; a
rejected one is no one's."""
TRUSTED = ("owner", "administrator")
"""Whose marks count as they are (not rejected): the index's owner and administrators."""
SHARE = 0.25
"""The most of the marks a fit or an evaluation reads that one user (or group) may give:
the owner's and administrators' are not bounded."""


def vetted(store: Store, most: int) -> tuple[list[Feedback], int]:
    """The useful marks a fit of the weights or an evaluation reads (:data:`VETTED`, or
    :data:`TRUSTED`'s not rejected), newest first, one per query and chunk, at most
    ``most``, no user's or group's beyond :data:`SHARE` of them (at least 10 each); and
    how many useful marks were left out."""
    marks = store.feedback(useful=True)
    seen: set[tuple[str, str]] = set()
    chosen: list[Feedback] = []
    for mark in marks:  # newest first
        key = (normalized(mark.query), mark.chunk_id)
        counts = mark.learn in VETTED or (mark.principal in TRUSTED
                                          and mark.learn != "rejected")
        if counts and mark.query and key not in seen:
            seen.add(key)
            chosen.append(mark)
    bound = max(10, int(SHARE * len(chosen)))
    given: Counter[str] = Counter()
    kept = []
    for mark in chosen:
        if mark.principal not in TRUSTED:  # (one user, whatever groups came with it)
            giver = mark.principal.split(",")[0] if mark.principal.startswith(
                "user:") else mark.principal
            given[giver] += 1
            if given[giver] > bound:
                continue
        kept.append(mark)
    kept = kept[:most]
    return kept, len({(normalized(m.query), m.chunk_id) for m in marks}) - len(kept)


NOT_USEFUL_READ = 500
"""The newest not-useful marks of a principal a search reads (each search of that
principal reads them: 2,937 marks took 170-208 ms a search, against 70)."""


def marks_of(store: Store, principal: Principal | None) -> list[Feedback]:
    """The newest :data:`NOT_USEFUL_READ` not-useful marks of ``principal`` (a user's
    with any groups), with vectors (a read of the search: on a read replica where there
    are some)."""
    with store.snapshot():
        return [m for m in store.feedback(useful=False, principal=logged_as(principal),
                                          user=principal.user if principal else None,
                                          limit=NOT_USEFUL_READ)
                if m.vector]


def not_first(marks: list[Feedback], vector: Vectors) -> set[str]:
    """The chunks of ``marks`` (not-useful marks) whose query is within :data:`CLOSE` of
    the one embedded as ``vector`` (one matrix product over them all)."""
    unit = np.asarray(vector, dtype=np.float32).ravel()
    kept = [m for m in marks if len(m.vector or b"") == unit.nbytes]
    if not kept:
        return set()
    unit = unit / max(float(np.linalg.norm(unit)), 1e-12)
    others = np.frombuffer(b"".join(m.vector or b"" for m in kept),
                           dtype=np.float32).reshape(len(kept), -1)
    near = (others @ unit) / np.maximum(np.linalg.norm(others, axis=1), 1e-12)
    return {m.chunk_id for m, score in zip(kept, near, strict=True) if score >= CLOSE}


def demote(response: QueryResponse, marked: set[str]) -> bool:
    """Move ``response``'s first result, if ``marked``, behind the best result that is
    not (the rest keep their order; ranks renumbered); whether it moved."""
    results = response.results
    if not marked or not results or results[0].chunk.id not in marked:
        return False
    keep = next((i for i, r in enumerate(results) if r.chunk.id not in marked), None)
    if keep is None:
        return False
    results.insert(0, results.pop(keep))
    for rank, result in enumerate(results, start=1):
        result.rank = rank
    return True


def hide_learned(response: QueryResponse) -> QueryResponse:
    """``response`` without learned (user) questions among its matched questions."""
    for result in response.results:
        result.matched_questions = [m for m in result.matched_questions
                                    if m.origin != "user"]
    return response


def learn_mode(setting: str | None, principal: Principal | None = None, *,
               access_control: bool = False, read_only: bool = False) -> str:
    """The ``learn`` ``setting``, else ``review`` where access control is on (the
    setting, or a user's key: its words would reach everyone's searches) or the mark
    comes with a key that may only read (learning writes to the index), else ``auto``."""
    guarded = read_only or access_control or (
        principal is not None and principal.strict
        and not entitled("learning_at_once", principal))
    return setting or ("review" if guarded else "auto")


def feedback(store: Store, embedder: Embedder, query_id: str, chunk_id: str,
             useful: bool, principal: Principal | None, *,
             conditions: Sequence[Condition] = (), learn_setting: str | None = None,
             access_control: bool = False, read_only: bool = False) -> FeedbackResult:
    """Record a mark on result ``chunk_id`` of the logged search ``query_id`` (see the
    module's text) by ``principal``, whose search ``conditions`` say what it may see (a
    chunk it may no longer see is not found); ``learn_setting``, ``access_control`` and
    ``read_only``: as :func:`learn_mode` takes them."""
    query_id, chunk_id = str(query_id).strip(), str(chunk_id).strip()
    entry = store.logged_query(query_id) if query_id else None
    if entry is None or not same_principal(entry.principal, principal):
        raise SourceNotFound(f"no search {query_id!r} in the query log (searches are "
                             "logged with the query_log setting, and kept audit_days)")
    if chunk_id not in entry.chunk_ids:
        raise InvalidArgument(f"chunk {chunk_id!r} was not a result of search {query_id!r}; "
                              f"its results: {', '.join(entry.chunk_ids) or 'none'}")
    visible_chunk(store, chunk_id, conditions)
    marked = next((m for m in store.feedback(query_id=query_id) if m.chunk_id == chunk_id),
                  None)
    if marked is not None and marked.useful == useful:  # (said again: nothing new)
        return FeedbackResult(query_id=query_id, chunk_id=chunk_id, useful=useful,
                              learned=marked.learn)
    chunk = store.get_chunks([chunk_id])[chunk_id]
    if marked is not None and marked.learn == "learned" and not useful:
        # taken back: what the useful mark taught goes too
        for q in store.generated_questions(chunk_id=chunk_id):
            if q.kept and q.origin == "user" and q.text == entry.query:
                store.disable_question(q.id)
    learned = question_id = None
    mode = learn_mode(learn_setting, principal, access_control=access_control,
                      read_only=read_only)
    if useful and not learnable(entry.query):  # (marked, and never learned)
        mode = "off"
    # (the query's embedding: what a not-useful mark keeps, what auto learning adds)
    vector = (np.asarray(embedder.embed([entry.query]), dtype=np.float32)[0]
              if not useful or mode == "auto" else None)
    if useful and vector is not None:
        learned, question_id = learn(store, chunk, entry.query, vector)
        if learned == "pending":  # (not a review: the chunk waits for its questions)
            learned = "waiting"
    elif useful and mode == "review":
        learned = "pending"
    store.add_feedback(Feedback(
        query_id=query_id, chunk_id=chunk_id, useful=useful, principal=entry.principal,
        at=datetime.now(UTC).isoformat(), query=entry.query, source=chunk.source,
        learn=learned, vector=None if useful or vector is None else vector.tobytes()))
    return FeedbackResult(query_id=query_id, chunk_id=chunk_id, useful=useful,
                          learned=learned, question_id=question_id)


def learn_waiting(store: Store, embedder: Embedder, report: IngestReport) -> None:
    """Learn the marks that waited for their chunk's questions (``waiting``), once an
    ingest or an enrichment gave chunks their questions."""
    if not report.enriched_chunks:
        return
    for mark in store.feedback(learn="waiting"):
        chunk = store.get_chunks([mark.chunk_id]).get(mark.chunk_id)
        if chunk is None:
            continue
        vector = np.asarray(embedder.embed([mark.query]), dtype=np.float32)[0]
        done, _ = learn(store, chunk, mark.query, vector)
        if done != "pending":
            mark.learn = done
            store.add_feedback(mark)


def learn(store: Store, chunk: Chunk, text: str, vector: Vectors,
          origin: Origin = "user") -> tuple[str, str | None]:
    """Add ``text`` (embedded as ``vector``) as a question of ``chunk`` (``origin``:
    ``user`` or ``manual``): (``learned``, its id), (``duplicate``, None) or
    (``pending``, None) when the chunk has no atoms yet (it waits for its questions)."""
    stored = next((c for c in store.stored_chunks(chunk.source).values()
                   if c.atoms and c.atoms[0].chunk_id == chunk.id), None)
    if stored is None:
        return "pending", None
    text = question_text(text)  # (learned or by hand: one check)
    unit = np.asarray(vector, dtype=np.float32).ravel()
    said = normalized(text)
    same = next((q for q in stored.questions if normalized(q.text) == said), None)
    if same is None and len(stored.questions):
        near = np.asarray(stored.question_vectors) @ unit
        if float(np.max(near)) >= DUPLICATE:
            same = stored.questions[int(np.argmax(near))]
    if same is not None:  # the chunk has it: confirmed by use (ranked as a learned one)
        if origin == "user":
            store.confirm_question(same.id)
        return "duplicate", None
    atom = stored.atoms[int(np.argmax(np.asarray(stored.atom_vectors) @ unit))]
    question = Question(text=text, atom_id=atom.id, chunk_id=chunk.id, origin=origin)
    if not store.add_kept_questions(chunk.id, [question], unit[None, :]):
        raise SourceNotFound(f"no chunk {chunk.id!r} in the index")
    return "learned", question.id


# -- questions by hand -------------------------------------------------------------------
MAX_QUESTION = 1_000
"""The most characters a question added by hand may have."""
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u2028-\u202e"
                      "\u2060-\u2064\u2066-\u2069\ufeff\ufff9-\ufffb]")
"""What no question holds: control characters (line breaks, escapes, the bell), line and
paragraph separators, bidirectional marks and overrides, and invisible characters (zero
width space, word joiner, byte order mark). Zero width joiners and non-joiners stay: they
shape Persian, Indic scripts and emoji."""


def learnable(text: str) -> bool:
    """Whether ``text`` passes the check of every question (:func:`question_text`)."""
    try:
        question_text(text)
    except InvalidArgument:
        return False
    return True


def question_text(text: str) -> str:
    """A question written by hand, checked: not empty, at most :data:`MAX_QUESTION`
    characters, no control characters (line breaks, escapes, bidirectional overrides)."""
    text = str(text).strip()
    found = _CONTROL.search(text)
    if found:
        raise InvalidArgument(f"a question cannot hold control characters (found "
                              f"{found.group()!r} at {found.start()}); write it on one line")
    if not text:
        raise InvalidArgument("the question is empty")
    if len(text) > MAX_QUESTION:
        raise InvalidArgument(f"the question has {len(text)} characters; at most "
                              f"{MAX_QUESTION}")
    return text


def chunk_at(store: Store, source: Callable[[], str], chunk: int | None,
             chunk_id: str | None) -> Chunk:
    """The chunk ``chunk_id``, or number ``chunk`` of the source ``source`` gives the
    stored name of (read only then)."""
    if chunk_id is None:
        if chunk is None:
            raise InvalidArgument("give the chunk's number (--chunk N) or its id")
        uri = source()
        chunk_id = next((q.chunk_id for q in store.generated_questions(source=uri)
                         if q.chunk_index == chunk), None)
        if chunk_id is None:
            raise SourceNotFound(f"{uri} has no chunk {chunk} with statements (`isotope "
                                 "questions SOURCE` shows its chunks)")
    found = store.get_chunks([chunk_id]).get(chunk_id)
    if found is None:
        raise SourceNotFound(f"no chunk {chunk_id!r} in the index")
    return found


def add_question(store: Store, embedder: Embedder, chunk: Chunk, text: str) -> str:
    """Add ``text`` as a manual question of ``chunk``; its id."""
    text = question_text(text)
    vector = np.asarray(embedder.embed([text]), dtype=np.float32)[0]
    done, question_id = learn(store, chunk, text, vector, "manual")
    if done == "duplicate":
        raise InvalidArgument(f"chunk {chunk.id} already has the question {text!r} (or one "
                              f"within cosine {DUPLICATE})")
    if question_id is None:
        raise InvalidArgument(f"chunk {chunk.id} has no statements yet (it waits for its "
                              "questions: isotope enrich); add the question after")
    return question_id


def edit_question(store: Store, embedder: Embedder, question_id: str, text: str) -> str:
    """Replace a question's text; the new one is ``manual`` (a generated question edited
    is kept like one added by hand). Its new id."""
    found = store.question(question_id)
    if found is None:
        raise SourceNotFound(f"no question {question_id!r} in the index (`isotope questions "
                             "SOURCE --json` gives each one's id)")
    question, _ = found
    text = question_text(text)
    if text == question.text:
        return question_id
    chunk = store.get_chunks([question.chunk_id])[question.chunk_id]
    store.disable_question(question_id)
    try:
        made = add_question(store, embedder, chunk, text)
    except BaseException:  # (as it was; the caller holds the writer lock)
        store.enable_question(question_id, embedder.embed([question.text]))
        raise
    store.forget_disabled(question_id)  # (replaced: its old text is not kept)
    return made


def pending(store: Store) -> list[Feedback]:
    """Useful marks waiting for review, newest first."""
    return store.feedback(learn="pending")


def review(store: Store, embedder: Embedder, marks: Sequence[str], approve: bool
           ) -> list[FeedbackResult]:
    """Approve (learn) or reject the pending marks named ``QUERY_ID:CHUNK_ID``."""
    done = []
    waiting = {f"{m.query_id}:{m.chunk_id}": m for m in pending(store)}
    for name in marks:
        mark = waiting.get(name.strip())
        if mark is None:
            raise InvalidArgument(f"no mark {name!r} waits for review; `isotope questions "
                                  "review` lists them as QUERY_ID:CHUNK_ID")
        learned: str | None = "rejected"
        question_id = None
        if approve:
            chunk = store.get_chunks([mark.chunk_id]).get(mark.chunk_id)
            if chunk is None:
                raise SourceNotFound(f"chunk {mark.chunk_id!r} of mark {name!r} is no "
                                     "longer in the index; reject the mark")
            try:
                question_text(mark.query)
            except InvalidArgument as exc:
                raise InvalidArgument(f"mark {name!r} cannot be learned: {exc}; reject "
                                      "it") from None
            vector = np.asarray(embedder.embed([mark.query]), dtype=np.float32)[0]
            learned, question_id = learn(store, chunk, mark.query, vector)
            if learned == "pending":  # (approved: it waits for the chunk's questions)
                learned = "waiting"
        mark.learn = learned
        store.add_feedback(mark)
        done.append(FeedbackResult(query_id=mark.query_id, chunk_id=mark.chunk_id,
                                   useful=True, learned=learned, question_id=question_id))
    return done


def summary(store: Store, days: float | None = None, top: int = 10) -> LogSummary:
    """What the query log says about the last ``days`` (all it keeps by default)."""
    if days is not None and not (0 < days <= 36_500):  # (also refuses NaN)
        raise InvalidArgument(f"days must be above 0 and at most 36,500, not {days}")
    since = None if days is None else (datetime.now(UTC) - timedelta(days=days)).isoformat()
    entries = store.logged_queries(10_000_000, since=since)
    marks = store.feedback(since=since)
    said = Counter(normalized(e.query) for e in entries)
    refine = Counter(normalized(e.query) for e in entries if e.action == "refine_query")
    useful = {normalized(m.query) for m in marks if m.useful}
    unhelpful = Counter(normalized(m.query) for m in marks
                        if not m.useful and normalized(m.query) not in useful)
    by_source: dict[str, list[int]] = {}
    for mark in marks:
        counts = by_source.setdefault(mark.source or "", [0, 0])
        counts[0 if mark.useful else 1] += 1
    latencies = np.asarray([e.latency_ms for e in entries if e.latency_ms], dtype=float)
    return LogSummary(
        searches=len(entries), since=since, frequent=said.most_common(top),
        refine=refine.most_common(top), not_useful=unhelpful.most_common(top),
        feedback_by_source=sorted(
            ({"source": s, "useful": u, "not_useful": n, "rate": round(u / (u + n), 3)}
             for s, (u, n) in by_source.items()), key=lambda x: -(x["useful"] + x["not_useful"])),
        latency_ms={} if not len(latencies) else {
            f"p{p}": round(float(np.percentile(latencies, p)), 3) for p in (50, 95, 99)},
        actions=dict(Counter(e.action for e in entries if e.action)))


__all__ = ["CLOSE", "DUPLICATE", "FeedbackResult", "LogSummary", "feedback", "review",
           "summary"]
