#!/usr/bin/env bash
# One entry point for a fresh machine:
#   ./run.sh demo            set up if needed, then run the demo (examples/demo.py)
#   ./run.sh test [ARGS]     set up if needed, then run the whole test suite (ARGS go to pytest)
#   ./run.sh test --quick    the developer's loop: tests marked slow skipped, one dtype of each kind
# Setting up = a virtual environment in .venv with the pinned requirements, and the package installed in
# editable mode, which builds the bundled kernel libraries. Each step is skipped when nothing it depends on changed.
set -euo pipefail
cd "$(dirname "$0")"

VENV=.venv
PY="$VENV/bin/python"

pick_python() {
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      echo "$candidate"; return 0
    fi
  done
  echo "error: Python 3.11 is required (MindSpore 2.10 and torch 2.14 wheels are installed for it)" >&2
  return 1
}

fingerprint() {  # of everything the installed state depends on
  cat "$@" 2>/dev/null | sha256sum | cut -d' ' -f1
}

setup_env() {
  if [ ! -x "$PY" ]; then
    echo "== creating $VENV"
    "$(pick_python)" -m venv "$VENV"
  fi
  local req_stamp="$VENV/.requirements.sha256"
  local req_hash; req_hash=$(fingerprint requirements.txt)
  if [ "$(cat "$req_stamp" 2>/dev/null)" != "$req_hash" ]; then
    echo "== installing requirements (first time: about 8 GB, most of it torch 2.14's CUDA build)"
    # uv downloads and unpacks in parallel (about 25 s here against pip's 2 min) and resolves the same versions;
    # pip does it where uv cannot be installed or cannot reach an index pip is configured for.
    if "$PY" -m pip install --quiet --disable-pip-version-check "$(grep -E '^uv==' requirements.txt)" &&
       "$VENV/bin/uv" pip install --quiet --python "$PY" -r requirements.txt; then :
    else
      echo "== uv could not install them: pip does"
      "$PY" -m pip install --quiet --disable-pip-version-check -r requirements.txt
    fi
    echo "$req_hash" > "$req_stamp"
  fi
  local build_stamp="$VENV/.build.sha256"
  local build_hash; build_hash=$(fingerprint setup.py pyproject.toml MANIFEST.in aot_ops/extension.py \
    aot_ops/_native/paths.py $(find ms_ext kernels aot_ops/_build aot_ops/_front aot_ops/ascendc -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.py' -o -name '*.cu' \) | sort))
  if [ "$(cat "$build_stamp" 2>/dev/null)" != "$build_hash" ] || [ ! -f aot_ops/lib/libaot_ops_cpu.so.build.json ]; then
    echo "== building the kernel libraries (pip install -e .)"
    "$PY" -m pip install --quiet --disable-pip-version-check --no-build-isolation --no-deps -e .
    echo "$build_hash" > "$build_stamp"
  fi
}

cmd="${1:-}"
shift || true
case "$cmd" in
  demo)
    setup_env
    exec "$PY" examples/demo.py "$@"
    ;;
  test)
    setup_env
    # Groups of tests are shared among worker processes, one per core up to 4 (AOT_OPS_TEST_WORKERS overrides; 0
    # runs in this process), longest first in the order tests/scheduling.py gives them (a group is a file, or one
    # test function of a long file): --no-loadscope-reorder keeps that order instead of xdist's by test count.
    workers="${AOT_OPS_TEST_WORKERS:-$(( $(nproc) < 4 ? $(nproc) : 4 ))}"
    parallel=(-n "$workers" --dist loadgroup --no-loadscope-reorder)
    if [ "${1:-}" = "--quick" ]; then  # the developer's loop: slow tests skipped, one dtype of each kind
      shift
      AOT_OPS_QUICK_TESTS=1 exec "$PY" -m pytest "${parallel[@]}" -m "not slow" "$@"
    fi
    exec "$PY" -m pytest "${parallel[@]}" "$@"
    ;;
  *)
    echo "usage: ./run.sh demo | test [--quick] [pytest args]" >&2
    exit 2
    ;;
esac
