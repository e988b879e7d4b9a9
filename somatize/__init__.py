"""somatize: a graph engine that remembers.

The public face fits on one screen; everything else is private.
"""

from ._codecs import register_codec as register_codec
from ._engine import Graph as Graph
from ._engine import Node as Node
from ._errors import SomatizeError as SomatizeError
from ._record import Recorder as Recorder
from ._store import Store as Store
from ._values import Data as Data
from ._values import Opaque as Opaque

__all__ = ["Data", "Graph", "Node", "Opaque", "Recorder", "SomatizeError", "Store", "register_codec"]
__version__ = "0.1.0"
