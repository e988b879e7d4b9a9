"""One exception family. Every error says what happened, names the offending
thing, and says what to write instead."""


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
