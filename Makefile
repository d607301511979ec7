# sgi-lab: `make demo` and `make test` do all set-up themselves on a fresh clone.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: setup git-filters demo test test-notebooks test-all test-browser lint format lab results

# The first install downloads torch and the extras (several minutes on a fresh clone): pip's
# own progress is shown, so a long install is never a silent one.
$(STAMP): pyproject.toml
	@echo "installing sgi-lab and its dependencies into $(VENV) (once; several minutes on a fresh clone)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --progress-bar on --disable-pip-version-check -e '.[dev,minatar,minari]'
	touch $(STAMP)

setup: $(STAMP) git-filters  ## create .venv, install sgi-lab with its dev extras, set git filters

# nbstripout as this clone's git filter (.gitattributes names it): notebooks are committed
# without outputs, execution counts or the kernel's version metadata, so a notebook run or
# merely opened in JupyterLab is not a change (the notebooks are committed with the display name
# ipykernel's own kernel gives, which Lab writes on save). --keep-id: the committed cell ids stay
# stable.
NBSTRIP_KEYS := metadata.papermill cell.metadata.papermill $(foreach k,codemirror_mode \
	file_extension mimetype nbconvert_exporter pygments_lexer version,metadata.language_info.$(k))
NBSTRIP := "$(abspath $(PY))" -m nbstripout --keep-id --extra-keys "$(NBSTRIP_KEYS)"

git-filters:  ## nbstripout as the git filter of notebooks (part of setup)
	@$(PY) -c "import nbstripout" 2>/dev/null \
		|| $(PY) -m pip install --quiet --disable-pip-version-check nbstripout
	git config filter.nbstripout.clean '$(NBSTRIP)'
	git config filter.nbstripout.smudge cat
	git config filter.nbstripout.required true
	git config diff.ipynb.textconv '$(NBSTRIP) -t'
	@# A fresh clone's files are "racily clean" (checked out in the second its index was
	@# written): until the index is refreshed once, every `git status` (each run's provenance)
	@# runs the notebooks' filter again, ~7 s a call here. Refresh it now, once.
	@git update-index -q --refresh >/dev/null 2>&1 || true

# nbstripout is the notebooks' git filter on the make demo / make test path too, not only after
# make setup: a notebook run or saved in JupyterLab is then no change, and runs started from Lab
# are recorded clean (provenance's dirty flag). Skipped outside a git clone.
FILTERS := $(shell git rev-parse --git-dir >/dev/null 2>&1 && echo git-filters)

# Its last stage is MinAtar Breakout, an SGI-pretrained and a from-scratch agent side by side
# (the minatar extra comes with $(STAMP)); DEMO_ARGS="--skip minatar" leaves it out.
# PNG thumbnails of the demo's figures: kaleido drives the local Chromium, offline (without a
# Chromium the demo says so in one line and draws HTML figures only)
EXPORT_STAMP := $(VENV)/.export-stamp
$(EXPORT_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[export]'
	touch $(EXPORT_STAMP)

demo: $(STAMP) $(EXPORT_STAMP) $(FILTERS)  ## the whole pipeline on the embedded default (Pong, then MinAtar Breakout; CPU)
	$(PY) -m sgi_lab.launch.demo $(DEMO_ARGS)

# The suites run on one worker per core (pytest-xdist), each worker and its children on one
# torch thread (tests/conftest.py). The browser tier stays serial (make test-browser).
TEST_WORKERS ?= auto
XDIST := -n $(TEST_WORKERS) --dist worksteal
test: $(STAMP) $(FILTERS)  ## the default (fast) test suite: everything but the notebooks, slow and browser tiers
	$(PY) -m pytest $(XDIST)

# Every test that executes a notebook (a Jupyter kernel each: the smoke runs of notebooks/ and
# the notebook runner's own tests) is marked `notebooks`; CI runs them after the default suite.
test-notebooks: $(STAMP) $(FILTERS)  ## the notebooks tier: the tests that execute notebooks (slow ones aside)
	$(PY) -m pytest $(XDIST) -m "notebooks and not slow and not browser"

# The slow tier starts real local Ray clusters: the `sweep` extra (Ray, fsspec) comes with it.
SWEEP_STAMP := $(VENV)/.sweep-stamp
$(SWEEP_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,sweep]'
	touch $(SWEEP_STAMP)

test-all: $(SWEEP_STAMP)  ## everything but the browser tier: the default suite, the notebooks tier, slow tests (and Ray's)
	$(PY) -m pytest $(XDIST) -m "not browser"

CHROMIUM ?= /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

test-browser: $(STAMP)  ## the notebooks in JupyterLab in headless Chromium, and the demo pages offline
	@test -x $(CHROMIUM) || $(SUDO) apt-get install -y chromium \
		|| ($(SUDO) apt-get update && $(SUDO) apt-get install -y chromium)
	@# Debian's chromium, driven by playwright through executable_path: no browser download
	@$(PY) -c "import playwright" 2>/dev/null \
		|| $(PY) -m pip install --quiet --disable-pip-version-check playwright
	SGI_LAB_CHROMIUM=$(CHROMIUM) $(PY) -m pytest -m browser -rA tests/browser

lint: $(STAMP)
	$(VENV)/bin/ruff check sgi_lab tests benchmarks notebooks
	$(VENV)/bin/ruff format --check sgi_lab tests benchmarks notebooks

format: $(STAMP)
	$(VENV)/bin/ruff check --fix sgi_lab tests benchmarks notebooks
	$(VENV)/bin/ruff format sgi_lab tests benchmarks notebooks

# The docs/results pages' generated tables and figures, regenerated from the archived studies in
# results/ (the text around them is written by hand), and each study's own report in
# outputs/results/NAME (sgi_lab/experiments/results_pages.py; a few minutes on 2 cores).
# RESULTS_ARGS=--check writes nothing and fails when a page is not what its archive gives.
results: $(STAMP)  ## regenerate docs/results' tables and figures, and each study's report, from results/
	OMP_NUM_THREADS=1 $(PY) -m sgi_lab.experiments.results_pages $(RESULTS_ARGS)

# Jupyter refuses to start as root (containers) unless told it may.
ALLOW_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)

lab: $(STAMP)  ## JupyterLab on the repo (widgets and plotly render there)
	$(VENV)/bin/jupyter lab --notebook-dir=. $(ALLOW_ROOT)
