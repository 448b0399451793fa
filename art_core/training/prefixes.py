"""Shared prefixes: the tokens a group's sequences have in common are computed once, not once per sequence.

A customer-service group is 8 rollouts of one scenario: each starts with the same system prompt (policy
and tool list, 1-2k tokens) and the customer's opening, then diverges at the first sampled token. Packed
as whole sequences, that prefix runs forward and backward 8 times. Here a group becomes a *tree*:

    row:  [shared prefix P][suffix 1][suffix 2]...[suffix k]
    attention: the prefix is causal on itself; each suffix sees all of P and itself causally, not the
               other suffixes (attention.py, a mask per suffix or flex's block mask)
    positions: P is 0..|P|-1, each suffix continues at |P|, as it would in its own sequence

so every hidden state is the one its unshared sequence computes, and each suffix's loss reaches the
prefix's activations through attention: the gradient sums over the suffixes, as the unshared step's does.
A trained token inside the prefix (rollouts whose first reply happens to agree) is read from the one
shared position by every sequence that trains it, each with its own old logprob, advantage and weight.

Trees are built per group (`group_index`), one level deep: the group's sequences, sorted, split where
neighbours share fewer than `min_shared` tokens; each run shares its common prefix. A tree must fit a
packed row (`capacity`), so a run whose suffixes do not fit beside the prefix is split into several trees,
each repeating the prefix (first-fit decreasing on the suffixes). A sequence left alone is a tree with no
prefix: the plain packing of before.

    >>> trees = build_trees([[1, 2, 3, 4, 9], [1, 2, 3, 4, 8, 7], [5, 6]], [0, 0, 1], capacity=64, min_shared=2)
    >>> [(t.prefix, t.members) for t in trees]          # members in their tokens' sorted order
    [(4, [1, 0]), (0, [2])]
"""

from __future__ import annotations

from dataclasses import dataclass

from art_core.training.bins import first_fit_decreasing

MIN_SHARED_TOKENS = 16  # below this a shared prefix saves less than its extra attention calls cost


@dataclass
class Tree:
    """A packing unit: `prefix` tokens shared by `members` (indices of sequences, in the sorted order of their
    tokens), then each member's rest.

    `prefix` 0 is a plain sequence (one member)."""

    prefix: int
    members: list[int]


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists.

    >>> common_prefix([1, 2, 3], [1, 2, 4, 5])
    2
    """
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def tree_length(tree: Tree, lengths: list[int]) -> int:
    """Tokens a tree computes: its prefix once, then every member's tokens after it."""
    return tree.prefix + sum(lengths[i] - tree.prefix for i in tree.members)


def build_trees(
    sequences: list[list[int]], groups: list[int], capacity: int, min_shared: int = MIN_SHARED_TOKENS
) -> list[Tree]:
    """Packing units for `sequences` (token ids) of `groups` (one group id each), each at most `capacity`
    tokens where a sequence alone fits (see the module docstring)."""
    by_group: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        by_group.setdefault(g, []).append(i)
    lengths = [len(s) for s in sequences]
    trees: list[Tree] = []
    for members in by_group.values():
        order = sorted(members, key=lambda i: (sequences[i], i))  # sorted: a run's common prefix is its minimum
        runs: list[tuple[int, list[int]]] = []  # (shared tokens, members)
        for i in order:
            if runs:
                shared = common_prefix(sequences[runs[-1][1][-1]], sequences[i])
                if shared >= min_shared:
                    p, run = runs[-1]
                    runs[-1] = (min(p, shared), run + [i])
                    continue
            runs.append((lengths[i], [i]))
        for p, run in runs:
            room = capacity - p
            if len(run) < 2 or room <= 0:
                trees += [Tree(0, [i]) for i in run]
                continue
            for bin_ in first_fit_decreasing([lengths[i] - p for i in run], room):
                picked = [run[b] for b in bin_]
                trees.append(Tree(p, picked) if len(picked) > 1 else Tree(0, picked))
    return trees
