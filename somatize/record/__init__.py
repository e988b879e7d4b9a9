"""The record: questions asked of a run (its facts, tables, curves), and the
Recorder that writes it.

Forwards count from 0 everywhere: ``facts(store, run, forward=0)`` is the
first forward. Every function takes the store (a ``Store`` or a path) and the
run's name. A query sees every fact this process handed to a Recorder so far;
another process sees them once that Recorder's background flush ran (every
0.25 s). A Recorder killed with kill -9 loses at most the facts it had not
flushed yet: those of the last flush interval (0.25 s) and of the flush under
way, so 0.25 to 0.5 s of them (measured: bench/RESULTS.md); everything before
reads back in order, once, and the run lists as interrupted.

This layer imports ``_base`` and ``_store``, plus numpy, pandas and orjson;
never torch, never Jupyter (``progress``, ``spent`` and ``Live`` are drawn by
``_widgets`` and load lazily). Every public name loads on first use, so
``somatize runs`` (``_runs`` alone) starts without numpy or pandas.

Modules: ``_recorder`` (the watcher, its hot path), ``_log`` (blocks, index,
series: bytes on disk), ``_runs`` (run folders, summaries, listing),
``_queries`` (facts, forwards, nodes, curve, runs), ``_check`` (fsck).

The record: every fact of a run, kept durably, readable fast.

Layout of one run, ``<store>/runs/<run>/`` (this package owns it entirely)::

    facts.log         append-only framed blocks of at most 512 facts
    index.bin         one fixed-size entry per block: first/last forward, offset, length
    series/<name>.bin (forward int64, value float64) per numeric fact
    summary.json      the run at its last completed flush (rewritten by rename)
    lock              held (fcntl) by the one process recording the run

Why this shape, for the figures it must meet:

- Writing ≥ 1M facts/s durably: the hot path only appends to a list; a flush
  encodes a batch with orjson (≈0.2 µs a fact) into blocks and writes them with
  one ``write()`` and one fsync. No per-fact syscall, no per-fact framing.
- One forward's facts in ≤ 1 ms on a 1M-fact run: the index is a few thousand
  32-byte entries; a binary search finds the one or two blocks holding the
  forward and only they are decoded.
- A 100k-point curve in ≪ 30 ms and ``forwards()`` without decoding facts:
  each numeric fact (``value``; ``finished.took_us``) is also appended to a raw
  series file, read with one ``np.frombuffer``. Series are written after the
  log, so a series never holds a point the log lacks.
- Listing 1,000 runs in ≤ 200 ms: ``summary.json`` carries counts, the
  summarised facts (first, last, min, max) and per-node time; nothing else
  is read to list runs, draw ``nodes()`` or ``spent()``.

What a crash leaves: ``summary.json`` names the bytes of each file that a
completed flush wrote (``log_bytes``, ``series``). Bytes past them are a flush
a kill interrupted: whole blocks there are read (their checksum proves them),
a torn block is ignored and is not damage; ``Recorder(..., resume=True)`` cuts
the run back to its last completed flush and writes the whole blocks again.
Damage is what a completed flush wrote and no longer reads: a block whose
checksum fails, or a file shorter than its summary says. A kill -9 (or a
power cut) loses at most the facts handed over since the last completed flush:
the last ``FLUSH_EVERY`` (0.25 s) of them plus those handed over while that
flush ran; ``bench/bench_record_crash.py`` measures it. ``flush()`` and
``close()`` make every fact so far durable.

Numbers are kept as they were given (ints stay ints, floats floats). Two
exceptions from JSON: a NaN or infinity in a fact reads back as ``None``
(the series keep it exactly), and a field orjson cannot encode is kept as
its ``str``.
"""

_WHERE = {
    "curve": "._queries",
    "facts": "._queries",
    "forwards": "._queries",
    "nodes": "._queries",
    "runs": "._queries",
    "progress": "somatize._widgets",
    "spent": "somatize._widgets",
    "Live": "somatize._widgets",
}

__all__ = ["Live", "curve", "facts", "forwards", "nodes", "progress", "runs", "spent"]


def __getattr__(name):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'somatize.record' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted({*globals(), *_WHERE})
