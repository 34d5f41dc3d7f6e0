"""Stage 3 of a port (fuse=True and fuse="compile"): a read graph becomes programs, the whole forward and backward
each run as one aot call.

fused.py (AOTAutograd's forward, backward and inference graphs, traced with the alike layers as regions traced once:
layers_traced_once.py), program.py (a graph as the table kernels/aten/generic/program.cpp walks), program_inputs.py
(what each program input is), buffer_writes.py (buffers an evaluation-only program writes where they live),
compiled.py (the same graphs compiled by AOTInductor), mode_programs.py (a cell's programs per mode, made once),
saved_in_library.py (their variant keeping saved tensors in the bundled library under a PyNative gradient),
fused_cache.py and kept.py (traces kept in the build cache).

May import: the trace and read stages, _port's errors.py and modes.py, the package's lower layers; nothing of the
cells or of the language-model layer.
"""
