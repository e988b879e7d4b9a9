"""One exception family, in one place. Every error says what happened, names
the offending thing, and says what to write instead.

Every error somatize raises on purpose is public: ``somatize`` re-exports
each class here, so ``except somatize.CodecError:`` works as
``except SomatizeError:`` does (tests/test_public_api.py walks every
``raise`` of the package to keep it so). Each also subclasses the matching
builtin (``TypeError``, ``ValueError``, ``KeyError``, ``ImportError``…), so
code that catches the builtin keeps working. The server extension's own
refusals (``_server._public``) are answered as HTTP statuses and never reach
a Python caller."""


class SomatizeError(Exception):
    """Base of every error somatize raises on purpose."""


class SomatizeTypeError(SomatizeError, TypeError):
    """A value of the wrong type was passed; the message names the one expected."""


class SomatizeValueError(SomatizeError, ValueError):
    """A value of the right type that somatize cannot take (a name not
    allowed, a number out of range, a value too large to recall)."""


class SomatizeKeyError(SomatizeError, KeyError):
    """No such name, run, curve or object; the message names close ones."""

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


class NonFiniteLoss(SomatizeError, FloatingPointError):
    """The objective returned nan or inf. ``step`` is the step's index,
    ``loss`` the value. Raised by ``somatize.torch.Trainer`` when it reads the
    loss (with ``read_every=1`` before its backward, nothing updated; else on
    the bulk read that finds it); defined here so that it can be caught
    without importing torch. Data parallel: every rank raises it at the same
    step, ``loss`` the loss over every rank's examples and ``ranks`` the
    ranks whose own loss was not finite (empty in one process)."""


class LoaderNotResumable(SomatizeError, TypeError):
    """A resumed ``fit`` cannot skip the batches its epoch had done in this
    loader: a torch ``DataLoader`` loading in this process whose iterator
    lacks the internals the Trainer advances (another torch, or a subclass
    with an iterator of its own). Raised before anything moves; the message
    names the loader's class, its iterator's, torch's version and what to
    pass instead."""


class RankLost(SomatizeError, RuntimeError):
    """A rank of a data-parallel job is gone: killed, or it raised, or it
    stopped answering within the process group's timeout. Raised on the
    ranks left, by the collective that found it (``rank``: the rank raising),
    and by ``somatize.torch.launch`` in the launching process, naming the
    rank that was lost (``lost``) and how it ended."""

    def __init__(self, message, rank=None, lost=None):
        super().__init__(message)
        self.rank, self.lost = rank, lost


class LaunchError(SomatizeError, RuntimeError):
    """``somatize.torch.launch`` cannot start its ranks (CUDA already in use
    in this process, which a fork would crash), or a rank raised: the message
    names the rank and carries its traceback as text."""

    def __init__(self, message, rank=None):
        super().__init__(message)
        self.rank = rank


class BucketError(SomatizeError, OSError):
    """A bucket (``s3://``, ``gs://``, ``az://``) did not answer, after its
    retries, or refused a request (credentials, a bad request). ``url``:
    the bucket's URL (never a credential); ``key``: the key asked, or None;
    ``status``: the last HTTP status, where one came."""

    def __init__(self, message, url=None, key=None, status=None):
        super().__init__(message)
        self.url, self.key, self.status = url, key, status


class Fenced(SomatizeError, RuntimeError):
    """A conditional write to a bucket lost: another writer made, changed or
    removed the key first (a 412), so this one wrote nothing and is fenced
    out. ``url`` and ``key`` name it."""

    def __init__(self, message, url=None, key=None):
        super().__init__(message)
        self.url, self.key = url, key
