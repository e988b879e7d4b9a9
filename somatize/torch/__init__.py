"""somatize.torch: training a graph that never knows it is trained.

Importing this package registers the tensor codec, so ``Data(t)`` crosses an
edge, a Store keeps tensors (header plus raw bytes, never pickle) and a cached
node can key on a tensor input. torch is imported here and nowhere else.
"""

from .._base.codecs import register_codec as _register_codec
from ._codec import TensorCodec as TensorCodec
from ._trainer import NonFiniteLoss as NonFiniteLoss
from ._trainer import Trainer as Trainer
from ._weights import export as export
from ._weights import fedavg as fedavg
from ._weights import freeze as freeze
from ._weights import load as load
from ._weights import parameters as parameters

_register_codec(TensorCodec())

__all__ = ["NonFiniteLoss", "TensorCodec", "Trainer", "export", "fedavg", "freeze", "load", "parameters"]
