"""The clients of a round as the scheduler sees them: the runner interface and the attackers."""
