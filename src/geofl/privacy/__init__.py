"""Privacy: risk scoring, noise mechanisms and per-client accounting."""
