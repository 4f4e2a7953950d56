#!/bin/sh
# gpumesh package: after removal. A purge (deb) also deletes the node's
# data, its identity key included: back it up first (docs/operators.md).
set -e
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload || true
fi
if [ "$1" = purge ]; then
  rm -rf /var/lib/gpumesh
fi
exit 0
