"""The graph as one principal reads it (under its access conditions): an entity's
neighbourhood, or, where no entity it may see is named so, the closest names it may see
offered instead (:func:`neighbourhood`)."""

from __future__ import annotations

from collections.abc import Sequence

from isotope.errors import InvalidArgument, SourceNotFound
from isotope.knowledge.facts import MAX_HOPS, Neighbourhood
from isotope.models import Condition
from isotope.stores import Store


def neighbourhood(store: Store, entity: str, conditions: Sequence[Condition], *,
                  hops: int) -> Neighbourhood:
    """The entity ``entity`` names and what is up to ``hops`` relations away (1 to
    :data:`MAX_HOPS`), read under ``conditions``; :class:`SourceNotFound` (offering the
    closest names) when no chunk they let be seen names it."""
    if not 1 <= hops <= MAX_HOPS:
        raise InvalidArgument(f"hops must be 1 to {MAX_HOPS}, not {hops}")
    found = store.neighbourhood(entity, conditions, hops=hops)
    if found is None:
        close = store.closest_entities(entity, conditions)
        raise SourceNotFound(f"no entity named {entity!r} in the index's graph" + (
            f"; did you mean {either(close)}?" if close else "") + " (`isotope "
            "entities --match TEXT` finds them; the graph is made with the setting graph "
            "= true)")
    return found


def either(names: Sequence[str]) -> str:
    """Names offered as alternatives: ``'A'``, ``'A' or 'B'``, ``'A', 'B' or 'C'``."""
    quoted = [repr(n) for n in names]
    return " or ".join(filter(None, [", ".join(quoted[:-1]), quoted[-1]]))
