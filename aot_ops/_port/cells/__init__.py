"""Stage 4 of a port: the MindSpore Cell, its generated class (codegen.py) and its instance (cell.py: structure,
parameters, the call), the module's tree (module_tree.py), weights both ways (weights.py), inputs bound and checked
(call_inputs.py), and a Python call entering the compiled graph (graph_entry.py).

May import: the read and programs stages, _port's errors.py and modes.py, the package's lower layers; nothing of the
language-model layer.
"""
