"""The record: questions asked of a run (its facts, tables, curves), and the
Recorder that writes it.

Forwards count from 0 everywhere: ``facts(store, run, forward=0)`` is the
first forward. Every function takes the store (a ``Store`` or a path) and the
run's name. ``runs(store)`` is a table (pandas DataFrame: one row per run,
its state and summary); ``Store.runs()`` is only the names, sorted.

A query sees every fact this process handed to a Recorder so far: the facts
not yet flushed are read from the Recorder's memory (a query never makes it
write). Another process sees them once that Recorder's background flush ran
(every 0.25 s). ``Recorder(store)`` without ``run=`` names the run after the
moment it began plus a random suffix (``run-20260131-142502-3f9a0c1e``); the name
is ``recorder.run``.

What a kill -9 loses: at most the facts handed over since the last completed
flush. After ``flush()`` or ``close()`` returns nothing is lost. The flusher
runs every 0.25 s, so typically 0.25 to 0.5 s of facts, more on a machine
too busy to give the flusher its turn;
everything before reads back in order, once, and the run lists as interrupted.

This layer imports ``_base`` (its storage seam, ``backend``) and ``_store``, plus numpy, pandas, orjson and
xxhash; never torch, never Jupyter (``progress``, ``spent``, ``Live`` and
``compare`` are drawn by ``_widgets`` and load lazily; without anywidget (or
bqplot, for ``compare``), asking for one raises ``MissingExtra`` naming
``somatize[lab]``). Every public name loads on first use,
so ``somatize runs`` (``_runs``, ``_summary``, ``_files``) starts without
numpy or pandas.

Modules: ``_recorder`` (the watcher: its hot path and flush), ``_flusher``
(the one background thread, exit and fork), ``_summary`` (summary.json: its
strict reader, and how facts fold into it), ``_recovery`` (resume: cut back,
rebuild from the log), ``_log`` (blocks, index, series: bytes on disk; the one
reader of a log's tail), ``_files`` (a record file by its path: its store's local backend and parts),
``_runs`` (run folders, names, locks, listing), ``_queries`` (facts, forwards,
nodes, curve, runs), ``_check`` (fsck).

Layout of one run, ``<store>/runs/<run>/`` (this package owns it entirely)::

    facts.log         append-only framed blocks of at most 512 facts, each with its xxh3
    index.bin         one fixed-size entry per block: first/last forward, offset, length
    series/<name>.bin (forward int64, value float64) per numeric fact
    summary.json      the run at its last completed flush (rewritten by rename),
                      with the bytes and xxh3 of index.bin and of each series
    lock              held by the one Recorder recording the run (a lock of its open file: _base/locks.py)

Why this shape, for the figures it must meet:

- Writing ≥ 1M facts/s durably: the hot path only appends to a list; a flush
  encodes a batch with orjson into blocks and writes them with
  one ``write()`` and one fsync. No per-fact syscall, no per-fact framing. A
  fact orjson refuses (an int past 64 bits, nesting past 254 levels) is looked
  at alone only when its block fails to encode, and kept with such values as
  their ``str``.
- One forward's facts in ≤ 1 ms on a 1M-fact run: the index is a few thousand
  32-byte entries; a binary search finds the one or two blocks holding the
  forward and only they are decoded.
- A 100k-point curve in ≪ 30 ms and ``forwards()`` without decoding facts:
  each numeric fact (``value``; ``finished.took_us``) is also appended to a raw
  series file, read with one ``np.frombuffer`` after its xxh3 matches the
  summary's. Series are written after the log, so a
  series never holds a point the log lacks.
- Listing 1,000 runs in ≤ 200 ms: ``summary.json`` carries counts, the
  summarised facts (first, last, min, max) and per-node time; nothing else
  is read to list runs, draw ``nodes()`` or ``spent()``.

Integrity: the log is the truth (each block proves itself). ``summary.json``
names the bytes of each file that a completed flush wrote (``log_bytes``,
``index``, ``series``) and the xxh3 of the index and of each series over those
bytes; it is read strictly (every field's type; every count bounded by
``log_bytes``, which a reader that sizes a table by it checks against the
log's size). A reader never answers from bytes that do not verify: a series
that does not match raises ``DamagedError`` naming the file; an index that
does not match is bypassed by reading the log's blocks (read-only); a run
whose summary does not read lists as "damaged" and its queries raise.
``Recorder(..., resume=True)`` rebuilds an index or series that does not
verify from the log. Hostile by default: only regular files are read, never
through a symlink, never waiting on a FIFO, never more bytes than the format
allows (the store's backend, ``_base/backend.py``; ``_files`` for a file
named by its path).

What a crash leaves: bytes past what the summary counts are a flush a kill
interrupted: whole blocks there are read by ``facts`` (their checksum proves
them), a torn block is ignored and is not damage; curves and tables answer up
to the last completed flush. ``Recorder(..., resume=True)`` cuts the run back
to its last completed flush and writes the whole blocks again. Damage is what
a completed flush wrote and no longer reads: a block whose checksum fails, a
file shorter than its summary says or whose checksum differs, a summary whose
counts are not the log's. ``somatize check`` reports it all.

Numbers are kept as they were given (ints stay ints, floats floats); a NaN
or infinity in a fact's own fields reads back as itself (JSON has none: the
block writes null and names the field under ``"~non_finite"``), one nested
deeper reads back as ``None``. A field orjson cannot encode is kept as its
``str``.
"""

_WHERE = {
    "curve": "._queries",
    "facts": "._queries",
    "forwards": "._queries",
    "nodes": "._queries",
    "runs": "._queries",
}
_PANELS = ("Live", "compare", "progress", "spent")  # drawn by the widgets, found through _base/panels

__all__ = ["Live", "compare", "curve", "facts", "forwards", "nodes", "progress", "runs", "spent"]


def __getattr__(name):
    if name in _PANELS:
        from .._base.panels import panel

        value = panel(name)
    else:
        module = _WHERE.get(name)
        if module is None:
            raise AttributeError(f"module 'somatize.record' has no attribute {name!r}")
        from importlib import import_module

        value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted({*globals(), *_WHERE, *_PANELS})
