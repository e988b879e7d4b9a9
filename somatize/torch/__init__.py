"""somatize.torch: training a graph that never knows it is trained.

Importing this package registers the tensor codec, so ``Data(t)`` crosses an
edge, a Store keeps tensors (header plus raw bytes, never pickle) and a cached
node can key on a tensor input; and registers 0-d tensors as values read in
bulk, so ``Recorder.log`` holds them and reads many in one host sync. torch
is imported here and nowhere else.

Without PyTorch (or tqdm, fit's progress bar) importing this package raises
``MissingExtra`` naming the extra that brings them, ``somatize[torch]``.
"""

from importlib.util import find_spec as _find_spec

from .._base.errors import MissingExtra as _MissingExtra

for _package in ("torch", "tqdm"):
    if _find_spec(_package) is None:
        raise _MissingExtra("somatize.torch", "torch", _package,
                            hint=" (PyTorch's CPU-only build, a fraction of the size: pip install torch "
                                 "--index-url https://download.pytorch.org/whl/cpu)")

# after the check above, so that a missing torch is named, not met deep inside
from .._base.bulk import register_bulk as _register_bulk  # noqa: E402
from .._base.codecs import register_codec as _register_codec  # noqa: E402
from .._base.errors import NonFiniteLoss as NonFiniteLoss  # noqa: E402  (somatize.NonFiniteLoss too)
from . import _bulk  # noqa: E402
from ._codec import TensorCodec as TensorCodec  # noqa: E402
from ._launch import launch as launch  # noqa: E402
from ._module import Module as Module  # noqa: E402
from ._trainer import Trainer as Trainer  # noqa: E402
from ._watch import watch as watch  # noqa: E402
from ._weights import export as export  # noqa: E402
from ._weights import fedavg as fedavg  # noqa: E402
from ._weights import freeze as freeze  # noqa: E402
from ._weights import load as load  # noqa: E402
from ._weights import parameters as parameters  # noqa: E402

_register_codec(TensorCodec())
_register_bulk(_bulk.TYPES, _bulk.hold, _bulk.read)

__all__ = ["Module", "NonFiniteLoss", "TensorCodec", "Trainer", "export", "fedavg", "freeze", "launch", "load",
           "parameters", "watch"]
