"""Runs recorded elsewhere, brought into a store: each one written by a
``Recorder`` as a run of our own, so every reader (``curve``, ``progress``,
``runs``, ``compare``, the run browser, ``somatize runs``) reads it as one.

Public as the function ``somatize.import_tensorboard(logdir, store)`` and
the command ``somatize import tensorboard LOGDIR STORE`` (``tensorboard``:
TensorBoard's event files, read with the tensorboard package's own record
reader, never TensorFlow). It imports ``_base``, ``_store`` and ``record``
(its Recorder writes; its run files are asked which runs were imported
before), and the tensorboard package lazily (the extra
``somatize[tensorboard]``); never torch, never Jupyter.
"""
