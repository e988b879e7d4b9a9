"""A curve cut down to what a chart can draw, keeping its shape."""

from __future__ import annotations

import numpy as np


def downsample(value: np.ndarray, points: int) -> np.ndarray:
    """Indices (sorted) of at most ``points`` of ``value`` that keep its
    shape: its first and last point (the x range a chart of it spans), and,
    cut into ``(points - 2) // 2`` buckets of equal length, the minimum and
    the maximum of each, so the series' exact extremes always are kept."""
    n = len(value)
    if n <= points:
        return np.arange(n)
    buckets = max(1, (points - 2) // 2)
    width = -(-n // buckets)
    buckets = -(-n // width)
    low = np.full(buckets * width, np.inf)
    high = np.full(buckets * width, -np.inf)
    low[:n] = value
    high[:n] = value
    start = np.arange(buckets) * width
    at = np.concatenate([start + low.reshape(buckets, width).argmin(1), start + high.reshape(buckets, width).argmax(1),
                         [0, n - 1]])
    return np.unique(at)
