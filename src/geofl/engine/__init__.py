"""The round loop, its events, checkpoints and the experiment driver."""
