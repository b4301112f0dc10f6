# Two entry points, both idempotent and quick when nothing changed:
#   make book   set up .venv, execute every chapter (papermill, cached) and render the HTML book
#   make test   set up .venv, run the test suite
# and a third on top of the book:
#   make pdf    the rendered book as PDF (Debian's chromium): book/_build/html/pdf/book.pdf (without the
#               API reference, which is pdf/api.pdf) and one per page
# Set PYTHON to choose the interpreter that creates the virtual environment (Python 3.11).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: book test smoke bench browser-book clean venv flower pdf

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

# the smoke profile executes first (about a minute, cached): the teaching page shows both profiles' times
book: $(STAMP)
	$(BIN)/python book/build.py --profile smoke --no-render
	$(BIN)/python book/build.py

# the rendered book printed by the system chromium: one PDF per page and the reader's book (every
# page but the API reference) in book/_build/html/pdf/, linked from the landing page
pdf: book
	$(BIN)/python book/pdf.py

smoke: $(STAMP)
	$(BIN)/python book/build.py --profile smoke

# the tests over TEST_WORKERS processes (pytest-xdist; 0: in this process): the tests that read the
# session's smoke build share one worker (tests/conftest.py), so each chapter executes once
TEST_WORKERS ?= 2

test: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup

# the browser tests on the book-profile build that make book rendered (not a fresh smoke build)
browser-book: $(STAMP)
	FEDLIB_BOOK_SITE=book/_build/html $(BIN)/python -m pytest tests/test_browser.py

bench: $(STAMP)
	for b in tests/bench_*.py; do $(BIN)/python $$b || exit 1; done

# a real Flower deployment on this machine: a SuperLink and 4 SuperNodes as processes on 127.0.0.1
# (insecure mode: loopback only), 3 rounds of FedAvg; every process is stopped at the end
flower: $(STAMP)
	$(BIN)/python -m fedlib.engines.flower --engine deployment --clients 4 --rounds 3 --out flower-run --checkpoint checkpoint.pt

clean:
	rm -rf book/_build book/chapters book/results book/cache book/_smoke book/_paper
