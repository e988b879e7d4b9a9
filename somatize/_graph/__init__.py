"""The engine: nodes and ``>>`` (``node``), what crosses an edge (``edges``),
fingerprints and the cache of a frozen node's outputs (``cache``), and the
Graph that runs a forward and hands facts to watchers (``engine``).

Imports ``_base`` and ``_store``; never torch, never Jupyter, never the record
(a Recorder is just a watcher to it). The one upward import is lazy: a Graph
shows its panel when displayed in a notebook.
"""
