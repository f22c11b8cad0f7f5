#!/usr/bin/env bash
# The GPU job: everything the workbook claims about the GPU, from a bare CUDA machine, in one run.
#
#   tools/gpu_job.sh [OUT_DIR] [STEPS]
#
# OUT_DIR (default $OUT, else build/gpu_job) receives gpu_job.log, the whole log (recorded as
# data/logs/gpu_job_<gpu>.log), publish_<gpu>.tar.gz, the data/ records and the notebooks this run
# rewrote (unpack it over a checkout: `tar xzf publish_h200.tar.gz`), and pid, the job's process
# id (a caller that starts the job in the background waits with `while kill -0 $(cat pid)`;
# `pgrep -f gpu_job.sh` would also match the caller's own command line). The job works in a
# private copy of the checkout, so nothing that touches the checkout meanwhile can spoil it.
# STEPS, a comma list, default all of them:
#   bench      full benchmark sweep, warm and cold L2 -> data/bench_<gpu>.csv, .json,
#              nvfp4_bench_<gpu>.csv, fp8_bench_<gpu>.csv, .json
#   serving    still alone on the GPU: the timing-method test (tests marked `timing`), the serving
#              measurements (PDL in a decode chain, host time per call) -> data/serving_<gpu>.json,
#              the port step by step (notebook 02) -> data/port_steps_<gpu>.csv, .json, and the
#              fused FP8 kernel step by step (notebook 07, checked then timed, ~1 minute)
#              -> data/fp8_steps_<gpu>.csv, .json
#   fp8steps   only that last part of serving (alone on the GPU)
#   decode     the decode-to-mid sweep against the sglang-config baseline and the empty-kernel
#              floors, alone on the GPU (~2 minutes) -> data/decode_<gpu>.csv, .json
#   moe        the MoE layer of notebook 08 (accuracy, bitwise, eager and compiled timings), alone
#              on the GPU (~4 minutes) -> data/moe_layer_<gpu>.csv, .json
#   silufp8    the second port (notebook 09): portcheck over its GPU matrix and the steps in 12
#              processes (which also compile the sweep's kernels), then the timing sweep against
#              helion's production config and torch.compile, alone on the GPU
#              -> data/silu_mul_fp8_*_<gpu>.*
#   tests      the whole test suite on the GPU
#   sanitize   compute-sanitizer memcheck over the kernel tests, then racecheck and initcheck
#   bitwise    port vs helion matrix through portcheck (336 cases, three comparisons each, ~5 min)
#              -> data/bitwise_<gpu>.json; NVFP4 fused == unfused ==
#              reference -> data/nvfp4_bitwise_<gpu>.json; registers/PTX -> data/ptx_<gpu>.json
#   fusion     every op's bits under TRITON_DEFAULT_FP_FUSION=0 and =1, helion and torch.compile
#              beside them -> data/fp_fusion_<gpu>.json (the tests step also reruns the kernel
#              tests with the default off)
#   notebooks  every notebook executed in place, 06 re-measuring its quick sweep into data/
#   notebook06 only notebook 06 (the last phase, alone on the GPU): a call that ran out of time there
#
# Order: timings need the GPU to themselves, so the benchmark and the serving, decode, MoE-layer
# and second-port measurements run first, alone. Then five chains share the GPU (compiling is
# most of their time and the machine has 16 cores): the test suite (then the kernel tests with FP
# fusion off); the sanitizers (memcheck over the kernel test files in four processes, then
# racecheck and initcheck); bitwise then notebooks 04, 05, 07 that show its records; FP fusion;
# notebooks 01-03, 08, 09. Notebook 06 times again, so it runs last, alone. The tarball is
# written after every phase, so a call stopped by its time limit still returns what the finished
# phases wrote.
# Wheels carried in .whl/ (helion and the Jupyter packages, cp312) are installed first, since
# such a machine may have no package index. Every step takes about 25 minutes on one H200; where
# one call to a lent machine may run at most 10 minutes, run it as three calls at the same
# commit, back to back on the warm machine: STEPS=tests,sanitize,bitwise,fusion,notebooks (about
# 8-9 minutes), bench,decode (about 9) and serving,moe,silufp8 (about 9); each call returns its own
# log and tarball (notebook06 alone if a call ran out of time in its last phase). Measured at
# 93ff008 (data/logs/gpu_job_h200_93ff008_*.log): phase 2 with the sanitizers did not end within a
# 600 s call, and `tests` alone took 435 s; run `sanitize` in a call of its own. A lent machine's
# copy of the tree may carry a stale .git: pass INKLING_GIT_COMMIT=<commit> so the records and
# logs name the commit they ran at.
set -uo pipefail
OUT_DIR=${1:-${OUT:-build/gpu_job}}
STEPS=${2:-bench,serving,decode,moe,silufp8,tests,sanitize,bitwise,fusion,notebooks}
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
echo $$ >"$OUT_DIR/pid"
PY=${PYTHON:-python3}
WORK=$(mktemp -d)
# The job runs in a private copy of the checkout: data/ and notebooks/ are rewritten in place,
# and a tool that re-syncs the checkout while the job runs (a second call to a lent machine, an
# editor) must not overwrite or delete them half way (seen 2026-11-30: the benchmark's records
# were deleted by such a sync before the job packed them).
TREE="$WORK/tree"
mkdir -p "$TREE"
tar cf - --exclude=./.venv --exclude=./.venv-pinned --exclude=./build --exclude=./.whl . | tar xf - -C "$TREE"
[ -d .whl ] && ln -s "$PWD/.whl" "$TREE/.whl"
cd "$TREE" || exit 2
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" INKLING_PUBLISH=1 INKLING_REPO="$PWD"
want() { [[ ",$STEPS," == *",$1,"* ]]; }
stamp() { date -u +%H:%M:%S; }
# run NAME CMD...: one step, its output to its own log, its exit status remembered
run() {
  local name=$1
  shift
  local t0=$SECONDS
  echo "--- $name: start $(stamp)" >>"$WORK/$name.log"
  # each line also goes, prefixed by the step's name, to $OUT_DIR/steps_live.log: a call stopped at
  # its time limit still returns what every step had printed (the per-step logs are shown at the
  # end of each phase only)
  "$@" 2>&1 | tee -a "$WORK/$name.log" | sed -u "s/^/[$name] /" >>"$OUT_DIR/steps_live.log"
  local rc=${PIPESTATUS[0]}
  echo "--- $name: exit $rc after $((SECONDS - t0)) s" >>"$WORK/$name.log"
  echo "$name $rc $((SECONDS - t0))" >>"$WORK/status"
  return 0
}
show() { for name in "$@"; do [ -f "$WORK/$name.log" ] && { echo; echo "=== $name"; grep -v -E "it/s\]$|nb/s\]$|s/it\]$" "$WORK/$name.log"; }; done; }
PYTEST=("$PY" -m pytest -q -p no:cacheprovider -p no:warnings)
KERNEL_TESTS=(tests/test_silu_and_mul.py tests/test_nvfp4.py tests/test_fp8.py)
# every test file that hands the ops outputs, offsets, scale rows and layouts: memcheck runs them
# whole (four processes at once, one sanitizer each), less the tests that capture a CUDA graph
MEMCHECK_GROUPS=("tests/test_silu_and_mul.py tests/test_fuzz.py tests/test_safety.py"
  "tests/test_nvfp4.py tests/test_guarded_fuzz.py tests/test_ops.py"
  "tests/test_fp8.py" "tests/test_fp8_layouts.py tests/test_moe_layer.py")
# left to the test step: CUDA-graph captures (a cudaMalloc inside a capture), compiles and timing
# code, and the exhaustive proofs and > 2**31-element inputs (billions of instrumented threads)
MEMCHECK_SKIP="not capture and not graph and not compile and not host_overhead and not bench and not exhaustive"
MEMCHECK_SKIP+=" and not all_fp32 and not every_ and not large and not numel_above_int32 and not 31_bit_limit"
notebooks() { $PY tools/run_notebooks.py --in-place "$@"; }

{
echo "=== environment ($(stamp)); steps: $STEPS"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
$PY -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'the GPU job needs a CUDA GPU')" || exit 2
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
$PY -m inkling_workbook info
# The published stack (constraints.txt) against what this machine runs: records name their own
# versions either way; this line says whether they are the published ones.
$PY - <<'PYEOF'
import importlib.metadata as md
pins = dict(line.split("==") for line in open("constraints.txt").read().split("\n") if "==" in line and not line.startswith("#"))
have = {}
for name in pins:
    try:
        have[name] = md.version(name)
    except md.PackageNotFoundError:
        have[name] = None
off = {k: (pins[k], have[k]) for k in pins if have[k] is None or have[k].split("+")[0] != pins[k]}
print("stack: as constraints.txt" if not off else f"stack differs from constraints.txt (pinned, here): {off}")
PYEOF
GPU=$($PY -c "from inkling_workbook.measure import provenance; print(provenance.device_slug())")
START=$SECONDS

# pack: the records and notebooks written so far, into the tarball (rewritten after every phase)
pack() { tar czf "$OUT_DIR/publish_$GPU.tar.gz" data notebooks/*.ipynb; }

if want bench || want serving || want fp8steps || want decode || want moe || want silufp8; then
  echo "=== phase 1, alone on the GPU: benchmark, timing-method test, serving measurements ($(stamp))"
  want bench && run bench $PY -m inkling_workbook bench --cold-l2 --no-tune
  if want serving; then
    run timing "${PYTEST[@]}" -rs -s -m timing tests
    run serving $PY -m inkling_workbook serving
    run steps $PY -m inkling_workbook steps
  fi
  (want serving || want fp8steps) && run fp8steps $PY -m inkling_workbook fp8-steps --device cuda
  want decode && run decode $PY -m inkling_workbook decode
  want moe && run moe $PY -m inkling_workbook moe-layer
  # the check, the steps and the sweep's compiles in 12 processes, then the timing alone
  want silufp8 && run silufp8 $PY -m inkling_workbook silu-mul-fp8 --jobs 12 --no-progress
  show bench timing serving steps fp8steps decode moe silufp8
  pack
fi

echo "=== phase 2, sharing the GPU: tests | sanitizers | bitwise + notebooks 04, 05, 07 | fusion | notebooks ($(stamp))"
# compiling is most of the suite's time: spread it over 8 processes when pytest-xdist is there
XDIST=()
$PY -c "import xdist" 2>/dev/null && XDIST=(-n 8)
(
  want tests && run tests "${PYTEST[@]}" "${XDIST[@]}" -rs -m "not timing" tests
  # the kernel tests again with Triton's FP fusion default off (the package pins it on every launch)
  want tests && run tests_fusion_off env TRITON_DEFAULT_FP_FUSION=0 "${PYTEST[@]}" "${XDIST[@]}" -rs -m "not timing" \
    "${KERNEL_TESTS[@]}"
) &
(
  if want sanitize; then
    # Without PYTORCH_NO_CUDA_MEMORY_CACHING the caching allocator hides out-of-bounds accesses; with
    # it, an allocation inside a CUDA-graph capture is a cudaMalloc the capture forbids: the tests
    # that capture a graph run in the test step, not under memcheck. memcheck takes the test files
    # whole (every out=, scale_rows, offsets and layout path), in four processes at once.
    export PYTORCH_NO_CUDA_MEMORY_CACHING=1
    memcheck_all() {
      local pids=() i=0 rc=0
      for group in "${MEMCHECK_GROUPS[@]}"; do
        i=$((i + 1))
        # shellcheck disable=SC2086
        timeout 540 compute-sanitizer --tool memcheck --print-limit 20 --error-exitcode 86 "${PYTEST[@]}" -rs \
          -m "not timing" -k "$MEMCHECK_SKIP" $group \
          >"$WORK/memcheck_$i.log" 2>&1 &
        pids+=($!)
      done
      for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
      for j in $(seq 1 "$i"); do echo "--- memcheck group $j: ${MEMCHECK_GROUPS[$((j - 1))]}"; tail -25 "$WORK/memcheck_$j.log"; done
      return $rc
    }
    run memcheck memcheck_all
    for tool in racecheck initcheck; do
      run $tool timeout 200 compute-sanitizer --tool $tool --print-limit 20 "${PYTEST[@]}" "${KERNEL_TESTS[@]}" \
        -k "layouts_bitwise or odd_widths and 130 or fused_equals and 768 and nonuniform"
    done
  fi
) &
(
  if want bitwise; then
    run bitwise $PY -m inkling_workbook check --no-progress
    run nvfp4_bitwise $PY -m inkling_workbook check --nvfp4 --no-progress
    run ptx env TRITON_CACHE_DIR="$WORK/ptx_cache" $PY tools/ptx_report.py "data/ptx_$GPU.json"
  fi
  want notebooks && run notebooks_04_05_07 notebooks notebooks/04_*.ipynb notebooks/05_*.ipynb notebooks/07_*.ipynb
) &
# FP fusion: every op's bits under both settings of Triton's default, helion and compile beside
( want fusion && run fusion $PY -m inkling_workbook fusion ) &
( want notebooks && run notebooks_01_03_08 notebooks notebooks/01_*.ipynb notebooks/02_*.ipynb notebooks/03_*.ipynb \
  notebooks/08_*.ipynb notebooks/09_*.ipynb ) &
wait
show tests tests_fusion_off memcheck racecheck initcheck bitwise nvfp4_bitwise ptx fusion notebooks_01_03_08 notebooks_04_05_07
pack

if want notebooks || want notebook06; then
  echo "=== phase 3, alone on the GPU: notebook 06 re-measures its quick sweep ($(stamp))"
  run notebooks_06 notebooks notebooks/06_*.ipynb
  show notebooks_06
fi

echo
echo "=== summary ($(stamp), $((SECONDS - START)) s after setup): step, exit status, seconds"
cat "$WORK/status"
FAILED=$(awk '$2 != 0' "$WORK/status" | wc -l)
echo "steps failed: $FAILED"
pack
echo "wrote $OUT_DIR/publish_$GPU.tar.gz"
[ "$FAILED" = 0 ]
} 2>&1 | tee "$OUT_DIR/gpu_job.log"
rc=${PIPESTATUS[0]}
rm -rf "$WORK"
exit "$rc"
