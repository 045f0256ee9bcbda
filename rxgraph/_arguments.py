"""Checks of arguments that several public entry points share, each raising the error tree's class for it."""

from __future__ import annotations

from reactivex import abc

from .errors import InvalidTypeError

__all__ = ["check_scheduler"]


def check_scheduler(value: object, *, argument: str, owner: str | None = None) -> abc.SchedulerBase | None:
    """``value`` as an optional reactivex scheduler.

    Raises:
        InvalidTypeError: ``value`` is neither None nor a reactivex scheduler (``argument`` names it, ``owner``
            says whose it is in the message: "node 'x'", "tool 'y'").
    """
    if value is None or isinstance(value, abc.SchedulerBase):
        return value
    whose = f"{owner}: " if owner else ""
    raise InvalidTypeError(
        f"{whose}{argument} must be a reactivex scheduler (a ThreadPoolScheduler, say), got {type(value).__name__}",
        argument=argument,
    )
