"""Server side: validation, defenses, weighting and aggregation over a ``[K, D]`` tensor."""
