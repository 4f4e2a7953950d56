#!/usr/bin/env bash
# Compiles the contracts with solc-js at a pinned version (npm `solc`,
# through npx) into build/ (or into $1): <Name>.abi and <Name>.bin for
# each contract, the files chain/contracts.go embeds. TestContractsUpToDate
# runs it into a temporary folder and compares the bytes with build/.
set -euo pipefail
SOLC_VERSION=0.8.37
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/build}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$here"
npx --yes "solc@$SOLC_VERSION" --optimize --optimize-runs 200 --bin --abi -o "$tmp" PaymentChannel.sol TestToken.sol >/dev/null
for n in PaymentChannel TestToken; do
  # solc-js names its outputs after the source file and the contract: <File>_sol_<Name>.
  cp "$tmp/${n}_sol_${n}.abi" "$out/$n.abi"
  cp "$tmp/${n}_sol_${n}.bin" "$out/$n.bin"
done
