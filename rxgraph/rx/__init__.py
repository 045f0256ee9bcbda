"""Reactor-style operators that RxPY does not ship, used by the run pipeline and available to users.

- :func:`do_on_cancel` — a callback on cancellation, before the upstream is disposed;
- :func:`do_finally` — a callback once the subscription ended, told how (:class:`SignalType`);
- :func:`to_async_iterator` — an Observable as an async iterator on the caller's event loop.
"""

from ._async_iterator import to_async_iterator
from ._do_finally import do_finally
from ._do_on_cancel import do_on_cancel
from ._signal import SignalType

__all__ = ["SignalType", "do_finally", "do_on_cancel", "to_async_iterator"]
