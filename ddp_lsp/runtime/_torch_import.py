"""Run a callback right after the user's script imports torch, without importing it early.

The runtime hooks (smallrun's monitor, feasibility's step timing) are installed by a
``sitecustomize`` before the script runs; importing torch there would cost every process of the
job (DataLoader workers, the launcher) about two seconds, so they wait for the script's own
``import torch``. stdlib only.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any


class TorchImportHook(importlib.abc.MetaPathFinder):
    """A meta-path finder that lets the real loader import torch, then calls
    ``on_torch(torch)``; ``on_error(exc)`` hears of a callback that raised (the user's import
    of torch never fails because of us). It removes itself at the first ``import torch``."""

    def __init__(
        self,
        on_torch: Callable[[ModuleType], None],
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        self.on_torch = on_torch
        self.on_error = on_error

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        on_torch, on_error = self.on_torch, self.on_error

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec: Any) -> Any:
                return loader.create_module(spec)

            def exec_module(self, module: ModuleType) -> None:
                loader.exec_module(module)
                try:
                    on_torch(module)
                except Exception as exc:  # never break the user's import of torch
                    if on_error is not None:
                        on_error(exc)

        spec.loader = _Loader()
        return spec


def after_torch_import(
    on_torch: Callable[[ModuleType], None], on_error: Callable[[Exception], None] | None = None
) -> None:
    """``on_torch(torch)`` now if torch is imported already, else right after it is."""
    torch = sys.modules.get("torch")
    if torch is not None:
        on_torch(torch)
    else:
        sys.meta_path.insert(0, TorchImportHook(on_torch, on_error))
