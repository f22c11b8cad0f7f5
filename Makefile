# The workbook's two commands (README): `make run` and `make test`. Each sets itself up.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NOTEBOOKS := $(sort $(wildcard notebooks/*.ipynb))
export PYTHONUNBUFFERED := 1
# PIN=1 (the default under CI) installs the published stack of constraints.txt (torch aside);
# without it the package's ranges apply, so a GPU workstation keeps the triton its torch needs.
PIN ?= $(if $(CI),1,)
NEWEST := .venv-newest
NEWEST_TESTS := tests/test_silu_and_mul.py tests/test_nvfp4.py tests/test_fp8.py -k "not fused_equals or (768 and nonuniform) or (plain and gate)"

.PHONY: run test test-newest lint unit nbval lab figures wheels gpu-job publish reliability clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "torch==2.13.0" || $(BIN)/python -m pip install -q "torch>=2.11"
	grep -v '^torch==' constraints.txt > $(VENV)/constraints-pinned.txt
	$(BIN)/python -m pip install -q $(if $(PIN),-c $(VENV)/constraints-pinned.txt) -e ".[notebooks,test,helion,browser]"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

## make run: execute every notebook into build/ (HTML too) and redraw figures/ from data/
run: $(STAMP)
	mkdir -p build/notebooks
	$(BIN)/python -m inkling_workbook figures
	$(BIN)/python tools/run_notebooks.py --out build/notebooks $(NOTEBOOKS)

## make test: lint, unit tests, then nbval over notebooks/ (CPU: Triton interpreter; GPU: compiled)
test: $(STAMP) lint unit nbval

## make test-newest: the kernel tests again under the newest triton the index serves (CI runs it
## after make test). torch stays the CPU build 2.13.0: PyPI's newer torch builds are CUDA builds
## of several GB, more than CI can download in its budget.
test-newest:
	test -x $(NEWEST)/bin/python || $(PY) -m venv $(NEWEST)
	$(NEWEST)/bin/python -m pip install -q "torch==2.13.0"
	$(NEWEST)/bin/python -m pip install -q --upgrade "triton>=3.6" "numpy>=1.26" "pytest>=8" "pytest-xdist>=3.6"
	$(NEWEST)/bin/python -m pip install -q --no-deps -e .
	$(NEWEST)/bin/python -c "import torch, triton; print('newest pair: torch', torch.__version__, 'triton', triton.__version__)"
	$(NEWEST)/bin/python -m pytest -q -p no:cacheprovider -n auto $(NEWEST_TESTS)

lint: $(STAMP)
	$(BIN)/ruff check inkling_kernels inkling_workbook tests tools notebooks
	$(BIN)/ruff format --check inkling_kernels inkling_workbook tests tools notebooks

# -n auto: the unit tests spread over the machine's cores (pytest-xdist; CI has two)
unit: $(STAMP)
	$(BIN)/python -m pytest tests -q -p no:cacheprovider -n auto

nbval: $(STAMP)
	$(BIN)/python -m pytest --nbval-lax --nbval-sanitize-with notebooks/nbval_sanitize.cfg -p no:cacheprovider -q notebooks

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks

figures: $(STAMP)
	$(BIN)/python -m inkling_workbook figures

## make publish (GPU only): the benchmark, bitwise records and notebooks, rewritten in place from
## this GPU (tools/gpu_job.sh, steps bench,bitwise,notebooks), then figures/ and the README tables
publish: $(STAMP)
	@$(BIN)/python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'make publish needs a CUDA GPU: it records GPU results into data/ and notebooks/. On a CPU machine use make run.')"
	PATH=$(abspath $(BIN)):$$PATH bash tools/gpu_job.sh build/gpu_job bench,bitwise,notebooks
	$(BIN)/python -m inkling_workbook figures

## make reliability: refresh data/reliability.json and the README's table from the recorded files
reliability: $(STAMP)
	$(BIN)/python tools/reliability.py

## make wheels: download the wheels the GPU job installs on a machine without a package index
wheels:
	$(PY) -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	  --platform manylinux1_x86_64 -d .whl -r tools/gpu_wheels.txt

## make gpu-job (GPU only): the whole GPU job (benchmark, tests, sanitizers, bitwise, notebooks)
gpu-job: $(STAMP)
	PATH=$(abspath $(BIN)):$$PATH bash tools/gpu_job.sh build/gpu_job
	cp build/gpu_job/gpu_job.log data/gpu_job_$$($(BIN)/python -c "from inkling_workbook import provenance; print(provenance.device_slug())").log
	$(BIN)/python -m inkling_workbook figures

clean:
	rm -rf build
