"""somatize: a graph engine that remembers.

The public face fits on one screen; everything else is private. Each name
loads on first use: ``somatize runs`` needs none of them, and starts
without numpy or pandas, whose import would be most of a short listing's time.
"""

from typing import TYPE_CHECKING

from ._base import panels as _panels

if TYPE_CHECKING:  # what the names are, for readers and type checkers
    from ._base.codecs import register_codec as register_codec
    from ._base.errors import BucketError as BucketError
    from ._base.errors import CodecError as CodecError
    from ._base.errors import DamagedError as DamagedError
    from ._base.errors import Fenced as Fenced
    from ._base.errors import LaunchError as LaunchError
    from ._base.errors import LoaderNotResumable as LoaderNotResumable
    from ._base.errors import MissingExtra as MissingExtra
    from ._base.errors import NodeError as NodeError
    from ._base.errors import NonFiniteLoss as NonFiniteLoss
    from ._base.errors import QueryError as QueryError
    from ._base.errors import RankLost as RankLost
    from ._base.errors import SomatizeError as SomatizeError
    from ._base.errors import SomatizeKeyError as SomatizeKeyError
    from ._base.errors import SomatizeTypeError as SomatizeTypeError
    from ._base.errors import SomatizeValueError as SomatizeValueError
    from ._base.errors import StoreNotWritable as StoreNotWritable
    from ._base.errors import WatcherError as WatcherError
    from ._base.values import Data as Data
    from ._base.values import Opaque as Opaque
    from ._diagnose import diagnose as diagnose
    from ._graph.engine import Graph as Graph
    from ._graph.engine import Node as Node
    from ._import.tensorboard import import_tensorboard as import_tensorboard
    from ._store.store import Store as Store
    from .record._recorder import Recorder as Recorder

_WHERE = {
    "BucketError": "._base.errors",
    "CodecError": "._base.errors",
    "DamagedError": "._base.errors",
    "Fenced": "._base.errors",
    "LaunchError": "._base.errors",
    "LoaderNotResumable": "._base.errors",
    "MissingExtra": "._base.errors",
    "NonFiniteLoss": "._base.errors",
    "SomatizeKeyError": "._base.errors",
    "SomatizeTypeError": "._base.errors",
    "SomatizeValueError": "._base.errors",
    "Data": "._base.values",
    "Graph": "._graph.engine",
    "Node": "._graph.engine",
    "NodeError": "._base.errors",
    "Opaque": "._base.values",
    "QueryError": "._base.errors",
    "RankLost": "._base.errors",
    "Recorder": ".record._recorder",
    "SomatizeError": "._base.errors",
    "Store": "._store.store",
    "StoreNotWritable": "._base.errors",
    "WatcherError": "._base.errors",
    "diagnose": "._diagnose",
    "import_tensorboard": "._import.tensorboard",
    "register_codec": "._base.codecs",
}

__all__ = sorted(_WHERE)
__version__ = "0.1.0"


def _panel(name):
    """A notebook panel, for the layers below the widgets (``_base/panels``):
    ``MissingExtra`` naming ``somatize[lab]`` when Jupyter's widgets (and
    bqplot, for ``compare``) are missing; the graph's panel needs neither."""
    from importlib.util import find_spec

    needs = {"compare": ("anywidget", "bqplot"), "graph_bundle": ()}.get(name, ("anywidget",))
    for needed in needs:
        if find_spec(needed) is None:
            from ._base.errors import MissingExtra

            raise MissingExtra(f"somatize.record.{name} (a notebook panel)", "lab", needed)
    from . import _widgets

    return getattr(_widgets, name)


_panels.found_by(_panel)


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
