"""Client side: local training and the release pipeline applied before an update leaves."""
