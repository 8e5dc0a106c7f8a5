# Two entry points: `make demo` runs the main job on built-in defaults, `make test` runs the test suite.
# Both set everything up first (system packages when missing, .venv, the package).
.PHONY: demo test setup setup-tests clean

export MUJOCO_GL ?= egl
export PYOPENGL_PLATFORM ?= egl
export HF_HUB_OFFLINE = 1
export TOKENIZERS_PARALLELISM = false

setup:
	@scripts/setup.sh

setup-tests:
	@scripts/setup.sh --tests

demo: setup
	.venv/bin/coda run --preset quick

test: setup-tests
	CODA_TEST_REQUIRE_ALL=1 .venv/bin/python -m pytest -q

clean:
	rm -rf .venv runs .pytest_cache
