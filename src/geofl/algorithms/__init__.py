"""Federated algorithms: each a strategy (server half) plus a client algorithm (client half).

``ALGORITHMS`` holds FedAvg, FedProx, FedAvgM, FedAdam/FedYogi/FedAdagrad, SCAFFOLD, FedDyn,
FedNova, the EMA-proximal regulariser of paper 001 (``ema_prox``) and DP-FTRL (``dp_ftrl``);
:func:`geofl.plugins.load_all` imports the modules that register them.
"""

from geofl.algorithms.base import ALGORITHMS, Algorithm, AlgorithmContext

__all__ = ["ALGORITHMS", "Algorithm", "AlgorithmContext"]
