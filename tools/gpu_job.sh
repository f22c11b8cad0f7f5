#!/usr/bin/env bash
# The GPU job: every check the workbook makes on the GPU, from a bare CUDA machine.
#
#   tools/gpu_job.sh [OUT_DIR] [STEPS]
#
# OUT_DIR (default $OUT, else build/gpu_job) receives gpu_job.log, the whole log (recorded as
# data/logs/gpu_job_<gpu>_<commit>.log), steps_live.log (every step's output as it is printed),
# publish_<gpu>.tar.gz, the data/ records and the notebooks this run rewrote (unpack it over a
# checkout: `tar xzf publish_h200.tar.gz`), and pid, the job's process id (a caller that starts
# the job in the background waits with `while kill -0 $(cat pid)`). The job works in a private
# copy of the checkout, so nothing that touches the checkout meanwhile can spoil it.
#
# STEPS, a comma list; `check` (the default) is the GPU job, `publish` the measurements:
#   check      = tests,bitwise,smoke,notebook06,sanitize,notebooks
#   publish    = bench,bench_quant,serving,nvfp4steps,decode,moe,silufp8,rmsquant,fusion,chain
# The GPU job (`check`) is what an issue that changes code the GPU runs must pass at the commit
# that resolves it. It verifies; it does not write the published timings. Those are the
# `publish` steps, run at a commit whose kernels are the head's when numbers are republished:
# the full sweeps take about 20 minutes of GPU time on their own, more than a lent machine's
# session holds beside the checks. Every measurement command still runs in the GPU job, on a
# small grid into a scratch folder (`smoke`), so a change that breaks one fails the job.
#
# The check steps:
#   tests      the whole test suite on the GPU (16 processes), then the kernel tests again with
#              Triton's FP fusion default off (the package pins it on every launch)
#   bitwise    port vs helion matrix through portcheck (336 cases, three comparisons each)
#              -> data/bitwise_<gpu>.json; NVFP4 fused == unfused == reference
#              -> data/nvfp4_bitwise_<gpu>.json; registers/PTX -> data/ptx_<gpu>.json
#   smoke      alone on the GPU: the timing-method tests (marked `timing`), then every measurement
#              command on a small grid into a scratch folder that is not packed: serving, the port
#              steps, the FP8 steps (each step checked against the kernel, then timed), the
#              decode sweep (its first shapes), the MoE layer at M = 16 (accuracy, bitwise, eager
#              and compiled), the second port and the third (`--quick`: portcheck over each quick
#              matrix, each timing sweep on a few of its shapes), the server chain (`--quick`: two shapes);
#              a publish step in the same STEPS runs its command whole instead of the smoke's
#   notebook06 notebook 06 alone on the GPU (it re-measures its quick sweep into data/)
#   sanitize   compute-sanitizer memcheck over the kernel test files in four processes, then
#              racecheck and initcheck
#   notebooks  every notebook but 06 executed in place (the compiled path of every chapter)
# The publish steps (the timings each alone on the GPU):
#   bench      the silu_and_mul sweep, warm and cold L2, its torch.compile columns compiled fresh per
#              shape (default mode; max-autotune-no-cudagraphs on the 3 headline shapes) -> data/bench_<gpu>.csv,
#              .json (estimated 380-520 s: a call of its own)
#   bench_quant the NVFP4 and FP8 sweeps, warm and cold L2, compile columns as in bench (max-autotune on
#              2 NVFP4 shapes and 3 FP8 cases) -> data/nvfp4_bench_<gpu>.csv, .json, fp8_bench_<gpu>.csv,
#              .json (estimated 325-475 s)
#   serving    the timing-method tests, the serving measurements (PDL in a decode chain, host
#              time per call) -> data/serving_<gpu>.json, the port step by step (notebook 02)
#              -> data/port_steps_<gpu>.csv, .json, and the fused FP8 kernel step by step
#              (notebook 07) -> data/fp8_steps_<gpu>.csv, .json
#   fp8steps   only that last part of serving
#   nvfp4steps the fused NVFP4 kernel step by step (notebook 05): each step checked bitwise on the GPU,
#              then timed -> data/nvfp4_steps_<gpu>.csv, .json (not yet run: estimated 60-120 s)
#   decode     the decode-to-mid sweep and the empty-kernel floors -> data/decode_<gpu>.csv, .json
#   moe        the MoE layer of notebook 08 -> data/moe_layer_<gpu>.csv, .json
#   silufp8    the second port (notebook 09): portcheck over its GPU matrix and the steps in 12
#              processes, then the timing sweep -> data/silu_mul_fp8_*_<gpu>.*
#   rmsquant   the third port (notebook 10): portcheck over its GPU matrix and the steps in 12
#              processes, then the timing sweep -> data/rms_norm_quant_*_<gpu>.*
#   chain      the activation between two GEMMs launched without PDL (bf16 chain, FP8 chain; port
#              with and without PDL, the anchors, the GEMMs alone) -> data/server_chain_<gpu>.csv, .json
#   fusion     every op's bits under TRITON_DEFAULT_FP_FUSION=0 and =1, helion and torch.compile
#              beside them -> data/fp_fusion_<gpu>.json (the GPU job's
#              tests check the package's bits under both settings; this step writes the record)
#
# Order: timings need the GPU to themselves, so phase 1 (smoke and the publish steps) runs alone.
# Then up to five chains share the GPU (compiling is most of their time and the machine has 16
# cores): the test suite; the sanitizers; bitwise then notebooks 04, 05, 07; FP fusion; notebooks
# 01-03, 08, 09. Notebook 06 times again, so it runs last, alone. The tarball is written after
# every phase, so a call stopped by its time limit still returns what the finished phases wrote.
#
# One call to a lent machine may run at most 10 minutes: run the GPU job as three calls at the
# same commit, back to back on the warm machine: tests,bitwise (about 520 s);
# sanitize,notebooks,notebook06 (about 340 s, then notebook 06 alone, about 150 s); smoke (460 s
# on 2026-12-03 when the second port's --quick checked its whole matrix; less since). A publish
# step goes in a call of its own (a call cut at its limit loses the step it was in): `smoke,X`
# runs X's command whole in place of its smoke, but only where both fit one call (smoke with the
# full third port does not: about 300 + 300-400 s). Wheels carried in .whl/ (`make wheels`: helion and
# the Jupyter packages, cp312) are installed first, since such a machine may have no package index; the other projects'
# kernels the anchor tests and benchmarks load travel in .anchors/ (`make anchors`, about 300 kB; the
# job stops with exit 2 when they are missing). A lent machine's
# copy of the tree may carry a stale .git: pass INKLING_GIT_COMMIT=<commit> so the records and
# logs name the commit they ran at.
set -uo pipefail
OUT_DIR=${1:-${OUT:-build/gpu_job}}
STEPS=${2:-check}
STEPS=${STEPS//check/tests,bitwise,smoke,notebook06,sanitize,notebooks}
STEPS=${STEPS//publish/bench,bench_quant,serving,nvfp4steps,decode,moe,silufp8,rmsquant,fusion,chain}
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
# the other projects' kernels (sglang, vllm) must have travelled in .anchors/: without them the
# anchor tests skip and every anchor column of the sweeps is left out, so the job stops here
$PY - <<'PYEOF' || exit 2
import sys
from inkling_workbook.measure import anchors as A
missing = [f"{d}=={A.ANCHORS[d]['version']}" for d in A.ANCHORS if not A.is_fetched(d)]
if missing:
    sys.exit(f"the anchors {', '.join(missing)} are not under .anchors/: run `make anchors` and carry .anchors")
print("anchors: " + ", ".join(f"{d}=={A.ANCHORS[d]['version']}" for d in A.ANCHORS))
PYEOF
START=$SECONDS

# pack: the records and notebooks written so far, into the tarball (rewritten after every phase)
pack() { tar czf "$OUT_DIR/publish_$GPU.tar.gz" data notebooks/*.ipynb; }

if want smoke || want bench || want bench_quant || want serving || want fp8steps || want nvfp4steps || want decode || want moe || want silufp8 || want rmsquant || want chain; then
  echo "=== phase 1, alone on the GPU: $(for s in smoke bench bench_quant serving fp8steps nvfp4steps decode moe silufp8 rmsquant chain; do want $s && printf '%s ' $s; done)($(stamp))"
  if want smoke; then
    # every measurement command on a small grid; what they write goes to a scratch folder, never
    # to data/ (a smoke record is not a published number)
    SMOKE="$WORK/smoke"
    mkdir -p "$SMOKE/data"
    # a publish step asked for in the same call runs that command whole: its smoke is left out
    run timing "${PYTEST[@]}" -rs -s -m timing tests
    want serving || run smoke_serving $PY -m inkling_workbook serving --out "$SMOKE/data/serving.json"
    want serving || run smoke_steps $PY -m inkling_workbook steps --out "$SMOKE/data/port_steps.csv"
    want serving || want fp8steps \
      || run smoke_fp8steps $PY -m inkling_workbook fp8-steps --device cuda --out "$SMOKE/data/fp8_steps.csv"
    want decode || run smoke_decode $PY -m inkling_workbook decode --out "$SMOKE" --budget-s 5 --allow-skips
    want moe || run smoke_moe $PY -m inkling_workbook moe-layer --out "$SMOKE" --ms 16 --no-progress
    want silufp8 || run smoke_silufp8 $PY -m inkling_workbook silu-mul-fp8 --out "$SMOKE" --quick --jobs 12 --no-progress
    want rmsquant || run smoke_rmsquant $PY -m inkling_workbook rms-norm-quant --out "$SMOKE" --quick --jobs 12 \
      --no-progress
    want chain || run smoke_chain $PY -m inkling_workbook server-chain --quick --no-progress \
      --allow-skips --out "$SMOKE/data/server_chain.csv"
    show timing smoke_serving smoke_steps smoke_fp8steps smoke_decode smoke_moe smoke_silufp8 smoke_rmsquant smoke_chain
  fi
  # a publish step's records are packed as soon as it ends: a call stopped at its time limit still
  # returns every step that finished
  prun() { run "$@"; pack; }
  # each part within one call of 585 s: no max-autotune compile starts past its budget (recorded)
  want bench && prun bench $PY -m inkling_workbook bench --cold-l2 --no-tune --part silu --max-autotune-budget-s 300
  want bench_quant && prun bench_quant $PY -m inkling_workbook bench --cold-l2 --no-tune --part quant \
    --max-autotune-budget-s 380
  if want serving; then
    want smoke || run timing "${PYTEST[@]}" -rs -s -m timing tests
    prun serving $PY -m inkling_workbook serving
    prun steps $PY -m inkling_workbook steps
  fi
  (want serving || want fp8steps) && prun fp8steps $PY -m inkling_workbook fp8-steps --device cuda
  want nvfp4steps && prun nvfp4steps $PY -m inkling_workbook nvfp4-steps --device cuda
  want decode && prun decode $PY -m inkling_workbook decode
  want moe && prun moe $PY -m inkling_workbook moe-layer
  # the check, the steps and the sweep's compiles in 12 processes, then the timing alone
  want silufp8 && prun silufp8 $PY -m inkling_workbook silu-mul-fp8 --jobs 12 --no-progress
  want rmsquant && prun rmsquant $PY -m inkling_workbook rms-norm-quant --jobs 12 --no-progress
  want chain && prun chain $PY -m inkling_workbook server-chain --no-progress
  show bench bench_quant serving steps fp8steps nvfp4steps decode moe silufp8 rmsquant chain
  pack
fi

if want tests || want sanitize || want bitwise || want fusion || want notebooks; then
  echo "=== phase 2, sharing the GPU: tests | sanitizers | bitwise + notebooks 04, 05, 07 | fusion | notebooks ($(stamp))"
  # compiling is most of the suite's time: spread it over 16 processes when pytest-xdist is there
  XDIST=()
  $PY -c "import xdist" 2>/dev/null && XDIST=(-n 16)
  # the tests read the committed records (test_results compares the generated tables with data/):
  # they run in a copy of the tree taken before the bitwise and fusion steps rewrite data/ here
  TESTS_TREE="$WORK/tests_tree"
  want tests && cp -a "$TREE" "$TESTS_TREE"
  (
    if want tests; then
      cd "$TESTS_TREE" || exit 2
      export PYTHONPATH=${PYTHONPATH/#$TREE/$TESTS_TREE} INKLING_REPO="$TESTS_TREE"
    fi
    want tests && run tests "${PYTEST[@]}" "${XDIST[@]}" -rs --durations=15 -m "not timing" tests
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
          timeout 420 compute-sanitizer --tool memcheck --print-limit 20 --error-exitcode 86 "${PYTEST[@]}" -rs \
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
    notebooks/08_*.ipynb notebooks/09_*.ipynb notebooks/10_*.ipynb notebooks/11_*.ipynb ) &
  wait
  show tests tests_fusion_off memcheck racecheck initcheck bitwise nvfp4_bitwise ptx fusion notebooks_01_03_08 notebooks_04_05_07
  pack
fi

if want notebook06; then
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
