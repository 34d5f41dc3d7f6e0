"""A Hugging Face checkpoint folder to a ported model, its weights read once, straight into MindSpore's memory.

    lm = aot_ops.from_pretrained("path/to/folder", max_length=256)          # a PortedLM, for aot_ops.generate
    cell = aot_ops.from_pretrained("path/to/folder")                         # a cell of the whole sequence (logits)
    model = aot_ops.load_pretrained("path/to/folder")                        # the torch model, on the same memory

transformers' own `from_pretrained` memory-maps the files, and a port then copies every weight into its cell. Here
the model is built on the meta device (no memory), each weight becomes a MindSpore Parameter of its own memory,
and the torch module is given views of those Parameters; the safetensors files are then read into them
(checkpoint.py: past the page cache where it can, nothing mapped). A port of that module with share_weights=True
takes the Parameters as they are (convert.owning_parameter), so the weights exist once, in the memory the cell
uses, and the torch module keeps computing on it. from_pretrained reads the files (and repacks int4 weights) while
the module is exported and fused: those steps see the weights' shapes and dtypes only (torch.export traces with fake
tensors), and the reading is finished before the port is returned.

Non-persistent buffers (rotary frequencies, embedding scales) are not in a checkpoint: they are made as
transformers' own loading makes them, by the model's `_init_weights`, and one it leaves unset is an error rather
than garbage.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

import mindspore as ms
import torch
from mindspore.common.initializer import Zero

from ..._core import dtypes as _dtypes
from ..._core.convert import owned_view
from ..._core.torch_private import is_persistent_buffer
from ..._core.transformers_private import model_from_config, weight_initialiser
from ..errors import PortError
from . import compressed_tensors_format, quantized_weights
from .checkpoint import Checkpoint, StoredTensor

log = logging.getLogger("aot_ops.port")


def load_pretrained(folder, *, dtype: torch.dtype | None = None, model_class: Any = None,
                    tensor_parallel: bool | int = False, quantization_config: Any = None) -> torch.nn.Module:
    """The transformers model saved in `folder` (config.json and safetensors files, as save_pretrained writes them),
    in evaluation mode, its parameters and buffers views of MindSpore Parameters holding the checkpoint's values.

    - `dtype`: the weights' dtype (default: the config's `dtype`, else float32); stored tensors of another floating
      dtype are converted as they are read.
    - `model_class`: the class to build (default AutoModelForCausalLM): an Auto class or a model class.
    - Port the model with share_weights=True (from_torch_lm's default) and the cell takes those Parameters without
      a copy. Tied weights stay tied. A tensor the model has and the checkpoint lacks, or one of another shape, is a
      PortError naming it; tensors the checkpoint has and the model does not are logged and skipped.
    - `tensor_parallel=True` (or the job's number of ranks), on each rank of a MindSpore job (msrun): the model
      split over the job's ranks by its own plan (aot_ops.tensor_parallel) before any weight is read; each rank
      reads only its share of each split tensor, and the replicated ones whole (docs/distributed.md).
    - Quantized weights (docs/porting.md#quantized-checkpoints): a folder saved from a torchao-quantized model
      (transformers' TorchAoConfig) or a compressed-tensors folder (int4 pack-quantized, int8, W8A8) is read as
      stored, each weight its packed integers and scales; `quantization_config` (a TorchAoConfig or a torchao
      configuration such as Int8WeightOnlyConfig()) quantizes a full-precision folder's linear layers as they are
      read, one full-precision matrix at a time.
    """
    loading = _Loading(folder, dtype, model_class, tensor_parallel, quantization_config)
    loading.read()
    return loading.model


def from_pretrained(folder, *, max_length: int | None = None, batch_size: int = 1, dtype: torch.dtype | None = None,
                    fuse: bool | str = True, jit: bool = True, model_class: Any = None, tokens_per_call: int = 1,
                    tensor_parallel: bool | int = False, quantization_config: Any = None):
    """A causal LM from its checkpoint folder, ported, its weights read once into the cell's Parameters.

    - With `max_length`: a PortedLM with a key/value cache for `batch_size` sequences of up to `max_length` tokens,
      as aot_ops.from_torch_lm(model, batch_size=..., max_length=..., fuse=..., jit=..., tokens_per_call=...)
      gives, for aot_ops.generate.
    - Without: a cell evaluating whole sequences (input_ids, attention_mask: any batch size and length) and
      returning the model's output (`logits`), as from_torch(model, ..., use_cache=False, evaluation_only=True)
      gives.
    `dtype`, `model_class`, `tensor_parallel` and `quantization_config` as for load_pretrained (a split model's
    collectives stand between its fused programs: docs/distributed.md) (whose model the port is made from; `lm.cell`
    or the cell holds its weights; the torch module itself is not kept). Raises PortError naming what cannot be
    loaded or ported."""
    from .. import plan_cache, port
    from .kv_cache import port_lm

    if max_length is None and tokens_per_call != 1:
        raise ValueError("from_pretrained: tokens_per_call is for generation with the key/value cache: give "
                         "max_length too")
    start = time.perf_counter()
    loading = _Loading(folder, dtype, model_class, tensor_parallel, quantization_config)
    reading = loading.start()
    built = time.perf_counter()
    cell_kind = "lm" if max_length is not None else "sequence"
    # a split model's plan is its rank's: its graph holds the rank's vocabulary offset and slice
    plan_key = plan_cache.key(loading.model, dict(cell=cell_kind, max_length=max_length, batch_size=batch_size,
                                                  fuse=fuse, jit=jit, split=loading.split))
    try:
        if max_length is not None:
            ported = port_lm(loading.model, batch_size=batch_size, max_length=max_length, fuse=fuse, jit=jit,
                             share_weights=True, plan_key=plan_key, tokens_per_call=tokens_per_call,
                             export_two_layers=True)
        else:
            ids = torch.zeros(2, 2, dtype=torch.long)  # (a size of 1 would be taken for a constant by export)
            sizes = {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq", max=_max_positions(loading.model))}
            ported = port(loading.model, (), {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                                              "use_cache": False},
                          dynamic_shapes={"input_ids": sizes, "attention_mask": sizes}, fuse=fuse, jit=jit,
                          no_training=f"{type(loading.model).__name__} was ported from its checkpoint for "
                                          "evaluation (from_pretrained): load it with aot_ops.load_pretrained and "
                                          "port it with from_torch to train it", share_weights=True,
                          plan_key=plan_key, export_two_layers=True)
    except BaseException:
        reading.cancel()  # the port's error is the one to see, without waiting for the rest of the files
        raise
    ported_at = time.perf_counter()
    reading.wait()
    log.info("from_pretrained %s: model built in %.1f s, ported in %.1f s, weights read in %.1f s beside it "
             "(%.1f s waited for)", folder, built - start, ported_at - built, reading.seconds,
             time.perf_counter() - ported_at)
    return ported


def _max_positions(model) -> int:
    config = model.config.get_text_config()
    return int(getattr(config, "max_position_embeddings", None) or 4096)


class _Loading:
    """The model built without weights, its Parameters made (not yet read), and what goes where."""

    def __init__(self, folder, dtype: torch.dtype | None, model_class: Any, tensor_parallel: bool | int = False,
                 quantization: Any = None):
        from transformers import AutoConfig, AutoModelForCausalLM

        self.checkpoint = Checkpoint(folder)
        try:
            config = AutoConfig.from_pretrained(str(folder))
        except (OSError, ValueError) as exc:
            raise PortError(f"load_pretrained: {folder} has no usable config.json: {exc}") from None
        dtype = dtype or _config_dtype(config)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"load_pretrained: dtype={dtype!r}; give a floating torch dtype (torch.bfloat16, ...)")
        model_class = model_class or AutoModelForCausalLM
        with torch.device("meta"):
            if hasattr(model_class, "from_config"):  # an Auto class
                model = model_class.from_config(config, dtype=dtype)
            else:
                model = model_from_config(model_class, config, dtype=dtype)
        self.shares: dict[str, tuple[int, int, int, int]] = {}  # split tensors: what this rank reads of each
        self.split: tuple[int, int] | None = None  # (this rank, ranks) of a split model
        if tensor_parallel:
            from ..distributed import split_over_job
            from ..tensor_parallel import shard_by_plan, shares

            self.split = split_over_job(tensor_parallel, f"load_pretrained({folder})")
            # on the meta device: nothing read or allocated yet; tied weights stay tied (one slice)
            model = shard_by_plan(model, *self.split)
            self.shares = shares(model)
        self.model = model.eval()
        self.cancelled = False  # set from another thread: the reading stops before its next tensor
        self.quantized = self._quantized_weights(config, quantization)
        _make_non_persistent_buffers(model)
        self.after_reads: list[Callable[[], None]] = []  # weights made from stored tensors of another layout
        self.targets = self._install_parameters()

    def _install_parameters(self) -> list[tuple[StoredTensor, torch.Tensor]]:
        """Gives every persistent parameter and buffer a MindSpore Parameter (fresh memory, not touched until read)
        and the module a view of it; returns where each is read from. Raises PortError for what the checkpoint
        lacks or holds in another shape."""
        model = self.model
        groups: dict[int, list[str]] = {}
        tensors: dict[int, torch.Tensor] = {}
        for key, tensor in model.state_dict(keep_vars=True).items():
            groups.setdefault(id(tensor), []).append(key)
            tensors[id(tensor)] = tensor
        prefix = getattr(model, "base_model_prefix", "") + "."
        missing, mismatched, used, targets = [], [], set(), []
        for ident, keys in groups.items():
            tensor = tensors[ident]
            stored = _find(self.checkpoint.tensors, keys, prefix)
            # a quantized weight: its packed integers and scales (read as stored, or quantized as read)
            installed = next(filter(None, (source.install(model, keys[0], stored, _new_weight)
                                           for source in self.quantized)), None)
            if installed is not None:
                targets.extend(installed.reads)
                used.update(installed.names)
                self.after_reads.extend(installed.then)
                continue
            if stored is None:
                missing.append(" = ".join(keys))
                continue
            used.add(stored.name)
            share = self.shares.get(keys[0])  # (dimension, start, stop, whole size) of this rank's share
            whole_shape = list(tensor.shape)
            if share is not None:
                whole_shape[share[0]] = share[3]
            if stored.shape != tuple(whole_shape):
                mismatched.append(f"{stored.describe()} for '{keys[0]}' of shape {list(tensor.shape)}")
                continue
            if stored.dtype.is_floating_point != tensor.is_floating_point():
                mismatched.append(f"{stored.describe()} for '{keys[0]}' of dtype {tensor.dtype}")
                continue
            is_parameter = isinstance(tensor, torch.nn.Parameter)
            view = _new_weight(keys[0], tuple(tensor.shape), tensor.dtype,
                               tensor.requires_grad if is_parameter else None)
            for key in keys:
                _set_tensor(model, key, view)
            destination = view.detach()
            if share is None:
                targets.append((stored, destination))
            else:  # this rank's rows: one contiguous piece; its columns: a piece a row
                targets.extend(zip(stored.part(*share[:3]), [destination] if share[0] == 0 else destination))
        if missing or mismatched:
            lines = ([f"missing from the checkpoint: {_listed(missing)}"] if missing else []) + \
                    ([f"of another shape or kind: {_listed(mismatched)}"] if mismatched else [])
            raise PortError(f"load_pretrained: {type(model).__name__} does not match the checkpoint in "
                            f"{self.checkpoint.folder}: " + "; ".join(lines))
        unexpected = sorted(set(self.checkpoint.tensors) - used)
        if unexpected:
            log.warning("load_pretrained: %d tensors of %s are not %s's and are skipped: %s", len(unexpected),
                        self.checkpoint.folder, type(model).__name__, _listed(unexpected))
        return targets

    def _quantized_weights(self, config, quantization: Any) -> list:
        """Where the model's quantized weights come from (quantized_weights.py, compressed_tensors_format.py):
        stored quantized by torchao, by compressed-tensors, or a full-precision weight quantized as it is read."""
        folder = self.checkpoint.folder
        stored = [source for source in (quantized_weights.StoredTorchao(self.checkpoint),) if source.descriptions]
        if compressed_tensors_format.is_compressed_tensors(config):
            stored.append(compressed_tensors_format.CompressedTensors(config, self.model, self.checkpoint))
        if stored and quantization is not None:
            raise PortError(f"load_pretrained: {folder} is stored quantized already: load it without "
                            "quantization_config")
        sources = stored or ([quantized_weights.OnLoad(quantization, self.model, self.checkpoint)]
                             if quantization is not None else [])
        if sources and self.split:
            raise PortError(f"load_pretrained: {folder}: a quantized model cannot be split over ranks "
                            "(tensor_parallel) yet; load it whole on each rank")
        return sources

    def read(self) -> None:
        """Reads every weight."""
        # Pages kept in the cache would compete with the weights' own memory when both do not fit
        drop_cache = 2 * self.checkpoint.nbytes > _available_memory()
        self.checkpoint.read(self.targets, drop_cache=drop_cache, stopped=lambda: self.cancelled)
        for make in self.after_reads:
            if self.cancelled:
                return
            make()

    def start(self) -> "_Reading":
        reading = _Reading(self)
        reading.start()
        return reading


class _Reading(threading.Thread):
    """Reads the checkpoint beside the caller's work (file reads and dtype copies release the GIL)."""

    def __init__(self, loading: _Loading):
        super().__init__(name="aot_ops checkpoint reader", daemon=True)
        self.loading, self.error = loading, None

    def run(self) -> None:
        start = time.perf_counter()
        try:
            self.loading.read()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            self.error = exc
        self.seconds = time.perf_counter() - start

    def wait(self) -> None:
        self.join()
        if self.error is not None:
            raise self.error

    def cancel(self) -> None:
        """Stops the reading before its next tensor and waits for it (the weights are then incomplete: for a
        failed port, whose model is not returned)."""
        self.loading.cancelled = True
        self.join()


def _new_weight(name: str, shape: tuple, dtype: torch.dtype, requires_grad: bool | None = None) -> torch.Tensor:
    """A new MindSpore Parameter (fresh pages: memory is taken as the reading writes it) and the torch view of it a
    module is given (a parameter when `requires_grad` is given, else a plain tensor), marked as its memory."""
    parameter = ms.Parameter(ms.Tensor(shape=shape, dtype=_dtypes.to_ms(dtype), init=Zero()), name=name,
                             requires_grad=bool(requires_grad))
    parameter.init_data()
    return owned_view(parameter, requires_grad)


def _find(stored: dict[str, StoredTensor], keys: list[str], prefix: str) -> StoredTensor | None:
    """The checkpoint's tensor for a model tensor known by `keys` (tied names): under one of them, or under it
    without or with the base model's prefix (a checkpoint of the base model loaded into a model with a head, or
    the other way round, as transformers loads them)."""
    for key in keys:
        for name in (key, key.removeprefix(prefix), prefix + key):
            if name in stored:
                return stored[name]
    return None


def _set_tensor(model: torch.nn.Module, key: str, value: torch.Tensor) -> None:
    """The model's parameter or buffer `key` replaced by `value`: nn.Module files an nn.Parameter among the
    parameters, and a tensor set on a buffer's name stays that buffer, persistent or not."""
    path, _, name = key.rpartition(".")
    setattr(model.get_submodule(path), name, value)


def _make_non_persistent_buffers(model) -> None:
    """Non-persistent buffers on the CPU, computed by the model's own initialisation, as transformers' loading
    computes them; one left unset (still NaN) is an error."""
    owners = []
    for path, module in model.named_modules():
        for name, buffer in list(module.named_buffers(recurse=False, remove_duplicate=False)):
            if not is_persistent_buffer(module, name):
                fresh = torch.empty_like(buffer, device="cpu")
                if fresh.is_floating_point():
                    fresh.fill_(float("nan"))
                setattr(module, name, fresh)
                owners.append((path, module, name))
    init = weight_initialiser(model)
    with torch.no_grad():
        for module in {id(m): m for _, m, _ in owners}.values():
            if init is not None:
                init(module)  # its parameters are still on the meta device: only the buffers are written
    unset = [f"{path}.{name}".lstrip(".") for path, module, name in owners
             if getattr(module, name).is_floating_point() and getattr(module, name).isnan().any()]
    if unset:
        raise PortError(f"load_pretrained: {type(model).__name__}'s buffers {unset} are not in the checkpoint and its "
                        "_init_weights does not compute them; load the model with transformers' from_pretrained and "
                        "port it with from_torch")


def _available_memory() -> int:
    """Linux's estimate of the memory available without swapping (MemAvailable), in bytes; unknown: unlimited."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62


def _config_dtype(config) -> torch.dtype:
    value = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(value, str):
        value = getattr(torch, value, None)
    return value if isinstance(value, torch.dtype) else torch.float32


def _listed(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(f"'{n}'" if not n.startswith("'") else n for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
