"""Per-hop security of the uplink (003 §2.1.7–2.1.8): epoch keys, envelopes, replay window."""
