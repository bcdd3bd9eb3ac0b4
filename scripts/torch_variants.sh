#!/usr/bin/env bash
# Builds examples/torch/gpt_train against the pip-installed torch and runs the bottleneck variants,
# printing each run's dominant diagnosis and the numbers behind it. Needs a GPU and python3 with torch.
#   scripts/torch_variants.sh [OUT_DIR]
source "$(dirname "$0")/common.sh"
out=${1:-$ROOT/torch-variants}
mkdir -p "$out"
install_dependencies
TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
export TORCH_PREFIX
BUILD_DIR=$ROOT/build-torch
(cd "$ROOT" && cmake --preset torch >/dev/null)
cmake --build "$BUILD_DIR" --target steptrace_example_gpt
bin=$BUILD_DIR/examples/gpt_train
run() {
  local name=$1; shift
  rm -f "$out/$name.jsonl"
  STEPTRACE_SUMMARY=0 STEPTRACE_LINE_DETAIL=full "$bin" --log "$out/$name.jsonl" "$@" >"$out/$name.txt" 2>&1 || { echo "$name: failed"; tail -5 "$out/$name.txt"; return; }
  python3 "$ROOT/scripts/torch_variant_summary.py" "$out/$name.jsonl" "$name"
}
run baseline --steps 60
run slowload --steps 40 --loader-ms 40
run pageable --steps 30 --extra-input-mb 512 --pageable
run pinned --steps 30 --extra-input-mb 512
run naive --steps 12 --attention naive --batch 4 --seq 256
run tiny --steps 60 --batch 1 --seq 32 --layers 12 --dmodel 128 --heads 4
