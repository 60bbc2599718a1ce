"""On-tractor personalization in the hierarchy (003 §2.2.6), opt-in per method.

With it, a tractor that receives global model ŵ^{v} does not adopt it as is: it keeps
w_i ← α·ŵ^{v} + β·A_{r(i)} + (1 − α − β)·w_i (:func:`~geofl.hierarchy.personalize.
personalize`), where w_i is its own latest local model (the one its last delivered update
came from; the model it held when it has none) and A_r the regional adapter of its region
sent down with ŵ^{v}. It trains from that model in the next rounds, and its updates stay
tagged with version v (staleness is about the global information it holds).

Regional adapters (003 leaves them open; our choice): A_r is the mean of the regional (LEO)
models the GEO incorporated in that aggregation whose tractors are mostly in region r
(:func:`~geofl.hierarchy.personalize.regional_adapters`), ŵ where there is none.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from geofl.config.hierarchy import PersonalizationConfig
from geofl.engine.hierarchy.events import TierModel
from geofl.hierarchy.personalize import personalize, regional_adapters

__all__ = ["Personalization"]


class Personalization:
    """Tractors' own models, local models and the adapters of each live global version.

    Args:
        cfg: α and β.
        region: ``[T]`` region of every tractor (0 … R − 1).
    """

    def __init__(self, cfg: PersonalizationConfig, region: np.ndarray) -> None:
        self.cfg = cfg
        self.region = np.asarray(region, dtype=np.int64)
        self.num_regions = int(self.region.max()) + 1 if self.region.size else 0
        self.own: dict[int, torch.Tensor] = {}  # tractor → the personalized model it holds
        self.local: dict[int, torch.Tensor] = {}  # tractor → its latest local model
        self.adapters: dict[int, torch.Tensor] = {}  # version → [R, D] A_r

    def held(self, client: int) -> torch.Tensor | None:
        """The personalized model ``client`` holds, or None (it holds a global version)."""
        return self.own.get(client)

    def trained(self, client: int, model: torch.Tensor) -> None:
        """``client``'s new local model w_i (its delivered update's model)."""
        self.local[client] = model

    def publish(self, version: int, params: torch.Tensor, regionals: Sequence[TierModel]) -> None:
        """The adapters sent down with global ``version`` (``params``, ``[D]``)."""
        tags = [
            Counter(int(self.region[k]) for k in m.clients).most_common(1)[0][0] for m in regionals
        ]
        models = (
            torch.stack([m.model for m in regionals])
            if regionals
            else torch.zeros(0, params.numel(), dtype=params.dtype)
        )
        self.adapters[version] = regional_adapters(
            models,
            torch.tensor(tags, dtype=torch.int64),
            num_regions=self.num_regions,
            fallback=params,
        )

    def adopt(self, client: int, version: int, global_model: torch.Tensor) -> None:
        """``client`` receives ``version``: its model becomes the §2.2.6 combination."""
        local = self.local.get(client, self.own.get(client, global_model))
        adapter = self.adapters[version][int(self.region[client])]
        self.own[client] = personalize(
            global_model, adapter, local, alpha=self.cfg.alpha, beta=self.cfg.beta
        )

    def prune(self, live: set[int]) -> None:
        """Forget the adapters of versions no longer live."""
        for v in [v for v in self.adapters if v not in live]:
            del self.adapters[v]

    def state_dict(self) -> dict[str, Any]:
        """Own and local models, adapters (for a checkpoint)."""
        return {"own": dict(self.own), "local": dict(self.local), "adapters": dict(self.adapters)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.own, self.local = dict(state["own"]), dict(state["local"])
        self.adapters = dict(state["adapters"])
