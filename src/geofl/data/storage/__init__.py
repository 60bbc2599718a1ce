"""Decode-once caches and memory-mapped stores that datasets are read from."""
