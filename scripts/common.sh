# Shared by scripts/test.sh and scripts/demo.sh: install what is missing, configure, build.
# Sourced, not run. Honours BUILD_DIR (default: the preset's folder) and CMAKE_BUILD_TYPE (default: the preset's).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[[ -n ${BUILD_DIR:-} ]] && BUILD_DIR_SET=1
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
export PATH=/usr/local/cuda/bin:$PATH

DEBIAN_PACKAGES=(cmake g++ catch2 libspdlog-dev nlohmann-json3-dev prometheus prometheus-node-exporter python3 sqlite3
                 chromium python3-dev python3-venv python3-pip python3-setuptools pybind11-dev python3-pybind11
                 python3-torch)  # CPU-only torch 1.13: python/tests/test_watch.py

install_dependencies() {
  # A bundle made by ../shared/tools/bundle-deps (machines without package access) wins.
  if [[ -d "$ROOT/.deps/usr" ]]; then
    PREFIX_ARGS=(-DCMAKE_PREFIX_PATH="$ROOT/.deps/usr")
    export LD_LIBRARY_PATH="$ROOT/.deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "steptrace: using dependencies bundled in $ROOT/.deps/usr"
    return
  fi
  PREFIX_ARGS=()
  local missing=()
  for p in "${DEBIAN_PACKAGES[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "steptrace: installing ${missing[*]}"
    local sudo=""
    [[ $(id -u) -ne 0 ]] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  if ! command -v nvcc >/dev/null; then
    echo "steptrace: the CUDA toolkit (nvcc, cudart, CUPTI, NVTX) is needed at /usr/local/cuda" >&2
    exit 1
  fi
}

# NCCL for examples/dp_train: the CUDA toolkit's, else the wheel PyTorch installs (nvidia.nccl).
# Sets NCCL_ARGS (for configure_and_build) and puts the wheel's library on LD_LIBRARY_PATH.
find_nccl() {
  NCCL_ARGS=()
  [[ -f /usr/local/cuda/include/nccl.h ]] && return
  local root
  root=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true)
  if [[ -n $root ]]; then
    NCCL_ARGS=(-DNCCL_ROOT="$root")
    export LD_LIBRARY_PATH=$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
}

# configure_and_build PRESET [cmake -D arguments...]: configures with a preset of CMakePresets.json
# (ci, gpu, bench, torch) and builds. The build goes to BUILD_DIR when the caller set it, else to the
# preset's folder, and BUILD_DIR then names that folder.
configure_and_build() {
  configure_only "$@"
  cmake --build "$BUILD_DIR" -j"$(nproc)" ${BUILD_TARGETS:+--target $BUILD_TARGETS}
}
# configure_only PRESET [cmake -D arguments...]: the same without the build.
configure_only() {
  local preset=$1; shift
  if [[ -z ${BUILD_DIR_SET:-} ]]; then
    case $preset in
      bench | torch | asan | tsan) BUILD_DIR=$ROOT/build-$preset ;;
      *) BUILD_DIR=$ROOT/build ;;
    esac
  fi
  command -v ninja >/dev/null && export CMAKE_GENERATOR=Ninja
  (cd "$ROOT" && cmake --preset "$preset" -B "$BUILD_DIR" ${CMAKE_BUILD_TYPE:+-DCMAKE_BUILD_TYPE=$CMAKE_BUILD_TYPE} \
    "${PREFIX_ARGS[@]}" "$@" >/dev/null)
}
