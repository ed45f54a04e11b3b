#!/usr/bin/env bash
# Run Open WebUI for real against `microrag serve`, offline, and drive it in Chromium.
#
#   bash scripts/try-open-webui.sh
#
# 1. a venv for Open WebUI at $OWUI_VENV (default ~/.cache/microrag/open-webui-venv; reused when
#    it holds the pinned version) with a Python it supports (3.11 or 3.12);
# 2. a throwaway microRAG index of the demo handbook in a temp dir, with one document
#    (engineering/on-call-runbook.md) labelled `restricted`, an admin key with full clearance and
#    a reader key (public only), and `microrag serve` on a free loopback port;
# 3. per pass, a recording proxy (scripts/try_open_webui.py proxy) between Open WebUI and microrag:
#    every /v1/* request Open WebUI sends lands in tests/fixtures/open_webui/<pass>/NNN-<step>-<kind>.json
#    (the Authorization header's value dropped, any mrg_ key redacted);
# 4. per pass, a fresh Open WebUI: no model downloads, its own RAG / embeddings / web search / images /
#    code / Ollama off, auth off, DATA_DIR in the temp dir, one OpenAI connection: the proxy, reader key.
#    Passes ($OWUI_PASSES, default both): `stock` (Open WebUI's defaults) and `builtin-tools-off`
#    (DEFAULT_MODEL_METADATA turns off the `builtin_tools` capability, so chats carry no `tools`);
# 5. Playwright (Debian's Chromium) picks the model `microrag` and asks an answerable question, a
#    follow-up, one to refuse and one only the restricted document answers, then lets Open WebUI's
#    title/tags/follow-up tasks run. Screenshots (stock pass only): docs/open-webui-answer.png,
#    -followup, -refusal, -restricted; report: benchmarks/results/open-webui.md.
#
# Environment: OWUI_VERSION (pinned: 0.12.4), OWUI_VENV, OWUI_PYTHON (interpreter for the venv),
# KEEP_TMP=1 (leave the temp dir and print its path), PIP_SECONDS (reported install time when the
# venv is reused; otherwise measured).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OWUI_VERSION=${OWUI_VERSION:-0.12.4}
OWUI_VENV=${OWUI_VENV:-$HOME/.cache/microrag/open-webui-venv}
MICRORAG=${MICRORAG:-$ROOT/.venv/bin/microrag}
FIXTURES=$ROOT/tests/fixtures/open_webui
DOCS=$ROOT/docs
REPORT=$ROOT/benchmarks/results/open-webui.md
RESTRICTED_DOC=engineering/on-call-runbook.md
RESTRICTED_FACT="USD 400"
say() { echo "try-open-webui: $*" >&2; }

# ---------------------------------------------------------------- cleanup
PIDS=()
TMP=$(mktemp -d "${TMPDIR:-/tmp}/microrag-owui.XXXXXX")
cleanup() {
  local rc=$?
  for pid in "${PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  if [ "${KEEP_TMP:-0}" = 1 ]; then say "kept $TMP"; else rm -rf "$TMP"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'; }
wait_http() {  # URL SECONDS PID
  local end=$(( $(date +%s) + $2 ))
  while [ "$(date +%s)" -lt "$end" ]; do
    curl -fsS -o /dev/null --max-time 3 "$1" 2>/dev/null && return 0
    kill -0 "$3" 2>/dev/null || { say "process $3 died while waiting for $1"; return 1; }
    sleep 1
  done
  say "timed out waiting for $1"; return 1
}

# ---------------------------------------------------------------- 1. Open WebUI's venv
pick_python() {
  local c
  for c in "${OWUI_PYTHON:-}" python3.11 python3.12 /root/.pyenv/versions/3.11*/bin/python3.11 \
           /root/.pyenv/versions/3.12*/bin/python3.12; do
    [ -n "$c" ] || continue
    command -v "$c" >/dev/null 2>&1 || continue
    "$c" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] <= (3, 12) else 1)' 2>/dev/null && { command -v "$c"; return; }
  done
  say "no Python 3.11/3.12 found (open-webui $OWUI_VERSION needs >=3.11,<3.13); set OWUI_PYTHON"; exit 1
}
OWUI_PY=$OWUI_VENV/bin/python
installed=$("$OWUI_PY" -c 'import importlib.metadata as m; print(m.version("open-webui"))' 2>/dev/null || true)
if [ "$installed" != "$OWUI_VERSION" ]; then
  py=$(pick_python)
  say "creating $OWUI_VENV with $py and installing open-webui==$OWUI_VERSION"
  [ -x "$OWUI_PY" ] || "$py" -m venv "$OWUI_VENV"
  t0=$(date +%s)
  # A CPU-only torch wheel on local disk (pip's find-links) saves ~3 GB of CUDA libraries.
  pyver=$("$OWUI_PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
  cpu_torch=$(ls ${PIP_FIND_LINKS:-/opt/wheels}/torch-*+cpu-"$pyver"-*.whl 2>/dev/null | sort -V | tail -1 || true)
  [ -n "$cpu_torch" ] && "$OWUI_PY" -m pip install -q "$cpu_torch"
  "$OWUI_PY" -m pip install -q "open-webui==$OWUI_VERSION"
  PIP_SECONDS="$(( $(date +%s) - t0 )) s${cpu_torch:+ (torch from $cpu_torch)}"
fi
PIP_SECONDS=${PIP_SECONDS:-"venv reused (set PIP_SECONDS to report the first install's time)"}
OWUI_PYVER=$("$OWUI_PY" -c 'import platform; print(platform.python_version())')

# The driver: the project's venv when it has Playwright, else Open WebUI's venv.
DRIVER_PY=$ROOT/.venv/bin/python
if ! "$DRIVER_PY" -c 'import playwright.sync_api' 2>/dev/null; then
  DRIVER_PY=$OWUI_PY
  "$DRIVER_PY" -c 'import playwright.sync_api' 2>/dev/null || "$DRIVER_PY" -m pip install -q playwright
fi
command -v chromium >/dev/null 2>&1 || bash "$ROOT/scripts/install-chromium.sh"
CHROMIUM=$(command -v chromium || echo /usr/bin/chromium)
[ -x "$CHROMIUM" ] || { say "no chromium (scripts/install-chromium.sh needs root)"; exit 1; }

# ---------------------------------------------------------------- 2. microRAG
say "temp dir $TMP"
cp -r "$ROOT/src/microrag_engine/data/demo-corpus" "$TMP/"
{ printf -- '---\nlabel: restricted\n---\n'; cat "$ROOT/src/microrag_engine/data/demo-corpus/$RESTRICTED_DOC"; } \
  > "$TMP/demo-corpus/$RESTRICTED_DOC"
IDX=$TMP/index
"$MICRORAG" ingest -q --index "$IDX" "$TMP/demo-corpus"
"$MICRORAG" documents --index "$IDX" | grep -q "on-call-runbook.md.*restricted" || { say "labelling failed"; exit 1; }
ADMIN_KEY=$("$MICRORAG" keys add root --role admin --clearance public,internal,restricted --index "$IDX" -q)
READER_KEY=$("$MICRORAG" keys add reader --role reader --index "$IDX" -q)
MRG_PORT=$(free_port)
"$MICRORAG" serve --index "$IDX" --port "$MRG_PORT" > "$TMP/microrag.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$MRG_PORT/health" 120 "${PIDS[-1]}"
say "microrag serve on 127.0.0.1:$MRG_PORT"

# ---------------------------------------------------------------- 3-5. one pass per Open WebUI setup
# stock: Open WebUI as installed. builtin-tools-off: the same with DEFAULT_MODEL_METADATA turning off
# the model capability `builtin_tools`, without which 0.12 attaches ~28 tool definitions to every
# chat sent from its UI. Each pass: a fresh DATA_DIR, its own proxy and its own fixture folder.
CPU=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
RESULTS=()
rc=0
run_pass() {  # NAME DESCRIPTION FIXTURE_DIR SHOTS(all|first) SHOT_PREFIX EXTRA_ENV...
  local name=$1 desc=$2 fixtures=$3 shots=$4 prefix=$5; shift 5
  local proxy_port owui_port proxy_pid owui_pid
  proxy_port=$(free_port)
  python3 "$ROOT/scripts/try_open_webui.py" proxy --port "$proxy_port" --upstream "http://127.0.0.1:$MRG_PORT" \
    --out "$fixtures" > "$TMP/$name-proxy.log" 2>&1 &
  proxy_pid=$!; PIDS+=("$proxy_pid")
  wait_http "http://127.0.0.1:$proxy_port/health" 30 "$proxy_pid"

  owui_port=$(free_port)
  mkdir -p "$TMP/$name-data" "$TMP/$name-cwd"
  (
    cd "$TMP/$name-cwd"
    # Names from open_webui/env.py and open_webui/config.py of 0.12.4.
    export DATA_DIR="$TMP/$name-data" WEBUI_SECRET_KEY="$(python3 -c 'import secrets; print(secrets.token_hex(24))')"
    export OFFLINE_MODE=true HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ENABLE_VERSION_UPDATE_CHECK=false
    export ANONYMIZED_TELEMETRY=false SCARF_NO_ANALYTICS=true DO_NOT_TRACK=true
    export WEBUI_AUTH=False ENABLE_SIGNUP=False
    export ENABLE_OLLAMA_API=False ENABLE_OPENAI_API=True
    export OPENAI_API_BASE_URLS="http://127.0.0.1:$proxy_port/v1" OPENAI_API_KEYS="$READER_KEY"
    export DEFAULT_MODELS=microrag
    # its own RAG: no SentenceTransformer load at startup (an empty model name skips it), no retrieval
    export RAG_EMBEDDING_MODEL="" RAG_RERANKING_MODEL="" BYPASS_EMBEDDING_AND_RETRIEVAL=True ENABLE_RAG_HYBRID_SEARCH=False
    export RAG_EMBEDDING_MODEL_AUTO_UPDATE=False RAG_RERANKING_MODEL_AUTO_UPDATE=False WHISPER_MODEL_AUTO_UPDATE=False
    export ENABLE_WEB_SEARCH=False ENABLE_IMAGE_GENERATION=False ENABLE_IMAGE_EDIT=False ENABLE_IMAGE_PROMPT_GENERATION=False
    export ENABLE_CODE_INTERPRETER=False ENABLE_CODE_EXECUTION=False ENABLE_EVALUATION_ARENA_MODELS=False
    export ENABLE_COMMUNITY_SHARING=False ENABLE_DIRECT_CONNECTIONS=False ENABLE_MEMORIES=False
    export USER_PERMISSIONS_CHAT_STT=False USER_PERMISSIONS_CHAT_TTS=False  # whisper loads lazily; never used here
    # background tasks stay at their defaults: title, tags, follow-ups on; autocomplete off
    for kv in "$@"; do export "$kv"; done
    exec "$OWUI_VENV/bin/open-webui" serve --host 127.0.0.1 --port "$owui_port"
  ) > "$TMP/$name-open-webui.log" 2>&1 &
  owui_pid=$!; PIDS+=("$owui_pid")
  say "[$name] Open WebUI $OWUI_VERSION on 127.0.0.1:$owui_port, proxy :$proxy_port -> microrag :$MRG_PORT"
  if ! wait_http "http://127.0.0.1:$owui_port/health" 300 "$owui_pid"; then
    tail -40 "$TMP/$name-open-webui.log" >&2; exit 1
  fi
  local log_from; log_from=$(wc -l < "$TMP/microrag.log")
  MICRORAG_ADMIN_KEY=$ADMIN_KEY "$DRIVER_PY" "$ROOT/scripts/try_open_webui.py" drive --pass-name "$name" \
    --description "$desc" --webui "http://127.0.0.1:$owui_port" --proxy "http://127.0.0.1:$proxy_port" \
    --microrag "http://127.0.0.1:$MRG_PORT" --docs "$DOCS" --out "$TMP/$name.json" --fixtures "$fixtures" \
    --chromium "$CHROMIUM" --shots "$shots" --shot-prefix "$prefix" --owui-log "$TMP/$name-open-webui.log" \
    --microrag-log "$TMP/microrag.log" --microrag-log-from "$log_from" --debug-dir "$TMP" || rc=$?
  RESULTS+=(--result "$TMP/$name.json")
  kill "$owui_pid" "$proxy_pid" 2>/dev/null || true
  wait "$owui_pid" "$proxy_pid" 2>/dev/null || true
}

for pass in ${OWUI_PASSES:-builtin-tools-off stock}; do
  case $pass in
    stock) run_pass stock "Open WebUI's defaults (the screenshots)" "$FIXTURES/stock" all open-webui- ;;
    builtin-tools-off) run_pass builtin-tools-off \
        "DEFAULT_MODEL_METADATA='{\"capabilities\": {\"builtin_tools\": false}}' (no tool definitions in chat requests)" \
        "$FIXTURES/builtin-tools-off" none open-webui- \
        'DEFAULT_MODEL_METADATA={"capabilities": {"builtin_tools": false}}' ;;
    *) say "unknown pass $pass (stock, builtin-tools-off)"; exit 2 ;;
  esac
done

"$DRIVER_PY" "$ROOT/scripts/try_open_webui.py" report "${RESULTS[@]}" --report "$REPORT" --root "$ROOT" \
  --owui-version "$OWUI_VERSION" --owui-python "$OWUI_PYVER" --pip-seconds "$PIP_SECONDS" --cpu "${CPU:-unknown}" \
  --command "bash scripts/try-open-webui.sh${OWUI_PASSES:+ (OWUI_PASSES=$OWUI_PASSES)}" --chromium "$CHROMIUM" \
  --restricted-doc "$RESTRICTED_DOC" --restricted-fact "$RESTRICTED_FACT"
say "report: $REPORT; fixtures: $FIXTURES/*/; screenshots: $DOCS/open-webui-*.png"
exit $rc
