"""The 003 ground-layer uplink of a run and its load-time build."""
