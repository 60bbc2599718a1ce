"""Transport: network models deciding delivery, delay and bytes of each upload."""
