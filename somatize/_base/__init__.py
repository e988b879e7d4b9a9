"""The bottom layer: what crosses an edge, how it is encoded, and the errors.

Owns ``Opaque``/``Data`` (``values``), the codec registry (``codecs``) and the
exception family (``errors``). Imports numpy and nothing else of somatize.
"""
