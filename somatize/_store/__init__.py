"""The Store: a folder of immutable, content-addressed objects and the names
that point at them (``store``), the bytes of one object (``objects``), the
rules for names (``names``), files written atomically and read defensively
(``files``), and the fsck (``check``).

Imports ``_base`` only. Knows nothing of graphs, runs or facts: the record
owns ``runs/`` inside a store and reaches it through ``files`` and ``names``.
"""
