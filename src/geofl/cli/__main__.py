"""``python -m geofl.cli``: the same as the ``geofl`` console script."""

from geofl.cli import main

main()
