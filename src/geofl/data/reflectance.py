"""Sentinel-2 digital numbers: surface reflectance stored as uint16 ``reflectance x SCALE``.

The synthetic generators write this encoding, the stores keep it, and the real-format
readers of Sentinel-2 products (L1C/L2A quantisation value 10000) read it back; one
definition keeps the three in step.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["SCALE", "reflectance"]

#: Stored value = reflectance x SCALE (the Sentinel-2 quantisation value).
SCALE = 10000.0
#: Rows converted at a time, so the peak holds one chunk beside the float32 result.
_CHUNK = 256


def reflectance(raw: np.ndarray) -> torch.Tensor:
    """``[N, C, H, W]`` uint16 digital numbers → float32 reflectance (÷ :data:`SCALE`).

    Converted chunk by chunk into one preallocated tensor, so the peak holds the float32
    result plus one chunk rather than a second full-size float32 copy.
    """
    images = torch.empty(raw.shape, dtype=torch.float32)
    for lo in range(0, raw.shape[0], _CHUNK):
        images[lo : lo + _CHUNK] = torch.from_numpy(raw[lo : lo + _CHUNK].astype(np.float32))
    return images.div_(SCALE)
