"""Windows of atoms: the chunks waiting for questions are handed to the model a window at a
time, so that many small chunks keep it as busy as one large one."""

from __future__ import annotations

import logging
from collections.abc import Sequence

log = logging.getLogger(__name__)


def windows(sizes: Sequence[int], window: int) -> list[tuple[int, int]]:
    """``(start, end)`` slices of consecutive items holding about ``window`` atoms each
    (``sizes`` is the atoms of each item); every slice holds at least one item."""
    slices: list[tuple[int, int]] = []
    start = 0
    while start < len(sizes):
        end, size = start, 0
        while end < len(sizes) and (size < window or end == start):
            size += sizes[end]
            end += 1
        slices.append((start, end))
        start = end
    return slices
