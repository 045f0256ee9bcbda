"""Names kept for one release after they moved or were renamed, each warning where it is used."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Mapping

__all__ = ["deprecated_names", "deprecation_message"]


def deprecation_message(old_path: str, new_path: str) -> str:
    """The one wording of a deprecation: ``"<old_path> is deprecated and will be removed in the next release; use
    <new_path>"``."""
    return f"{old_path} is deprecated and will be removed in the next release; use {new_path}"


def deprecated_names(module: str, moved: Mapping[str, tuple[str, Callable[[], object]]]) -> Callable[[str], object]:
    """A module ``__getattr__`` (PEP 562) that still serves names that moved, with a ``DeprecationWarning``.

    Python calls a module's ``__getattr__`` only for names the module does not have, so the old names must not be
    bound in it any more. Assign the result to ``__getattr__`` at the module's top level.

    Args:
        module: the module's name (``__name__``), for the message and for the error of an unknown name.
        moved: for each old name, the full path of the name to use instead (``"rxgraph.checkpoint.register_model"``)
            and a function that returns the object (the same object the new path gives).

    Returns:
        The ``__getattr__``: it warns with ``stacklevel=2``, so the warning points at the line that used the old
        name (once per use: ``from package import old`` asks for the name twice, and the first time, when the
        import system only checks that the package has it, does not warn), and raises ``AttributeError`` for any
        other name, as a module does.
    """
    table = dict(moved)

    def __getattr__(name: str) -> object:
        entry = table.get(name)
        if entry is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        new_path, get = entry
        if not _asked_by_import_system():
            warnings.warn(deprecation_message(f"{module}.{name}", new_path), DeprecationWarning, stacklevel=2)
        return get()

    return __getattr__


def _asked_by_import_system() -> bool:
    """Whether the caller of the ``__getattr__`` that calls this is the import system's own code (told as
    :mod:`warnings` tells it: ``importlib._bootstrap``)."""
    frame = inspect.currentframe()
    caller = frame.f_back.f_back if frame is not None and frame.f_back is not None else None
    filename = caller.f_code.co_filename if caller is not None else ""
    return "importlib" in filename and "_bootstrap" in filename
