"""Flower's waits for a message's objects, shortened (issue 33: deployment round overhead).

Flower 1.42 stores a message as a header plus objects (its records and arrays, each
pushed and pulled apart) and pulls a missing object again after an exponential backoff
that starts at 1 s (``PULL_INITIAL_BACKOFF`` in ``flwr.supercore.constant``: a constant,
no setting changes it). A message is listed before its objects are stored, so a reader
quick enough to see it first sleeps 1 s (then 2 s, 4 s…): the reasons and the three places
are in :mod:`geofl.deploy.warmsite`'s docstring. :func:`object_pull_waits` are the
arguments that look again after ``poll_s / 5``, doubling up to ``poll_s``;
:func:`speed_up_object_pulls` binds them into a Flower module that offers no argument.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

__all__ = ["object_pull_waits", "speed_up_object_pulls"]


def object_pull_waits(poll_s: float) -> dict[str, Any]:
    """Keyword arguments of Flower's ``pull_objects`` that look for a message's missing
    object again after ``poll_s / 5`` seconds, doubling up to ``poll_s`` (Flower: 1 s, up
    to 10 s).

    The tries are not counted (Flower stops an object after 500): a pull still ends at
    Flower's time bound (``PULL_MAX_TIME``), or at once when the object is gone (its
    sender's upload session expired, or the SuperNode dropped a message it failed to pull).
    """
    return {"initial_backoff": poll_s / 5, "backoff_cap": poll_s, "max_tries_per_object": None}


def speed_up_object_pulls(poll_s: float, module: ModuleType) -> bool:
    """Bind :func:`object_pull_waits` into the ``pull_objects`` that ``module`` calls by
    its global name (Flower's SuperNode loop, its ServerApp grid); False, changing nothing,
    when ``module`` has no Flower ``pull_objects`` (another version or grid)."""
    from flwr.supercore.inflatable import inflatable_utils

    found = getattr(module, "pull_objects", None)
    if isinstance(found, functools.partial):  # bound before: bind the new waits instead
        found = found.func
    if found is not inflatable_utils.pull_objects:
        return False
    bound = functools.partial(found, **object_pull_waits(poll_s))
    setattr(module, "pull_objects", bound)  # noqa: B010 - any module, checked above
    return True
