"""A Hugging Face checkpoint folder's safetensors files, read straight into memory the caller gives.

A folder holds `model.safetensors`, or shards listed by `model.safetensors.index.json` (what save_pretrained
writes). A safetensors file is an 8-byte little-endian header length, a JSON header (each tensor's dtype, shape
and byte range in the data that follows), then the data. The file is not mapped: each tensor is read from its
byte range into its destination (Checkpoint.reads). Where the file system allows, the reads bypass the page cache
(O_DIRECT): the disk writes into an aligned buffer of 16 MB, copied into the destination, instead of into pages
of the page cache that the kernel must first find memory for (a 4 GB file read into fresh memory: 3.3-4.7 s
direct, 5.6-7.1 s through the cache, on this project's 2-core VM), and the cache is not filled with a checkpoint
that is read once. Elsewhere (and for a tensor stored in another dtype than its destination, read in slices and
converted) the reads go through the page cache, whose pages are dropped as they are read where the checkpoint
would not fit in memory beside its copy.
"""
from __future__ import annotations

import json
import mmap
import os
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch

from .errors import PortError

# safetensors' dtype names (the format's specification)
_DTYPES = {"BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "U16": torch.uint16,
           "I32": torch.int32, "U32": torch.uint32, "I64": torch.int64, "U64": torch.uint64, "F16": torch.float16,
           "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64}
_READ_SLICE = 64 << 20     # bytes read at a time
_CONVERT_SLICE = 32 << 20  # bytes read at a time when converting dtypes
_MAX_HEADER = 100 << 20    # safetensors' own limit
_DIRECT_BUFFER = 16 << 20  # bytes read at a time past the page cache
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
        for file in files:
            for stored in _read_header(file):
                self.tensors.setdefault(stored.name, stored)

    @property
    def nbytes(self) -> int:
        return sum(t.end - t.start for t in self.tensors.values())

    @contextmanager
    def reads(self, drop_cache: bool = False, direct: bool = True) -> Iterator["_Reads"]:
        """A reader of this checkpoint's tensors (`reads.read_into(stored, destination)`), its files kept open
        until the block ends. `drop_cache`: pages read through the page cache are dropped as they are read: a
        checkpoint of the size of the memory otherwise pushes its own destination out (a 14 GB checkpoint read at
        0.97 GB/s keeping its pages, 2.25 GB/s dropping them). `direct=False`: never past the page cache."""
        with ExitStack() as files:
            yield _Reads(self, files, drop_cache, direct)

    def read_into(self, stored: StoredTensor, destination: torch.Tensor, drop_cache: bool = False) -> None:
        """Reads `stored` into `destination` (see _Reads.read_into)."""
        with self.reads(drop_cache) as reads:
            reads.read_into(stored, destination)


class _Reads:
    """Reads of a checkpoint's tensors, each file opened once (past the page cache where it can be)."""

    def __init__(self, checkpoint: Checkpoint, files: ExitStack, drop_cache: bool, direct: bool):
        self.files, self.drop_cache, self.direct = files, drop_cache, direct
        self.direct_files: dict[Path, int | None] = {}  # file -> its O_DIRECT descriptor (None: not possible)
        self.buffer: torch.Tensor | None = None         # page-aligned, for the direct reads

    def read_into(self, stored: StoredTensor, destination: torch.Tensor) -> None:
        """Reads `stored` into `destination` (a contiguous CPU tensor of the same shape; any floating dtype when
        `stored` is floating, converted as torch's `copy_` converts)."""
        if tuple(destination.shape) != stored.shape:
            raise PortError(f"checkpoint: {stored.describe()} does not fit a tensor of shape "
                            f"{list(destination.shape)}")
        fd = self._direct(stored.file) if destination.dtype == stored.dtype else None
        if fd is not None:
            _read_direct(fd, self.buffer, stored, destination.view(-1).view(torch.uint8))
            return
        with open(stored.file, "rb", buffering=0) as f:
            reader = _Reader(f, stored, self.drop_cache)
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


    def _direct(self, file: Path) -> int | None:
        if not self.direct or not hasattr(os, "O_DIRECT"):
            return None
        if file not in self.direct_files:
            try:
                fd = os.open(file, os.O_RDONLY | os.O_DIRECT)
            except OSError:  # a file system without direct reads (tmpfs): through the page cache
                fd = None
            else:
                self.files.callback(os.close, fd)
                if self.buffer is None:
                    memory = mmap.mmap(-1, _DIRECT_BUFFER)  # page-aligned
                    self.files.callback(memory.close)
                    self.buffer = torch.frombuffer(memory, dtype=torch.uint8)
                    self.files.callback(setattr, self, "buffer", None)  # (the mapping closes after its view)
            self.direct_files[file] = fd
        return self.direct_files[file]


def _read_direct(fd: int, buffer: torch.Tensor, stored: StoredTensor, destination: torch.Tensor) -> None:
    """Reads the blocks holding `stored` into `buffer` (page-aligned) and copies its bytes into `destination`
    (uint8, as many bytes), a buffer at a time: the copy and the read each release the GIL."""
    position = stored.start - stored.start % _DIRECT_ALIGNMENT
    end = -(-stored.end // _DIRECT_ALIGNMENT) * _DIRECT_ALIGNMENT  # the tensor's last block, read whole
    view, done, size = memoryview(buffer.numpy()), 0, stored.end - stored.start
    while done < size:
        n = os.preadv(fd, [view[:min(len(view), end - position)]], position)
        if n <= 0:
            raise PortError(f"checkpoint: {stored.describe()}: the file ends before the tensor does (truncated?)")
        low, high = max(stored.start, position) - position, min(stored.end, position + n) - position
        if high > low:
            destination[done:done + high - low].copy_(buffer[low:high])
            done += high - low
        position += n


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


def _read_header(file: Path) -> list[StoredTensor]:
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
    return tensors


def file_order(pairs: list[tuple[StoredTensor, Any]]) -> list[tuple[StoredTensor, Any]]:
    """(stored tensor, destination) pairs in the order the tensors lie on disk (one sequential pass per file)."""
    return sorted(pairs, key=lambda pair: (os.fspath(pair[0].file), pair[0].start))
