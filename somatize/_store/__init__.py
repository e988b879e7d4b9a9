"""The Store: a folder of immutable, content-addressed objects and the names
that point at them (``store``), how objects are written (``writer``), the
bytes of one object (``objects``), the rules for names and where a store is
(``names``), and the fsck (``check``).

Imports ``_base`` only: every byte is read and written through its storage
seam (``_base.backend``; ``Store.backend``). Knows nothing of graphs, runs
or facts: the record owns ``runs/`` inside a store and reaches it through
the same seam and ``names``.
"""
