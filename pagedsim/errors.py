"""The exceptions pagedsim raises.

Bad input (a negative length, an unknown sequence id, a utilization outside (0, 1])
raises the built-in ``ValueError`` or ``TypeError`` with a message that names the bad
value and what would be valid. Running out of KV-cache memory is not bad input: it
is the normal signal a scheduler reacts to (by waiting or preempting), so it has its
own type.
"""

from __future__ import annotations


class PagedSimError(Exception):
    """Base class of pagedsim's own exceptions."""


class OutOfMemoryError(PagedSimError):
    """The allocator has no room for the request.

    Raised by every allocator operation that needs memory it cannot get; the
    allocator is left exactly as it was before the call.
    """
