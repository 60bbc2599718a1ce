"""Malicious client behaviours and passive server-side analyses."""
