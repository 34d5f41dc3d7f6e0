"""Tools run from the command line (python -m aot_ops <tool>): conformance (PyTorch's OpInfo samples through the
bridge), zoo (transformers models ported and checked), doctor (the environment), fuzz (hostile calls)."""
