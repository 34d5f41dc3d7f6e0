"""Operators in MindSpore: the Custom primitive every operator is, operator definitions, bprops, shape and dtype
inference, cells, dtypes, conversion, attributes, the state the C runtime keeps, load/load_inline and the fast
front's Python side. Imports nothing on its own, so importing one module stays cheap."""
