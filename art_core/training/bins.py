"""Bin packing for the trainer's rows: packing.py packs sequences (or prefix trees) into rows, prefixes.py packs a
group's suffixes under their prefix; both use this, so neither imports the other for it.

    >>> first_fit_decreasing([5, 3, 4, 2], capacity=8)
    [[0, 1], [2, 3]]
"""

from __future__ import annotations


def first_fit_decreasing(lengths: list[int], capacity: int) -> list[list[int]]:
    """Bins of indices whose lengths sum to at most `capacity` (a longer item gets a bin of its own)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    bins: list[list[int]] = []
    room: list[int] = []
    for i in order:
        for b, free in enumerate(room):
            if lengths[i] <= free:
                bins[b].append(i)
                room[b] -= lengths[i]
                break
        else:
            bins.append([i])
            room.append(capacity - lengths[i])
    return [sorted(b) for b in bins]
