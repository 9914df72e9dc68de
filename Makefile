# `make run` starts the dashboard, `make test` runs every test; both create .venv when missing.
# `make test` runs the fast lane first and stops at its first failure, so a broken change fails in minutes, then
# installs chromium (when missing) and runs the rest. The two marker expressions are complements: every test runs
# once, none is left out (tests/project/test_layout.py checks it).
FAST := not slow and not browser
REST := slow or browser
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.txt | cksum | cut -d' ' -f1)
PORT ?= 8501
# The dashboard has no authentication: it listens on this machine only unless told otherwise
# (`make run ADDRESS=0.0.0.0` exposes it to the network, deliberately).
ADDRESS ?= 127.0.0.1
# `make run RAY_ADDRESS=host:6379` (or RAY_ADDRESS=local): the pages' multi-point jobs run their points on that Ray
# cluster (docs/executor.md); the dashboard itself still listens on ADDRESS.

.PHONY: run test test-fast chromium benchmarks clean

$(STAMP): requirements.txt
	test -x $(PY) || python3 -m venv $(VENV)
	# torch first and pinned, so pip never swaps in a multi-GB CUDA build on a CPU machine
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -r requirements.txt
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# Browser tests drive Debian's chromium (Playwright's own browser download is not used).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian chromium for the browser tests"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

run: $(STAMP)
	$(PY) -m ui.shared.launch --server.headless true --server.address $(ADDRESS) --server.port $(PORT) \
	    --server.fileWatcherType none $(if $(RAY_ADDRESS),--ray-address $(RAY_ADDRESS))

test: $(STAMP)
	$(PY) -m pytest -m "$(FAST)" -x
	@$(MAKE) --no-print-directory chromium
	$(PY) -m pytest -m "$(REST)"

test-fast: $(STAMP)
	$(PY) -m pytest -m "$(FAST)"

benchmarks: $(STAMP) chromium
	$(PY) benchmarks/rank_trace.py
	$(PY) benchmarks/rrqr.py
	$(PY) benchmarks/start_time.py
	$(PY) benchmarks/first_chart.py

clean:
	rm -rf $(VENV) tests/artifacts .pytest_cache
