"""Evaluation of a run: held-out splits, per-group metrics, model selection and stopping."""
