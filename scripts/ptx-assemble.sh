#!/usr/bin/env bash
# Assembles the CUDA prover's PTX (verify/cuda/kernels_*.ptx) with NVIDIA's
# ptxas, for each module's own target and for sm_80 and sm_90, so that a
# machine with the CUDA toolkit checks what the driver's JIT will be given.
# PTXAS names the assembler (default: ptxas on PATH). The tests need no
# toolkit; make gpu-check runs this when a ptxas is found.
set -euo pipefail
cd "$(dirname "$0")/.."
ptxas=${PTXAS:-$(command -v ptxas || true)}
if [ -z "$ptxas" ]; then
	echo "ptx-assemble: no ptxas on PATH (set PTXAS)" >&2
	exit 2
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
for src in verify/cuda/kernels_*.ptx; do
	target=$(awk '$1 == ".target" { print $2; exit }' "$src")
	for arch in $(printf '%s\n' "$target" sm_80 sm_90 | sort -u); do
		if log=$("$ptxas" -arch="$arch" -o "$out/$(basename "$src" .ptx)-$arch.cubin" "$src" 2>&1); then
			echo "ptx-assemble: $src for $arch: ok"
		elif grep -q "is not defined for option 'gpu-name'" <<<"$log"; then
			# CUDA 13's ptxas dropped sm_70; the driver's JIT still takes
			# a module that targets it, for the GPU it runs on.
			echo "ptx-assemble: $src for $arch: skipped, this ptxas does not know $arch"
		else
			printf '%s\n' "$log" >&2
			echo "ptx-assemble: $src for $arch: FAILED" >&2
			status=1
		fi
	done
done
exit $status
