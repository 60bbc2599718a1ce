"""Synthetic generators: the embedded datasets, seeded, in the real datasets' shapes."""
