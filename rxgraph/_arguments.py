"""Checks of arguments that several public entry points share, each raising the error tree's class for it."""

from __future__ import annotations

from reactivex import abc

from .errors import InvalidArgumentError, InvalidTypeError

__all__ = ["check_int", "check_scheduler"]


def check_int(value: object, *, argument: str, least: int, hint: str = "") -> int:
    """``value`` as an int of at least ``least`` (a bool is not one).

    Raises:
        InvalidTypeError: ``value`` is not an int (``argument`` names it).
        InvalidArgumentError: it is below ``least`` (``hint`` adds what ``least`` means, as "1: call once").
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"{argument} must be an int, got {type(value).__name__}", argument=argument)
    if value < least:
        meaning = f" ({hint})" if hint else ""
        raise InvalidArgumentError(f"{argument} must be at least {least}{meaning}, got {value}", argument=argument)
    return value


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
