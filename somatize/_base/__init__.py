"""The bottom layer: what crosses an edge, how it is encoded, the errors, and durable files.

Owns ``Opaque``/``Data`` (``values``), the codec registry (``codecs``), the
exception family (``errors``), the locks a forked child can take
(``forks``), a bounded "did you mean" (``near``), the panels found by name
(``panels``), the kinds of value a Recorder reads in bulk (``bulk``: a 0-d
tensor, registered by ``somatize.torch``), durable files (``files``: written
whole or not at all, read without following a link, synced in one round),
the lock held by one open file (``locks``: a run's), and the storage seam
every byte of a store goes through (``backend``: ``LocalBackend``, over
``files`` and ``locks``). Imports numpy (``files`` lazily) and nothing else
of somatize.
"""
