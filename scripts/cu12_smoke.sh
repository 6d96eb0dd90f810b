#!/usr/bin/env bash
# CUDA 12 smoke test on the GPU machine (device tool), from the repository root:
#   bash scripts/cu12_smoke.sh            (carry: .whl-cu12 and .whl)
# .whl-cu12/ holds the CPython 3.12 wheels cuda-bindings 12.9.x, nvidia-cuda-nvrtc-cu12
# 12.6.85 and cuda-pathfinder (download them on the CPU machine, see README);
# .whl/ holds the pure-Python wheels the GPU image lacks (platformdirs).
# The GPU image's torch (cu130) stays; cuda.bindings 12 + NVRTC 12 come first on
# PYTHONPATH. Logs go to $OUT (or ./.device-out).
set -u -o pipefail
OUT=${OUT:-$PWD/.device-out}; mkdir -p "$OUT"
repo=$PWD
ls .whl-cu12/*.whl > /dev/null || { echo "no wheels in .whl-cu12/ (carry it)"; exit 1; }
rm -rf /tmp/cu12 /tmp/jm build
python3 -m pip install -q --no-index --no-deps --target /tmp/cu12 .whl-cu12/*.whl || exit 1
# the cu12 wheel ships nvidia/__init__.py; without it nvidia/ stays a namespace package
# and does not hide the site-packages nvidia/ libraries torch uses
rm -f /tmp/cu12/nvidia/__init__.py
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/jm .whl/*.whl || exit 1
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/jm . \
    > /tmp/jm-install.log 2>&1 || { cat /tmp/jm-install.log; exit 1; }
export PYTHONPATH=/tmp/cu12:/tmp/jm PYTHONUNBUFFERED=1
unset JITMETA_CACHE_DIR JITMETA_OFFLINE
cd /tmp   # import the installed package, not the checkout
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/cu12-device.txt"
timeout ${JITMETA_CU12_TIMEOUT:-420} python3 "$repo/scripts/cu12_smoke.py" "$@" 2>&1 \
    | tee "$OUT/cu12-smoke.log" | tail -80
exit "${PIPESTATUS[0]}"
