"""What a run directory records: round records, the header, provenance, final report, model spec."""
