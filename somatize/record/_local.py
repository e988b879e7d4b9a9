"""What a reader reads for a store: the store itself, or for a Store in a
bucket its mirror on this machine (``_mirror``, imported only then), so a
listing of a store on disk loads nothing of the buckets'."""

from __future__ import annotations

from .._base.bucket import is_url


def local(store, run=None, sync=True):
    """The store a reader reads for ``store``: itself, or for a Store in a
    bucket (or its URL, ``s3://…``) its mirror, brought up to the bucket
    first (``_mirror.reading``: ``run``, that run's head alone; else every
    run's; ``sync=False``: as it is). A store on disk costs one attribute
    look."""
    if getattr(store, "bucket", None) is None and not is_url(store):
        return store
    from ._mirror import reading

    return reading(store, run, sync)
