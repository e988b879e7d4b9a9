"""What a step is handed: a batch, taken apart into the graph's input and
the objective's target, and moved where the run trains.

The rule kept here: the batch is the user's, as their DataLoader yields it.
A pair ``(x, y)`` (a tuple or a list) is the input and the target; a
mapping (a dict, a Hugging Face ``BatchEncoding``, any ``Mapping``) is taken
apart by the keys the Trainer was given (``keys=("pixel_values", "label")``).
With ``device=``, tensors are moved there, inside tuples, lists and
mappings too, ``non_blocking`` (it overlaps the copy with the device's work
when the batch is in pinned memory, as ``DataLoader(pin_memory=True)``
leaves it; otherwise it is a plain copy).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from .._base.errors import SomatizeTypeError, SomatizeValueError
from .._base.values import Data, Opaque


def checked_keys(keys):
    if keys is None:
        return None
    if not isinstance(keys, (tuple, list)) or len(keys) != 2:
        raise SomatizeTypeError(
            f"keys={keys!r:.60}: give the keys of a mapping batch that hold the input and the target, "
            "like keys=('pixel_values', 'label')"
        )
    return tuple(keys)


def pair(batch, keys):
    """``(x, y)`` of ``batch``: x a tensor (the graph's input), y the target as it is."""
    if isinstance(batch, Mapping):
        if keys is None:
            raise SomatizeTypeError(
                f"step(batch) got a mapping with keys {sorted(map(str, batch))[:8]}; say which holds the "
                "input and which the target: Trainer(..., keys=('input_key', 'target_key'))"
            )
        missing = [k for k in keys if k not in batch]
        if missing:
            raise SomatizeValueError(
                f"the batch has no key {missing[0]!r} (Trainer keys={keys!r}); it holds "
                f"{sorted(map(str, batch))[:8]}: give the keys it has"
            )
        x, y = batch[keys[0]], batch[keys[1]]
    elif not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise SomatizeTypeError(
            f"step(batch) takes a pair (x, y) of tensors or a mapping; got {type(batch).__name__}"
            f"{f' of {len(batch)} items' if isinstance(batch, (tuple, list)) else ''}. "
            "Write trainer.step((x, y)), or Trainer(..., keys=('x', 'y')) with step({'x': x, 'y': y})."
        )
    else:
        x, y = batch
    if isinstance(x, Opaque):  # the Trainer wraps x in Opaque itself; unwrapping is harmless
        x = x.value
    elif isinstance(x, Data) and isinstance(x.value, torch.Tensor):
        x = x.value.detach()  # Data means autograd is cut, here as at any edge
    if not isinstance(x, torch.Tensor):
        raise SomatizeTypeError(
            f"step((x, y)): x is a {type(x).__name__}; the Trainer feeds the graph a tensor "
            "(it crosses into the graph as Opaque(x)). Convert it with torch.as_tensor(x)."
        )
    return x, y


def taken(batch, keys, device):
    """``(x, y)`` of ``batch`` (``pair``), moved to ``device`` unless it is None."""
    x, y = pair(batch, keys)
    if device is not None:
        x, y = moved(x, device), moved(y, device)
    return x, y


def moved(value, device):
    """``value`` with every tensor in it on ``device`` (tuples, lists and mappings walked)."""
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True)
    if isinstance(value, Mapping):
        return {k: moved(v, device) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(moved(v, device) for v in value)
    if isinstance(value, list):
        return [moved(v, device) for v in value]
    return value


def checked_device(device, params):
    """``device=`` as a ``torch.device`` (or None), after checking the
    optimizer's ``params`` are there already."""
    if device is None:
        return None
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise SomatizeValueError(f"device={device!r:.40}: {e}; give one like 'cuda', 'cuda:1' or 'cpu'") from None
    away = next((p for p in params if p.device.type != device.type
                 or device.index is not None and p.device.index != device.index), None)
    if away is not None:
        raise SomatizeValueError(
            f"device={str(device)!r}, but the optimizer's parameters are on {away.device}: move the "
            f"graph's modules there first (module.to({str(device)!r})), then build the optimizer"
        )
    return device
