"""Names of a package that load their module on first use (PEP 562), so importing the package stays cheap: the
build commands and setup.py never import MindSpore, and aot_ops.ascendc.runtime never imports torch.library."""
from __future__ import annotations

import importlib
from typing import Callable, Mapping


def lazy_names(package: str, names: Mapping[str, tuple[str, str | None]],
               namespace: dict) -> tuple[Callable, Callable]:
    """(__getattr__, __dir__) for `package`: `names` maps a public name to (module relative to the package,
    attribute or None for the module itself); a loaded name is stored in `namespace` (the package's globals)."""

    def __getattr__(name: str):
        try:
            module_name, attr = names[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        module = importlib.import_module(module_name, package)
        value = module if attr is None else getattr(module, attr)
        namespace[name] = value
        return value

    def __dir__():
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
