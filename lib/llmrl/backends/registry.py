"""The backends' registry: a policy backend by name, without this layer importing its plug-ins.

A plug-in registers itself when its module is imported (:func:`register_backend`). The built-in
plug-ins are also known by entry name (``"module:attribute"``, :data:`ENTRY_POINTS`): asking for
one imports its module then, so hw4's character and Hugging Face backends, which live in the hw4
layer above, are found without any import from here.
"""

from __future__ import annotations

import importlib
from typing import Callable

#: kind -> "module:attribute" of a plug-in that is imported only when that kind is asked for
ENTRY_POINTS = {
    "tinylm": "llmrl.backends.tinylm_backend:TinyLMBackend",
    "char": "llmrl.hw4.char_backend:CharBackend",
    "hf": "llmrl.hw4.hf_backend:HFBackend",
}
_REGISTRY: dict[str, Callable] = {}


def register_backend(kind: str, factory: Callable) -> None:
    """Make ``make_backend(kind, **kw)`` call ``factory(**kw)``."""
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"a backend kind must be a non-empty string, got {kind!r}")
    if not callable(factory):
        raise TypeError(f"the factory of backend {kind!r} must be callable, got {type(factory).__name__}")
    _REGISTRY[kind] = factory


def backend_kinds() -> list[str]:
    return sorted(set(_REGISTRY) | set(ENTRY_POINTS))


def make_backend(kind: str = "char", **kw):
    """A policy backend by kind: "char" (hw4's CharBackend(**kw)), "hf" (llmrl.hw4.hf_backend.HFBackend(**kw)),
    "tinylm", or any kind registered with :func:`register_backend`."""
    if kind not in _REGISTRY:
        if kind not in ENTRY_POINTS:
            raise ValueError(f"kind must be one of {backend_kinds()}, got {kind!r}")
        module, attr = ENTRY_POINTS[kind].split(":")
        try:
            mod = importlib.import_module(module)
        except ImportError as e:
            extra = " and the hf extra (pip install -e '.[hf]')" if kind == "hf" else ""
            raise ImportError(f"backend {kind!r} needs {module}{extra}: {e}") from e
        _REGISTRY.setdefault(kind, getattr(mod, attr))
    return _REGISTRY[kind](**kw)
