"""Language models on top of the port: a causal LM with its key/value cache (kv_cache.py: from_torch_lm), decoding
and sampling (decoding.py, sampling.py: aot_ops.generate), and checkpoint folders read straight into the cell
(checkpoint.py, pretrained.py: from_pretrained, load_pretrained).

May import: the whole port (aot_ops._port and its stages) and the package's lower layers; no stage imports it.
"""
