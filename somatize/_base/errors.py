"""One exception family, in one place. Every error says what happened, names
the offending thing, and says what to write instead.

Each error a user may want to catch is public: ``somatize`` re-exports
``SomatizeError``, ``NodeError``, ``WatcherError``, ``DamagedError``,
``StoreNotWritable`` and ``QueryError``. The others subclass the matching builtin (``TypeError``,
``ValueError``, ``KeyError``, ``ImportError``) and are caught as those."""


class SomatizeError(Exception):
    """Base of every error somatize raises on purpose."""


class SomatizeTypeError(SomatizeError, TypeError):
    pass


class SomatizeValueError(SomatizeError, ValueError):
    pass


class SomatizeKeyError(SomatizeError, KeyError):
    def __str__(self):  # KeyError quotes its message; ours is a sentence
        return str(self.args[0]) if self.args else ""


class DamagedError(SomatizeError, OSError):
    """Something on disk does not read back as it was written."""


class WatcherError(SomatizeError, RuntimeError):
    """A watcher raised while being handed a fact."""


class NodeError(SomatizeError, RuntimeError):
    """A node's forward raised; the message names the node."""


class StoreNotWritable(SomatizeError, PermissionError):
    """The store's folder cannot be written, or was opened ``readonly=True``."""


class QueryError(SomatizeError, ValueError):
    """A ``where=`` query that does not read: ``position`` is the character
    (counted from 0) where reading stopped and ``expected`` what could have
    stood there; the message shows the query with a caret under that place."""

    def __init__(self, message, query="", position=0, expected=""):
        super().__init__(message)
        self.query, self.position, self.expected = query, position, expected


class CodecError(SomatizeError, RuntimeError):
    """A user's codec raised while decoding bytes that are whole (not damage)."""


class MissingExtra(SomatizeError, ImportError):
    """An optional part of somatize needs a package this Python lacks; the
    message names the extra (``pip install "somatize[...]"``) that brings it."""

    def __init__(self, what, extra, package, hint=""):
        super().__init__(
            f"{what} needs {package}, which is not installed in this Python. "
            f'Install it with: pip install "somatize[{extra}]"{hint}',
            name=package,
        )
