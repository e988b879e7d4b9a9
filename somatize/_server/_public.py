"""What an answer may say: the refusals the routes answer with a status
(``NotFound`` 404, ``Busy`` 409, ``Bad`` 400, ``Gone`` 410), and ``public_text``, the one
function that makes a text fit for a client (no absolute path in it)."""

from __future__ import annotations

import os
import re

from .._base.errors import SomatizeError


class NotFound(SomatizeError, LookupError):
    """No store or run of that id (the answer is 404)."""


class Busy(SomatizeError, RuntimeError):
    """The run is being recorded by a live Recorder (the answer is 409)."""


class Bad(SomatizeError, ValueError):
    """A query parameter that cannot be read (the answer is 400)."""


class Gone(SomatizeError, LookupError):
    """A listing of several pages no longer kept (the answer is 410): its
    first page is read again."""


def _relative(text: str, root: str) -> str:
    return text.replace(root + os.sep, "").replace(root, ".")


_ABSOLUTE = re.compile(r"(?<![\w.~])/[^\s'\"]+")


def public_text(text: str, root: str) -> str:
    """``text`` fit to answer a client: paths under the root relative to it,
    any other absolute path as ``<path>``."""
    return _ABSOLUTE.sub("<path>", _relative(text, root))
