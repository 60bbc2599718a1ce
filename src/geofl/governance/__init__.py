"""Governance: reputation (000 Eq. 18–22), committee election (Eq. 23), permissions (Eq. 24)."""
