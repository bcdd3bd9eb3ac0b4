#!/usr/bin/env bash
# The Python package as docs/python.md says to install it: `python3 -m venv
# --system-site-packages V && V/bin/pip install --no-build-isolation ./python` (the interpreter's
# setuptools, wheel, pybind11 and torch visible), then the tests with that interpreter. With cpu, also
# the check that a build missing a tool names it at pip's metadata step (a plain venv without `wheel`).
#   tests/checks/python_check.sh BUILD_DIR cpu    python/tests/test_steptrace.py, test_report.py, test_watch.py,
#                                                 test_cross_rank.py
#                                            (CTest python_cpu; the last two need torch: Debian's CPU-only
#                                            python3-torch, gloo for the two ranks of test_cross_rank)
#   tests/checks/python_check.sh BUILD_DIR gpu    python/tests/test_torch_gpu.py, test_callbacks_gpu.py, test_watch_gpu.py (CTest
#                                                 python_gpu; torch, a GPU; Lightning and transformers where installed)
# PYTHON picks the interpreter (default: python3 on PATH). Where pip cannot build (no setuptools, as on
# a bare torch venv), the extension is built with CMake alone and put on PYTHONPATH; the output says which.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd)
what=$2
py=${PYTHON:-python3}
venv=$build/python-venv
# A dependency bundle (machines without package access, see docs/build.md) is where CMake finds spdlog.
if [[ -d $ROOT/.deps/usr ]]; then
  export CMAKE_PREFIX_PATH=$ROOT/.deps/usr${CMAKE_PREFIX_PATH:+;$CMAKE_PREFIX_PATH}
  export STEPTRACE_CMAKE_ARGS="-DCMAKE_PREFIX_PATH=$CMAKE_PREFIX_PATH ${STEPTRACE_CMAKE_ARGS:-}"
fi
rm -rf "$venv" "$ROOT/python/build" "$ROOT/python/steptrace.egg-info"
# The interpreter's own packages stay visible. Where the interpreter is itself a venv (the GPU machine's
# torch venv), a venv made from it sees only the base's packages: the parent venv's site-packages go in
# through a .pth file; a user would install into that venv directly.
parent_pth() {
  "$py" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' || return 0
  "$py" -c 'import site; print("\n".join(site.getsitepackages()))' > "$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')/_parent.pth"
}
if "$py" -m venv --system-site-packages "$venv" 2>/dev/null && parent_pth &&
   "$venv/bin/pip" install --no-build-isolation -q "$ROOT/python"; then
  echo "python_check: installed with pip into $venv"
  run=("$venv/bin/python")
  export PYCHECK_INSTALLED=pip
else
  echo "python_check: pip could not build here; building python/ with CMake alone"
  cmake -S "$ROOT/python" -B "$build/python-cmake" -DPython_EXECUTABLE="$(command -v "$py")" \
        -DCMAKE_BUILD_TYPE=Release ${CMAKE_PREFIX_PATH:+-DCMAKE_PREFIX_PATH="$CMAKE_PREFIX_PATH"} >/dev/null
  cmake --build "$build/python-cmake" --target _steptrace -j"$(nproc)" >/dev/null
  rm -rf "$build/python-pkg"
  mkdir -p "$build/python-pkg"
  cp -r "$ROOT"/python/steptrace "$build/python-pkg/"  # the package as setup.py installs it
  find "$build/python-pkg" -name __pycache__ -prune -exec rm -rf {} +
  cp "$build"/python-cmake/_steptrace*.so "$build/python-pkg/steptrace/"
  export PYCHECK_INSTALLED=cmake
  export PYTHONPATH=$build/python-pkg${PYTHONPATH:+:$PYTHONPATH}
  run=("$py")
fi
rm -rf "$ROOT/python/build" "$ROOT/python/steptrace.egg-info"
# The extension exports Python's entry point only (python/src/exports.map): anything more, such as a
# statically linked libstdc++, would be bound in place of the process's own by libraries loaded later.
so=$("${run[@]}" -c 'import steptrace._steptrace as m; print(m.__file__)' | tail -n 1)
command -v nm >/dev/null || { echo "python_check: nm (binutils) is needed to check the extension's exports" >&2; exit 1; }
symbols=$(nm -D --defined-only "$so")  # a failing nm ends the script (set -e)
# Symbol names without a version suffix, version nodes (type A) left aside.
names=$(awk '$2 != "A" {sub(/@.*/, "", $NF); print $NF}' <<<"$symbols")
if ! grep -qx 'PyInit__steptrace' <<<"$names"; then
  echo "python_check: $so does not export PyInit__steptrace" >&2
  exit 1
fi
exported=$(grep -vx 'PyInit__steptrace' <<<"$names" || true)
if [[ -n $exported ]]; then
  echo "python_check: $so exports $(wc -l <<<"$exported") symbols besides PyInit__steptrace, e.g.:" >&2
  head -5 <<<"$exported" >&2
  exit 1
fi
echo "python_check: $so exports PyInit__steptrace only"
# A plain venv (no system packages) whose setuptools predates 70.1 and has no `wheel`: the build must say
# so at pip's metadata step, not fail with "invalid command 'bdist_wheel'".
if [[ $what == cpu ]]; then
  plain=$build/python-venv-plain
  rm -rf "$plain"
  if "$py" -m venv "$plain" 2>/dev/null &&
     "$plain/bin/python" -c 'import setuptools, sys; v = tuple(int(x) for x in setuptools.__version__.split(".")[:2]); sys.exit(0 if v < (70, 1) else 1)' 2>/dev/null &&
     ! "$plain/bin/python" -c 'import wheel' 2>/dev/null; then
    if out=$("$plain/bin/pip" install --no-build-isolation "$ROOT/python" 2>&1); then
      echo "python_check: a build without wheel succeeded in $plain" >&2; exit 1
    fi
    if ! grep -q "Preparing metadata" <<<"$out" || ! grep -q "needs the wheel package" <<<"$out"; then
      echo "python_check: a build without wheel did not name it at the metadata step:" >&2
      tail -15 <<<"$out" >&2; exit 1
    fi
    echo "python_check: a plain venv without wheel is told so at pip's metadata step"
  else
    echo "python_check: skipped the missing-wheel check (this interpreter's plain venv has no setuptools < 70.1 without wheel)"
  fi
  rm -rf "$plain" "$ROOT/python/build" "$ROOT/python/steptrace.egg-info"
fi
cd "$build"
case $what in
  cpu) "${run[@]}" "$ROOT/python/tests/test_steptrace.py" && "${run[@]}" "$ROOT/python/tests/test_report.py" &&
       "${run[@]}" "$ROOT/python/tests/test_watch.py" &&
       "${run[@]}" "$ROOT/python/tests/test_cross_rank.py" ;;
  gpu) "${run[@]}" "$ROOT/python/tests/test_torch_gpu.py" "$build" &&
       "${run[@]}" "$ROOT/python/tests/test_callbacks_gpu.py" "$build/callbacks" &&
       "${run[@]}" "$ROOT/python/tests/test_watch_gpu.py" "$build/watch_gpu" ;;
  *) echo "usage: tests/checks/python_check.sh BUILD_DIR cpu|gpu" >&2; exit 2 ;;
esac
