"""Store calls off the event loop. Apart from serving/jsonio.py, which needs Quart: the token authority uses it too,
and `pia admin` commands load that without loading Quart."""

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


async def blocking(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run a store call (synchronous SQLAlchemy, argon2) in a worker thread."""
    return await asyncio.to_thread(function, *args, **kwargs)
