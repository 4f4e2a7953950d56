#!/bin/sh
# gpumesh package: before removal (not before an upgrade, whose
# postinstall restarts the node). Stopping the node ends its jobs.
set -e
case "$1" in
  upgrade|1) exit 0 ;; # deb "upgrade", rpm: one version left after this
esac
if [ -d /run/systemd/system ]; then
  systemctl disable --now gpumesh.service >/dev/null 2>&1 || true
fi
exit 0
