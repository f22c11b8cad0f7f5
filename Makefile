# The workbook's two commands (README): `make run` and `make test`. Each sets itself up.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NOTEBOOKS := $(sort $(wildcard notebooks/*.ipynb))
export PYTHONUNBUFFERED := 1
# Without PIN the package's ranges resolve as a newcomer's install does (the newest triton the
# index serves); PIN=1 installs the published stack of constraints.txt (torch aside) instead.
# `make test-pinned` runs the kernel tests under that stack in a venv of its own.
PIN ?=
PINNED := .venv-pinned
PINNED_TESTS := tests/test_silu_and_mul.py tests/test_nvfp4.py tests/test_fp8.py tests/test_helion_original.py \
  tests/test_import.py tests/test_fp_fusion.py tests/test_blackwell_compile.py tests/test_portcheck_cpu.py \
  tests/test_portcheck_examples.py -k "not fused_equals or (768 and nonuniform) or (plain and gate)"
# `make lab` as root (containers, lent GPU machines) needs Jupyter's --allow-root; LAB_ARGS adds flags.
LAB_ARGS ?=
LAB_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)
STACK = -c "import sys, torch, triton; print('stack:', 'python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"

.PHONY: run test test-pinned lint unit nbval lab figures results wheels anchors gpu-job publish reliability clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "torch==2.13.0" || $(BIN)/python -m pip install -q "torch>=2.11"
	grep -v '^torch==' constraints.txt > $(VENV)/constraints-pinned.txt
	$(BIN)/python -m pip install -q $(if $(PIN),-c $(VENV)/constraints-pinned.txt) -e ".[notebooks,test,helion,browser]"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

## make run: execute every notebook into build/notebooks (HTML too) and draw the figures from
## data/ into build/figures; the checkout is left as it was (`make figures` redraws figures/)
run: $(STAMP)
	mkdir -p build/notebooks build/figures
	$(BIN)/python -m inkling_workbook figures --out build/figures --readme ""
	$(BIN)/python tools/run_notebooks.py --out build/notebooks $(NOTEBOOKS)

## make test: lint, unit tests, then nbval over notebooks/ (CPU: Triton interpreter; GPU: compiled)
test: $(STAMP) lint anchors unit nbval

## make test-pinned: the kernel tests again under the published stack (constraints.txt: triton
## 3.6.0, helion 1.4.0; CI runs it after make test), with torch's CPU build 2.13.0: PyPI serves
## the published torch 2.11.0 only as a CUDA build of several GB.
test-pinned:
	test -x $(PINNED)/bin/python || $(PY) -m venv $(PINNED)
	$(PINNED)/bin/python -m pip install -q --upgrade pip
	$(PINNED)/bin/python -m pip install -q "torch==2.13.0"
	grep -v '^torch==' constraints.txt > $(PINNED)/constraints-pinned.txt
	$(PINNED)/bin/python -m pip install -q -c $(PINNED)/constraints-pinned.txt -e ".[notebooks,test,helion]"
	$(PINNED)/bin/python $(STACK)
	$(PINNED)/bin/python -m pytest -q -p no:cacheprovider -n auto $(PINNED_TESTS)

lint: $(STAMP)
	$(BIN)/ruff check inkling_kernels inkling_workbook portcheck examples tests tools notebooks
	$(BIN)/ruff format --check inkling_kernels inkling_workbook portcheck examples tests tools notebooks

# -n auto: the unit tests spread over the machine's cores (pytest-xdist; CI has two)
unit: $(STAMP)
	$(BIN)/python $(STACK)
	$(BIN)/python -m pytest tests -q -p no:cacheprovider -n auto

# -n auto --dist loadfile: the notebooks spread over the cores, each notebook's cells in order in one
# worker (a kernel runs on one core; the chapters are independent of each other)
nbval: $(STAMP)
	$(BIN)/python -m pytest --nbval-lax --nbval-sanitize-with notebooks/nbval_sanitize.cfg -p no:cacheprovider -q \
	  -n auto --dist loadfile notebooks

lab: $(STAMP)
	$(BIN)/jupyter lab $(LAB_ROOT) $(LAB_ARGS) notebooks

figures: $(STAMP)
	$(BIN)/python -m inkling_workbook figures

## make results: rewrite the generated tables of README.md and docs/results.md from data/
results: $(STAMP)
	$(BIN)/python -m inkling_workbook results

## make publish (GPU only): the measurements (benchmark, serving, decode, MoE layer, second port), the
## bitwise records and the notebooks, rewritten in place from this GPU (tools/gpu_job.sh, steps
## publish,bitwise,notebooks,notebook06), then figures/ and the generated tables
publish: $(STAMP)
	@$(BIN)/python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'make publish needs a CUDA GPU: it records GPU results into data/ and notebooks/. On a CPU machine use make run.')"
	PATH=$(abspath $(BIN)):$$PATH bash tools/gpu_job.sh build/gpu_job publish,bitwise,notebooks,notebook06
	$(BIN)/python -m inkling_workbook figures
	$(BIN)/python -m inkling_workbook results

## make reliability: refresh data/reliability.json and its table in docs/results.md from the recorded files
reliability: $(STAMP)
	$(BIN)/python tools/reliability.py

## make wheels: download the wheels the GPU job installs on a machine without a package index
wheels:
	$(PY) -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	  --platform manylinux1_x86_64 -d .whl -r tools/gpu_wheels.txt

## make anchors: fetch the baselines of other projects by name and version (sglang 0.5.23, vllm
## 0.34.0: pip download --no-deps, ~39 + ~239 MB, a few seconds) and extract only their kernel files
## into .anchors/ (ignored, ~300 kB with manifests; docs/anchors.md); skipped when already there
anchors: $(STAMP)
	$(BIN)/python tools/fetch_anchors.py

## make gpu-job (GPU only): the GPU job (tests, bitwise, fusion, measurement smoke, sanitizers, notebooks)
gpu-job: $(STAMP)
	PATH=$(abspath $(BIN)):$$PATH bash tools/gpu_job.sh build/gpu_job
	mkdir -p data/logs && cp build/gpu_job/gpu_job.log data/logs/gpu_job_$$($(BIN)/python -c "from inkling_workbook.measure import provenance; print(provenance.device_slug())").log
	$(BIN)/python -m inkling_workbook figures
	$(BIN)/python -m inkling_workbook results

clean:
	rm -rf build
