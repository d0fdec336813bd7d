#!/usr/bin/env bash
# OSWorld's metric functions' own virtual environment (.venv-osworld): desktop-env pins torch 2.5,
# transformers 4.35, numpy<2, …, so it never shares .venv. desktop-env is installed without its
# dependencies, beside only the libraries its metric modules import (agent_core/tasks/osworld_worker.py
# loads one module at a time): its own pins where it has them (numpy<2, Pillow~=11.0, pandas<2.3,
# opencv<5, pytz~=2024.1, tqdm~=4.65), the releases that resolve beside them elsewhere. Left out: easyocr
# and librosa (torch / numba: ~2 GB; compare_image_text and compare_audios then fail with a clear
# error), and what only the VM side needs (gymnasium, pyautogui, ag2, cloud SDKs, …). Playwright is in:
# the DevTools getters connect over CDP to the desktop's Chromium (no browser download: they connect).
# pymupdf stays below 2.0, which pulls onnxruntime in. Idempotent: a second run with the same pins
# does no network work. Prints the venv's python on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${OSWORLD_VENV:-.venv-osworld}
PY=${PYTHON:-python3.11}
PACKAGE=desktop-env==1.0.2
LIBS=(
  numpy==1.26.4 Pillow==11.0.0 pandas==2.2.3 pytz==2024.2 tqdm==4.65.2 opencv-python-headless==4.11.0.86
  scipy==1.17.1 scikit-image==0.26.0 ImageHash==4.3.2 fastdtw==0.3.4 pyacoustid==1.3.1 mutagen==1.48.1
  rapidfuzz==3.14.6 beautifulsoup4==4.15.0 lxml==6.1.3 cssselect==1.6.0 xmltodict==1.0.4 PyYAML==6.0.4
  pymupdf==1.26.5 borb==3.0.9 pdfplumber==0.11.9 pypdf==7.1.1 PyPDF2==3.0.1
  python-docx==1.2.0 odfpy==1.4.1 python-pptx==1.0.2 openpyxl==3.1.5 formulas==1.3.4 tldextract==5.4.0
  playwright==1.65.2
)
want="$PACKAGE ${LIBS[*]}"
log() { printf '\033[1m[osworld-env]\033[0m %s\n' "$*" >&2; }
if [ "$(cat "$VENV/.stamp" 2>/dev/null)" != "$want" ]; then
  log "creating $VENV with $PACKAGE and its metrics' libraries (about a minute, 0.75 GB)"
  start=$SECONDS
  rm -rf "$VENV"
  if command -v uv >/dev/null 2>&1; then
    uv venv -q --python "$PY" "$VENV" >&2
    pip=(uv pip install -q --python "$VENV/bin/python")  # uv does not compile by default
  else
    $PY -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip >&2
    # desktop-env's unmet requirements are the point: pip is not to list them.
    pip=("$VENV/bin/python" -m pip install -q --no-warn-conflicts --no-compile)
  fi
  "${pip[@]}" "${LIBS[@]}" >&2
  "${pip[@]}" --no-deps "$PACKAGE" >&2
  # Every metric that desktop_env.evaluators.metrics exports must load (its summary goes to stderr).
  "$VENV/bin/python" agent_core/tasks/osworld_worker.py --probe-all >&2
  echo "$want" > "$VENV/.stamp"
  log "made $VENV in $((SECONDS - start)) s ($(du -sh "$VENV" | cut -f1))"
fi
echo "$PWD/$VENV/bin/python"
