"""The Store: a folder of immutable, content-addressed objects and the names
that point at them (``store``), how objects are written (``writer``), the
bytes of one object (``objects``), the rules for names and where a store is
(``names``), and the fsck (``check``).

Imports ``_base`` only (its durable files, ``_base.files``, write and read
every file). Knows nothing of graphs, runs or facts: the record owns
``runs/`` inside a store and reaches it through ``_base.files`` and ``names``.
"""
