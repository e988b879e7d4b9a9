"""somatize: a graph engine that remembers.

The public face fits on one screen; everything else is private. Each name
loads on first use: ``somatize runs`` needs none of them, and listing a
thousand runs must take under 200 ms with Python's start-up counted, which
importing numpy alone would eat half of.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what the names are, for readers and type checkers
    from ._codecs import register_codec as register_codec
    from ._engine import Graph as Graph
    from ._engine import Node as Node
    from ._errors import SomatizeError as SomatizeError
    from ._record._recorder import Recorder as Recorder
    from ._store import Store as Store
    from ._values import Data as Data
    from ._values import Opaque as Opaque

_WHERE = {
    "Data": "._values",
    "Graph": "._engine",
    "Node": "._engine",
    "Opaque": "._values",
    "Recorder": "._record._recorder",
    "SomatizeError": "._errors",
    "Store": "._store",
    "register_codec": "._codecs",
}

__all__ = ["Data", "Graph", "Node", "Opaque", "Recorder", "SomatizeError", "Store", "register_codec"]
__version__ = "0.1.0"


def __getattr__(name):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'somatize' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module, __name__), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__():
    return sorted({*globals(), *_WHERE})
