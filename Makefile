# The README's two commands: `make demo` and `make test`. Both set everything up on a fresh
# machine: Debian packages when missing (infra/bootstrap.sh), a virtualenv at .venv, and
# the package with its dependencies.
# Debian's interpreter, not a per-user one (pyenv lives under /root, mode 0700): PostgreSQL
# runs `cdclake wal-push` as the postgres user, which must be able to execute .venv/bin/python.
PYTHON ?= /usr/bin/python3.11
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean system

# setup.py, the .pyx and .pxd files, and the Python modules a .pxd gives C types to (Cython's
# pure-Python mode, setup.py's PURE_PYTHON_MODE): pip compiles cdclake's hot paths into src/
CYTHON := $(wildcard src/cdclake/_*.pyx src/cdclake/*/_*.pyx src/cdclake/*/*/_*.pyx \
	src/cdclake/_*.pxd src/cdclake/*/_*.pxd src/cdclake/*/*/_*.pxd)
$(STAMP): pyproject.toml setup.py $(CYTHON) \
	$(wildcard $(subst /_,/,$(patsubst %.pxd,%.py,$(filter %.pxd,$(CYTHON)))))
	./infra/bootstrap.sh
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip setuptools wheel
	$(VENV)/bin/pip install -q -e ".[dev]"
	$(VENV)/bin/python -m cdclake.sparkenv.jars --build
	$(VENV)/bin/python -m cdclake.sparkenv.classdump
	touch $(STAMP)

system:
	./infra/bootstrap.sh

demo: $(STAMP)
	$(VENV)/bin/cdclake demo

# the suite's files on three pytest-xdist workers: a file's tests stay on one worker, so its
# module fixtures (a captured workload, a Spark session) are made once; files are handed out
# in collection order (tests/conftest.py puts the slow suites first), not by test count
PYTEST_WORKERS ?= 3
# Python's bytecode cache stays on for the suite's processes even where the environment turns
# it off (PYTHONDONTWRITEBYTECODE): each worker, `cdclake` subprocess, Airflow task and Spark
# Python worker would otherwise compile cdclake's sources and the test modules again
test: $(STAMP)
	$(VENV)/bin/ruff check src tests dags bench setup.py
	env -u PYTHONDONTWRITEBYTECODE $(VENV)/bin/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests dags bench setup.py
	$(VENV)/bin/mypy src

bench: $(STAMP)
	$(VENV)/bin/python bench/waldump.py
	$(VENV)/bin/python bench/decode.py
	$(VENV)/bin/python bench/spark_decode.py
	$(VENV)/bin/python bench/snapshot.py
	$(VENV)/bin/python bench/scale.py
	$(VENV)/bin/python bench/merge.py
	$(VENV)/bin/python bench/quality.py

clean:
	rm -rf $(VENV) .cdclake .pytest_cache
