"""A listing's tag (its ETag): what a page is made of (the names on it,
each run's summary.json's identity and state, or the store's table for a
listing that asks every run), hashed with what else may change it (the
generation of counts of findings, the row's shape)."""

from __future__ import annotations

import orjson
import xxhash

SHAPE = 3  # the shape of a row: part of every listing's tag (bump it when _browse's row changes)


def listing_tag(sid, offset, total, page, asked, counts) -> str:
    # orjson, not repr: a tenth of the cost for a page of 1,000 (names, ints)
    return xxhash.xxh3_128_hexdigest(orjson.dumps((sid, offset, total, page, asked, counts, SHAPE)))
