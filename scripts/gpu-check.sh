#!/usr/bin/env bash
# make gpu-check: check gpumesh's CUDA prover (verify/cuda) on this
# machine's NVIDIA GPU in at most 7 minutes, and write bench/GPU.md.
#
#   1. `gpumesh gpus --json` through NVML;
#   2. cmd/gpucheck: the driver and its devices, a small self-test of the
#      chain (both kernels) and of the memory fold against the CPU
#      reference, a full-size challenge of one GPU (challenge.RealParams
#      of its catalog profile) timed by phase with a CPU challenger's
#      verification, the verifier's cost as a fraction of the prover's
#      and the efficiency η, then a full-size memory proof.
#
# Each result is one JSON line, on stdout and in bench/GPU.md. Without an
# NVIDIA GPU and driver it stops at once: "no NVIDIA GPU/driver", exit 1.
# GPU_CHECK_ARGS passes flags to gpucheck (e.g. -device 1, -model h200,
# -kernel simple, -mem=false); GPU_CHECK_OUT moves the report.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
GO=${GO:-go}
BIN=${BIN:-bin/gpumesh}
REPORT=${GPU_CHECK_OUT:-bench/GPU.md}
LIMIT=${GPU_CHECK_SECONDS:-420}
start=$SECONDS

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if command -v "$GO" >/dev/null; then
	if [ ! -x "$BIN" ]; then
		CGO_ENABLED=1 $GO build -o "$BIN" ./cmd/gpumesh || exit 1
	fi
	CGO_ENABLED=1 $GO build -o bin/gpucheck ./cmd/gpucheck || exit 1
elif [ -x "$BIN" ] && [ -x bin/gpucheck ]; then
	# A GPU machine without a Go toolchain: binaries built elsewhere
	# (x86-64, cgo, glibc 2.34 or later) placed in bin/.
	echo "gpu-check: no Go toolchain here; using the prebuilt $BIN and bin/gpucheck"
else
	echo "gpu-check: no Go toolchain ($GO) and no prebuilt $BIN and bin/gpucheck" >&2
	exit 1
fi

echo "== gpumesh gpus (NVML)"
"$BIN" gpus --json --gpus auto --data "$tmp/data" >"$tmp/gpus.json" 2>"$tmp/gpus.err"
gpus_status=$?
cat "$tmp/gpus.json"
if [ $gpus_status -ne 0 ]; then
	cat "$tmp/gpus.err" >&2
fi
if ! grep -q '"uuid"' "$tmp/gpus.json"; then
	echo "gpu-check: no NVIDIA GPU/driver: gpumesh gpus found none through NVML" >&2
	exit 1
fi

if command -v ptxas >/dev/null || [ -n "${PTXAS:-}" ]; then
	echo "== ptxas (the PTX the driver's JIT is given)"
	scripts/ptx-assemble.sh || echo "gpu-check: ptxas refused the PTX (the JIT below is the check that counts)" >&2
fi

echo "== gpucheck (at most $LIMIT s)"
left=$((LIMIT - (SECONDS - start)))
# shellcheck disable=SC2086 # GPU_CHECK_ARGS is a list of flags
timeout --signal=INT --kill-after=15 "$left" bin/gpucheck -md "$REPORT" -gpus-json "$tmp/gpus.json" \
	-timeout "$((left - 10))s" ${GPU_CHECK_ARGS:-}
status=$?
case $status in
0) echo "gpu-check: every check passed; report in $REPORT" ;;
3) echo "gpu-check: no NVIDIA GPU/driver (libcuda.so.1 could not be used)" >&2 ;;
124 | 130 | 137) echo "gpu-check: out of time after $((SECONDS - start)) s" >&2 ;;
*) echo "gpu-check: a check failed (exit $status); report in $REPORT" >&2 ;;
esac
[ $status -eq 0 ]
