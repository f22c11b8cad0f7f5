#!/usr/bin/env bash
# The GPU job: everything the workbook claims about the GPU, from a bare CUDA machine, in one go.
#   tools/gpu_job.sh [OUT_DIR] [STEPS]   OUT_DIR default build/gpu_job ($OUT on the device tool);
#   STEPS: comma list of tests,sanitize,bitwise,bench,tune,notebooks (default tests,bitwise,bench;
#   each fits a 10-minute call).
# Steps: install the wheels carried in .whl/ (helion 1.4.0 and what the machine lacks), the full
# test suite on the GPU, compute-sanitizer memcheck over the GPU kernel tests, the bitwise
# matrices (silu_and_mul port vs helion; NVFP4 fused == unfused == reference), registers/PTX of
# one case, then the benchmark sweep. Results: at most 8 files in OUT_DIR.
set -uo pipefail
OUT_DIR=${1:-${OUT:-build/gpu_job}}
mkdir -p "$OUT_DIR"
STEPS=${2:-tests,bitwise,bench}
LOG="$OUT_DIR/gpu_job_${STEPS//,/_}.log"
want() { [[ ",$STEPS," == *",$1,"* ]]; }
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
{
step "environment"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
python3 -m inkling_kernels info

if want tests; then
step "pytest (GPU)"
python3 -m pytest tests -q -p no:cacheprovider -p no:warnings 2>&1 | tail -n 25
echo "pytest exit: ${PIPESTATUS[0]}"

step "compute-sanitizer memcheck (PYTORCH_NO_CUDA_MEMORY_CACHING=1, else it proves nothing)"
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 300 compute-sanitizer --tool memcheck --print-limit 20 \
  python3 -m pytest tests/test_silu_and_mul.py tests/test_nvfp4.py -q -p no:cacheprovider -p no:warnings \
  -k "odd_widths or small_shared and 768 or layouts or fused_equals and 768 and not uniform or strided or zero_rows" 2>&1 | tail -n 8
fi

if want sanitize; then
step "compute-sanitizer racecheck and initcheck (shared-memory de-interleave, masked tails, NVFP4)"
for tool in racecheck initcheck; do
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 200 compute-sanitizer --tool $tool --print-limit 20 \
    python3 -m pytest tests/test_silu_and_mul.py tests/test_nvfp4.py -q -p no:cacheprovider -p no:warnings \
    -k "layouts_bitwise or odd_widths and 130 or fused_equals and 768 and nonuniform" 2>&1 | tail -n 4
done
fi

if want bitwise; then
step "bitwise: port vs helion, full matrix"
python3 -m inkling_kernels check --out "$OUT_DIR/bitwise_h200.json" --no-progress 2>&1 | tail -n 3
step "bitwise: NVFP4 fused == unfused == reference"
python3 -m inkling_kernels check --nvfp4 --out "$OUT_DIR/nvfp4_bitwise_h200.json" --no-progress 2>&1 | tail -n 2

step "registers and PTX of one case"
TRITON_CACHE_DIR=/tmp/ptx_cache python3 tools/ptx_report.py "$OUT_DIR/ptx_h200.json" 2>&1 | tail -n 6
fi

if want tune; then
step "tile sweeps only"
timeout 500 python3 -c "from inkling_kernels import bench; bench.tune_only('$OUT_DIR/tune_h200.csv')" 2>&1 | tail -c 600
fi

if want notebooks; then
step "notebooks executed in place on the GPU"
python3 tools/run_notebooks.py --in-place ${NOTEBOOKS:-notebooks/0*.ipynb} 2>&1 | grep -v "nb/s\]$" | tail -n 8
tar czf "$OUT_DIR/notebooks_gpu.tar.gz" notebooks/0*.ipynb
fi

if want bench; then
step "benchmark"
python3 -m inkling_kernels bench --cold-l2 --out "$OUT_DIR/bench_h200.csv" 2>&1 | grep -v "it/s\]$" | tail -n 5
fi
step "done"
} 2>&1 | tee "$LOG"
