"""Python source aot_ops generates, imported from a real file: MindSpore's GRAPH_MODE compiles a Cell's construct
and a bprop from their source (inspect), so generated code must live in an importable file, not in exec'd strings.
The one place that writes such files: ported cells (aot_ops/_port) and bprops of any arity (_core/bprops.py)."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from . import cache, private


def import_generated(stem: str, source: str, folder: str = "generated") -> tuple[ModuleType, Path]:
    """The module whose source is `source`, from `<private cache>/<folder>/<stem>_<digest>.py` (written when it is
    missing or differs), imported once per process under a name holding the source's digest."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    module_name = f"aot_ops_{folder}_{stem}_{digest}"
    directory = private.private_dir(cache.private_root() / folder)  # the file is imported: only this user's
    path = directory / f"{stem}_{digest}.py"
    module = sys.modules.get(module_name)
    if module is None:
        if not os.path.lexists(path) or private.check_file(path).read_text() != source:
            cache.write_text_atomically(path, source)
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]
            raise
    return module, path
