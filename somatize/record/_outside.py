"""Values from a framework's own loop (Lightning, Hugging Face) made into
what a run records: a logged value as the number recorded, and
hyperparameters or training arguments as a config holds them. Written once
here for ``somatize.lightning`` and ``somatize.transformers``."""

from __future__ import annotations

import argparse
import enum
import math
import numbers
import re
from collections.abc import Mapping

CONFIG_NEST = 16  # deeper in the hyperparameters is kept as its str
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # an object's address in its str: another in each process


def recorded_number(value):
    """``value`` as the number recorded, or None for a value that is not one."""
    cls = value.__class__
    if cls is float or cls is int:
        return value
    if value is None or isinstance(value, (bool, str, bytes)):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) or hasattr(value, "__float__"):
        try:
            return float(value)  # a numpy scalar, a tensor of one value
        except (TypeError, ValueError, RuntimeError):
            return None
    return None


def same_value(a, b) -> bool:
    """Whether two recorded values are one: equal, or both NaN."""
    return a == b or (a != a and b != b)


def config_value(value, depth):
    """``value`` (a hyperparameter, a training argument, a model's config) as a config holds it: JSON's values as
    they are, a ``Namespace`` or a mapping as a dict (keys as str), an enum
    as its value, a class or a function by its qualified name, a 0-d tensor
    or array as its number; an int past 64 bits, a NaN or an infinity, or
    anything else, as its ``str`` without the object's address (which would
    differ in each process)."""
    if value is None or value.__class__ in (bool, str):
        return value
    if isinstance(value, enum.Enum):
        return config_value(value.value, depth)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = int(value)
        return value if -(1 << 63) <= value < 1 << 64 else str(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, argparse.Namespace):
        value = vars(value)
    if depth < CONFIG_NEST and isinstance(value, Mapping):
        return {str(k): config_value(v, depth + 1) for k, v in value.items()}
    if depth < CONFIG_NEST and isinstance(value, (list, tuple)):
        return [config_value(v, depth + 1) for v in value]
    if isinstance(value, type) or callable(value) and hasattr(value, "__qualname__"):
        return f"{getattr(value, '__module__', None) or ''}.{value.__qualname__}".lstrip(".")
    if getattr(value, "ndim", None) == 0 and callable(getattr(value, "item", None)):
        return config_value(value.item(), depth)
    return ADDRESS.sub("", str(value))
