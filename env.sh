# source env.sh: a shell for compiling aot kernels by hand (g++ ... -ltorch_cpu) and running them.
# The libraries aot_ops builds carry an rpath to torch and need none of this; a hand-made .so without an rpath
# does, or it only loads after `import torch`.
_aot_root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -x "$_aot_root/.venv/bin/python" ]; then
  export VIRTUAL_ENV="$_aot_root/.venv"
  export PATH="$VIRTUAL_ENV/bin:$PATH"   # python, pip, ninja
fi
_torch_lib="$(python -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' 2>/dev/null)"
if [ -n "$_torch_lib" ]; then
  export TORCH_LIB="$_torch_lib"
  export LD_LIBRARY_PATH="$_torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # Torch-facing code must use torch's C++ ABI flag (MindSpore's is 0, torch 2.14's is 1).
  export TORCH_CXX11_ABI="$(python -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')"
  export MS_EXT_INCLUDE="$_aot_root/ms_ext/include"
  echo "torch lib: $TORCH_LIB (on LD_LIBRARY_PATH); compile torch-facing code with -D_GLIBCXX_USE_CXX11_ABI=$TORCH_CXX11_ABI -I\$MS_EXT_INCLUDE"
else
  echo "env.sh: torch is not installed in this environment (run ./run.sh test once to set it up)" >&2
fi
unset _aot_root _torch_lib
