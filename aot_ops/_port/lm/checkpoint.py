"""A Hugging Face checkpoint folder's safetensors files, read straight into memory the caller gives.

A folder holds `model.safetensors`, or shards listed by `model.safetensors.index.json` (what save_pretrained
writes). A safetensors file is an 8-byte little-endian header length, a JSON header (each tensor's dtype, shape
and byte range in the data that follows), then the data. The file is not mapped: each tensor is read from its
byte range into its destination (Checkpoint.read). Where the file system allows, the reads bypass the page cache
(O_DIRECT, _DirectReads): the disk writes into aligned buffers of 8 MB, copied into the destination, instead of
into pages of the page cache that the kernel must first find memory for (a 4 GB file read into fresh memory:
3.3-4.7 s direct, 5.6-7.1 s through the cache, on this project's 2-core VM), and the cache is not filled with a
checkpoint that is read once. Elsewhere (and for a tensor stored in another dtype than its destination, read in
slices and converted) the reads go through the page cache, whose pages are dropped as they are read where the
checkpoint would not fit in memory beside its copy.
"""
from __future__ import annotations

import ctypes
import json
import math
import mmap
import os
import queue
import sys
import threading
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import torch

from ..errors import PortError

# safetensors' dtype names (the format's specification)
_DTYPES = {"BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "U16": torch.uint16,
           "I32": torch.int32, "U32": torch.uint32, "I64": torch.int64, "U64": torch.uint64, "F16": torch.float16,
           "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64}
_READ_SLICE = 64 << 20     # bytes read at a time
_CONVERT_SLICE = 32 << 20  # bytes read at a time when converting dtypes
_MAX_HEADER = 100 << 20    # safetensors' own limit
_DIRECT_BUFFER = 8 << 20   # bytes read at a time past the page cache
_DIRECT_BUFFERS = 3         # buffers the reads and the copies pass between them
_DIRECT_MIN_BYTES = 1 << 16  # smaller pieces are read through the page cache, which reads no more than asked
_DIRECT_ALIGNMENT = 4096   # O_DIRECT reads whole logical blocks, into memory aligned as much


@dataclass(frozen=True)
class StoredTensor:
    """Where one tensor lies in a checkpoint."""

    name: str
    file: Path
    dtype: torch.dtype
    shape: tuple[int, ...]
    start: int  # byte offset in the file
    end: int

    def describe(self) -> str:
        return f"'{self.name}' ({str(self.dtype).removeprefix('torch.')}{list(self.shape)} in {self.file.name})"

    def part(self, dim: int, start: int, stop: int) -> list["StoredTensor"]:
        """The stored pieces of the slice start:stop along `dim` (a rank's share of a split tensor,
        tensor_parallel.py), each contiguous in the file: one for the first dimension, one a row for the second
        of a matrix, in the slice's order, so that only the share is read."""
        item = self.dtype.itemsize
        if dim == 0:
            row = math.prod(self.shape[1:]) * item
            return [replace(self, shape=(stop - start, *self.shape[1:]), start=self.start + start * row,
                            end=self.start + stop * row)]
        if dim == 1 and len(self.shape) == 2:
            row = self.shape[1] * item
            return [replace(self, shape=(stop - start,), start=self.start + r * row + start * item,
                            end=self.start + r * row + stop * item) for r in range(self.shape[0])]
        raise PortError(f"checkpoint: {self.describe()} cannot be read in parts along dimension {dim}")


class Checkpoint:
    """The tensors of a checkpoint folder, by name (headers read; no data)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise PortError(f"checkpoint: {self.folder} is not a folder")
        index = self.folder / "model.safetensors.index.json"
        if index.exists():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
            except (ValueError, KeyError, TypeError) as exc:
                raise PortError(f"checkpoint: {index} is not a safetensors index ({exc})") from None
            files = sorted({self.folder / name for name in weight_map.values()})
        elif (self.folder / "model.safetensors").exists():
            files = [self.folder / "model.safetensors"]
        else:
            found = sorted(p.name for p in self.folder.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt"))
            advice = (f" (it has {', '.join(found)}: load it with transformers and save it again with "
                      "save_pretrained(folder), which writes safetensors)") if found else ""
            raise PortError(f"checkpoint: {self.folder} has no model.safetensors nor model.safetensors.index.json"
                            f"{advice}")
        self.tensors: dict[str, StoredTensor] = {}
        # each file's header "__metadata__" (strings): what wrote it, torchao's description of its quantized tensors
        self.metadata: list[dict[str, str]] = []
        for file in files:
            stored_tensors, metadata = _read_header(file)
            for stored in stored_tensors:
                self.tensors.setdefault(stored.name, stored)
            self.metadata.append(metadata)

    @property
    def nbytes(self) -> int:
        return sum(t.end - t.start for t in self.tensors.values())

    def read(self, pairs: list[tuple[StoredTensor, torch.Tensor]], *, drop_cache: bool = False,
             direct: bool = True, stopped: Callable[[], bool] = lambda: False) -> None:
        """Reads each (stored tensor, destination) pair: a contiguous CPU tensor of the stored shape, of any
        floating dtype when the stored one is floating (converted as torch's `copy_` converts). In file order, past
        the page cache where the file system allows and the dtypes are the same (`direct=False`: never); otherwise
        through it, its pages dropped as they are read with `drop_cache` (a checkpoint of the size of the memory
        otherwise pushes its own destination out: a 14 GB checkpoint read at 0.97 GB/s keeping its pages,
        2.25 GB/s dropping them). `stopped()` true: the reading ends before its next piece."""
        for stored, destination in pairs:
            if tuple(destination.shape) != stored.shape:
                raise PortError(f"checkpoint: {stored.describe()} does not fit a tensor of shape "
                                f"{list(destination.shape)}")
        with ExitStack() as files:
            descriptors = _direct_descriptors({s.file for s, _ in pairs}, files) if direct else {}
            direct_reads, through_cache = _DirectReads(stopped), []
            for stored, destination in file_order(pairs):
                fd = descriptors.get(stored.file)
                # a small piece (a rank's columns of one row) read past the cache would cost whole blocks
                if fd is not None and destination.dtype == stored.dtype and \
                        stored.end - stored.start >= _DIRECT_MIN_BYTES:
                    direct_reads.add(fd, stored, destination)
                else:
                    through_cache.append((stored, destination))
            _read_through_cache(through_cache, drop_cache, stopped)
            direct_reads.run()

    def read_into(self, stored: StoredTensor, destination: torch.Tensor, drop_cache: bool = False) -> None:
        """Reads `stored` into `destination` (as `read`)."""
        self.read([(stored, destination)], drop_cache=drop_cache)


def _direct_descriptors(files: set[Path], opened: ExitStack) -> dict[Path, int]:
    """Each file opened for reads past the page cache, where its file system allows them (not tmpfs)."""
    descriptors = {}
    for file in files if hasattr(os, "O_DIRECT") else ():
        try:
            descriptors[file] = os.open(file, os.O_RDONLY | os.O_DIRECT)
        except OSError:
            continue
        opened.callback(os.close, descriptors[file])
    return descriptors


class _DirectReads:
    """Tensors read past the page cache by two threads in a pipeline: one reads the blocks holding each tensor
    (whole blocks into page-aligned buffers, as O_DIRECT requires), the caller's copies their bytes into the
    destination. The disk then works while the copies make the destination's fresh pages present (on a virtual
    machine that costs about as much as the disk: the two overlap instead of adding up)."""

    def __init__(self, stopped: Callable[[], bool]):
        self.stopped, self.pieces, self.finished = stopped, [], False

    def add(self, fd: int, stored: StoredTensor, destination: torch.Tensor) -> None:
        self.pieces.append((fd, stored, destination.view(-1).view(torch.uint8)))

    def run(self) -> None:
        if not self.pieces:
            return
        memory = mmap.mmap(-1, _DIRECT_BUFFERS * _DIRECT_BUFFER)  # page-aligned
        free: queue.Queue = queue.Queue()
        filled: queue.Queue = queue.Queue()
        whole = torch.frombuffer(memory, dtype=torch.uint8)
        for k in range(_DIRECT_BUFFERS):
            free.put(whole[k * _DIRECT_BUFFER:(k + 1) * _DIRECT_BUFFER])
        reader = threading.Thread(target=self._read, args=(free, filled), daemon=True, name="aot_ops checkpoint")
        reader.start()
        try:
            self._copy(free, filled)
        finally:
            self.finished = True
            for _ in range(_DIRECT_BUFFERS):
                free.put(None)  # a reader waiting for a buffer stops
            reader.join()
            del whole, free, filled  # the buffers' views, before their memory is unmapped
            try:
                memory.close()
            except BufferError:  # a view still held (by an error's traceback): unmapped when it goes
                pass

    def _read(self, free: queue.Queue, filled: queue.Queue) -> None:
        """Puts (buffer, its bytes low..high, their destination) on `filled`, then None; an error in place of a
        piece."""
        try:
            for fd, stored, destination in self.pieces:
                position = stored.start - stored.start % _DIRECT_ALIGNMENT
                end = -(-stored.end // _DIRECT_ALIGNMENT) * _DIRECT_ALIGNMENT  # its last block, whole
                done = 0
                while done < destination.numel():
                    buffer = free.get()
                    if buffer is None or self.finished or self.stopped():
                        return
                    n = os.preadv(fd, [memoryview(buffer.numpy())[:min(_DIRECT_BUFFER, end - position)]], position)
                    if n <= 0:
                        raise PortError(f"checkpoint: {stored.describe()}: the file ends before the tensor does "
                                        "(truncated?)")
                    low, high = max(stored.start, position) - position, min(stored.end, position + n) - position
                    filled.put((buffer, low, high, destination[done:done + high - low]))
                    done += high - low
                    position += n
        except BaseException as exc:  # noqa: BLE001 - handed to the copying thread
            filled.put(exc)
        finally:
            filled.put(None)

    def _copy(self, free: queue.Queue, filled: queue.Queue) -> None:
        while (piece := filled.get()) is not None:
            if isinstance(piece, BaseException):
                raise piece
            buffer, low, high, target = piece
            target.copy_(buffer[low:high])
            free.put(buffer)


def _read_through_cache(pairs: list[tuple[StoredTensor, torch.Tensor]], drop_cache: bool,
                        stopped: Callable[[], bool]) -> None:
    """Reads through the page cache, the destinations' fresh memory made present a tensor ahead of the reads on a
    thread of its own: there the kernel copies from its cache into pages that the copy would otherwise fault in
    one at a time (on a virtual machine the first touch of memory can cost as much as the disk: 1 s per GB here),
    and the two then overlap. (Reads past the cache do without: there it slowed the 7.6B checkpoint's reading,
    19.0 -> 24.0 s on average over 4 runs.)"""
    finished = threading.Event()
    ahead = threading.Thread(target=_make_present, args=([d for _, d in pairs], finished), daemon=True,
                             name="aot_ops weight memory")
    ahead.start()
    try:
        with ExitStack() as files:
            opened: dict[Path, Any] = {}  # one open file each, however many pieces (a row's columns each)
            for stored, destination in pairs:
                if stopped():
                    return
                if stored.file not in opened:
                    opened[stored.file] = files.enter_context(open(stored.file, "rb", buffering=0))
                _read_one_through_cache(opened[stored.file], stored, destination, drop_cache)
    finally:
        finished.set()  # (after an error or a stop, the memory still ahead is left alone)
        ahead.join()


def _read_one_through_cache(f, stored: StoredTensor, destination: torch.Tensor, drop_cache: bool) -> None:
    reader = _Reader(f, stored, drop_cache)
    if destination.dtype == stored.dtype:
        reader.read(_bytes_of(destination))
        return
    if not (destination.is_floating_point() and stored.dtype.is_floating_point):
        raise PortError(f"checkpoint: {stored.describe()} cannot be read as {destination.dtype}")
    flat, item = destination.view(-1), stored.dtype.itemsize
    step = max(1, _CONVERT_SLICE // item)
    buffer = torch.empty(min(step, flat.numel()), dtype=stored.dtype)
    for begin in range(0, flat.numel(), step):
        part = buffer[:min(step, flat.numel() - begin)]
        reader.read(_bytes_of(part))
        flat[begin:begin + part.numel()].copy_(part)


_MADV_POPULATE_WRITE = 23  # Linux 5.14


def _make_present(tensors: list[torch.Tensor], finished: threading.Event) -> None:
    """Faults in each tensor's pages, writable, without changing their contents (madvise MADV_POPULATE_WRITE):
    pages a read already wrote are left as they are. Best effort: where the call is refused, the reads fault the
    pages in themselves."""
    if sys.platform != "linux":
        return
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    for tensor in tensors:
        if finished.is_set():
            return
        start, size = tensor.data_ptr(), tensor.numel() * tensor.element_size()
        page = start - start % 4096
        if size and madvise(page, start + size - page, _MADV_POPULATE_WRITE) != 0:
            return


class _Reader:
    """Sequential reads of one stored tensor, in slices (one read of a gigabyte ran at half the speed of 64 MB
    reads)."""

    def __init__(self, f, stored: StoredTensor, drop_cache: bool):
        self.f, self.stored, self.drop_cache, self.offset = f, stored, drop_cache, stored.start
        f.seek(stored.start)

    def read(self, target: memoryview) -> None:
        done = 0
        while done < len(target):
            n = self.f.readinto(target[done:done + _READ_SLICE])
            if not n:
                raise PortError(f"checkpoint: {self.stored.describe()}: the file ends before the tensor does "
                                "(truncated?)")
            if self.drop_cache and hasattr(os, "posix_fadvise"):
                os.posix_fadvise(self.f.fileno(), self.offset, n, os.POSIX_FADV_DONTNEED)
            self.offset += n
            done += n


def _bytes_of(tensor: torch.Tensor) -> memoryview:
    """The tensor's memory as writable bytes (numpy has no bfloat16: its bits are viewed as int16)."""
    if tensor.dtype in (torch.bfloat16, torch.float16):
        tensor = tensor.view(torch.int16)
    elif tensor.dtype == torch.bool:
        tensor = tensor.view(torch.uint8)
    return memoryview(tensor.numpy()).cast("B")


def _read_header(file: Path) -> tuple[list[StoredTensor], dict[str, str]]:
    try:
        size = file.stat().st_size
        with open(file, "rb") as f:
            length = int.from_bytes(f.read(8), "little")
            if not 0 < length <= min(_MAX_HEADER, size - 8):
                raise ValueError(f"header length {length} in a file of {size} bytes")
            header = json.loads(f.read(length))
    except FileNotFoundError:
        raise PortError(f"checkpoint: {file.name} is listed by the index but missing from {file.parent}") from None
    except (OSError, ValueError) as exc:
        raise PortError(f"checkpoint: {file} is not a safetensors file ({exc})") from None
    data_start = 8 + length
    metadata = header.get("__metadata__") or {}
    if not isinstance(metadata, dict):
        raise PortError(f"checkpoint: {file} is not a safetensors file (its __metadata__ is not a mapping)")
    tensors = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = _DTYPES[info["dtype"]]
            shape = tuple(int(d) for d in info["shape"])
            begin, end = (int(v) for v in info["data_offsets"])
        except KeyError as exc:
            raise PortError(f"checkpoint: '{name}' in {file.name}: unsupported or missing {exc}") from None
        numel = 1
        for d in shape:
            numel *= d
        if end - begin != numel * dtype.itemsize or begin < 0 or data_start + end > size:
            raise PortError(f"checkpoint: '{name}' in {file.name}: bytes {begin}..{end} do not hold "
                            f"{info['dtype']}{list(shape)} within the file's {size} bytes (truncated or corrupt)")
        tensors.append(StoredTensor(name, file, dtype, shape, data_start + begin, data_start + end))
    return tensors, metadata


def file_order(pairs: list[tuple[StoredTensor, Any]]) -> list[tuple[StoredTensor, Any]]:
    """(stored tensor, destination) pairs in the order the tensors lie on disk (one sequential pass per file)."""
    return sorted(pairs, key=lambda pair: (os.fspath(pair[0].file), pair[0].start))
