"""The engine: nodes and ``>>`` (``node``), what crosses an edge (``edges``),
fingerprints and the cache of a frozen node's outputs (``cache``), the
reserved fact names and the watchers facts are handed to (``watchers``, used
by the engine and the Trainer alike), and the Graph that runs a forward
(``engine``).

Imports ``_base`` and ``_store``; never torch, never Jupyter, never the record
(a Recorder is just a watcher to it). The one upward import is lazy: a Graph
shows its panel when displayed in a notebook.
"""
