# The two commands of the README. Both bootstrap .venv/ on a fresh machine first.
.PHONY: demo test lint bootstrap

# pytest-xdist workers: the 2-core development and CI machines run the suite on both cores; each test file
# stays on one worker, so its module fixtures (started nodes, the CMake build) are made once
TEST_WORKERS ?= 2

bootstrap:
	tools/bootstrap.sh

demo: bootstrap
	.venv/bin/wamdiff2 demo

lint: bootstrap
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

test: lint
	.venv/bin/python -m pytest -n $(TEST_WORKERS) --dist loadfile
