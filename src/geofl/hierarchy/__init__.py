"""Hierarchical FL: the aggregator protocol applied per tier (003 Alg. 3)."""
