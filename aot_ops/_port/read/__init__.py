"""Stage 2 of a port, reading: an exported graph becomes the operator descriptions the cell calls (graph.py), every
refusal named by node and source line.

May import: the trace stage, _port's errors.py and modes.py, the package's lower layers; nothing of the later
stages.
"""
