"""The bottom layer: the one way aot_ops opens a native library (opener.py) and where the package's own files are
(paths.py). Imports nothing on its own."""
