"""What an answer may say: the refusals the routes answer with a status
(``NotFound`` 404, ``Busy`` 409, ``Bad`` 400, ``Gone`` 410, ``ReadOnly``
405, ``Unreachable`` 502), and ``public_text``, the one function that makes
a text fit for a client: no absolute path, no credential, no endpoint."""

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


class ReadOnly(SomatizeError, PermissionError):
    """A change asked of a store the browser only reads, a bucket's (the answer is 405)."""


class Unreachable(SomatizeError, ConnectionError):
    """A bucket store whose bucket has not answered since the server started
    (the answer is 502); the text says which URL and why."""


def _relative(text: str, root: str | None) -> str:
    if root is None:
        return text
    return text.replace(root + os.sep, "").replace(root, ".")


_ABSOLUTE = re.compile(r"(?<![\w.~\x00])/[^\s'\"]+")
# any URL; a bucket's (s3://, gs://, az://, memory://, no user in it) is kept, any other one
# (an endpoint: http://host:port/bucket/key?X-Amz-…) is not said
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]*")
_BUCKET_URL = re.compile(r"(?:s3|gs|az|memory)://[A-Za-z0-9._-]+(?:/[^\s'\"<>@?#]*)?", re.IGNORECASE)
# environment variables whose values are secrets, by their names: never said, wherever they turn up
_SECRET_NAME = re.compile(r"SECRET|TOKEN|PASSWORD|PASSWD|KEY|CREDENTIAL|SIGNATURE|SAS|AUTH", re.IGNORECASE)
_SECRET_MIN = 8  # characters a value has at least to be taken out (shorter ones are words, not secrets)


def _secrets_out(text: str) -> str:
    for name, value in os.environ.items():
        if len(value) >= _SECRET_MIN and _SECRET_NAME.search(name) and value in text:
            text = text.replace(value, "<secret>")
    return text


def public_text(text: str, root: str | None, places=()) -> str:
    """``text`` fit to answer a client: paths under the root relative to it
    (``root`` None: no path is),
    each of ``places`` (``(folder, name)``: a bucket store's local mirror
    and what to call it) named by its name, any other absolute path as
    ``<path>``, a bucket's URL kept and any other URL (an endpoint) as
    ``<url>``, and the value of every environment variable named like a
    secret (``AWS_SECRET_ACCESS_KEY``, ``AWS_ACCESS_KEY_ID``, ``…_TOKEN``)
    as ``<secret>``."""
    text = _secrets_out(text.replace("\x00", "\ufffd"))
    names = []
    for folder, name in places:  # held aside as \x00<n>\x00 while the paths are taken out
        if folder in text:
            text = text.replace(folder, f"\x00{len(names)}\x00")
            names.append(name)
    out, last = [], 0
    for m in _URL.finditer(text):
        out.append(_ABSOLUTE.sub("<path>", _relative(text[last:m.start()], root)))
        url = m.group(0)
        out.append(url if _BUCKET_URL.fullmatch(url) else "<url>")
        last = m.end()
    out.append(_ABSOLUTE.sub("<path>", _relative(text[last:], root)))
    text = "".join(out)
    for i, name in enumerate(names):
        text = text.replace(f"\x00{i}\x00", name)
    return text
