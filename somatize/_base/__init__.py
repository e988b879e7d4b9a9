"""The bottom layer: what crosses an edge, how it is encoded, and the errors.

Owns ``Opaque``/``Data`` (``values``), the codec registry (``codecs``), the
exception family (``errors``) and the locks a forked child can take
(``forks``). Imports numpy and nothing else of somatize.
"""
