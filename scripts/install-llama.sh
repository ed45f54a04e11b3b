#!/usr/bin/env bash
# Install llama-cpp-python (the optional local LLM) into the project venv.
# PyPI has no binary wheel, so it compiles once (~9 min on 2 cores) and the
# wheel is cached; later runs install the cached wheel in seconds. Needs the venv
# that `make test` built from requirements/test.lock.
# Portable flags: a native build dies with SIGILL here (AMX is reported, not usable).
set -euo pipefail
VERSION=0.3.36
PY=${PY:-.venv/bin/python}
CACHE=${MICRORAG_WHEEL_CACHE:-$HOME/.cache/microrag/wheels}
if "$PY" -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$VERSION')" 2>/dev/null; then
  exit 0
fi
mkdir -p "$CACHE"
WHEEL=$(ls "$CACHE"/llama_cpp_python-"$VERSION"-*.whl 2>/dev/null | head -1 || true)
if [ -z "$WHEEL" ]; then
  echo "building llama-cpp-python $VERSION (one time, ~9 min on 2 cores)..."
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DLLAVA_BUILD=OFF" \
  CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
    "$PY" -m pip wheel -q --no-deps --no-build-isolation "llama-cpp-python==$VERSION" -w "$CACHE" 2> >(grep -v "^WARNING: Location" >&2)
  WHEEL=$(ls "$CACHE"/llama_cpp_python-"$VERSION"-*.whl | head -1)
fi
# Its runtime deps and those of its OpenAI-compatible server, and its build backend
# (scikit-build-core, used above without build isolation), come pinned from
# requirements/test.lock (make test installs it first), so nothing here floats.
"$PY" -m pip install -q --no-deps "$WHEEL" 2> >(grep -v -e "^WARNING: Location" >&2)
"$PY" -c "import llama_cpp, llama_cpp.server" || { echo "llama-cpp-python did not install" >&2; exit 1; }
