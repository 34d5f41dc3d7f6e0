"""An ms_ext kernel library inside your own package.

    pip install --no-build-isolation .      # compiles csrc/ into scaled_ops/libscaled_ops.so

--no-build-isolation compiles against the torch you run (an isolated build would install another one). The
library finds torch relative to itself, so it loads from wherever pip puts it, without `import torch`.
"""
from setuptools import setup

from aot_ops.extension import AotExtension, BuildAotExtension

setup(
    name="scaled_ops",
    version="0.1.0",
    packages=["scaled_ops"],
    install_requires=["aot_ops"],
    ext_modules=[AotExtension("scaled_ops.libscaled_ops", ["csrc/scaled_tanh.cpp"])],
    cmdclass={"build_ext": BuildAotExtension},
)
