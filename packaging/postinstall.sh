#!/bin/sh
# gpumesh package: after install or upgrade.
set -e
if command -v systemd-sysusers >/dev/null 2>&1; then
  systemd-sysusers gpumesh.conf
elif ! getent passwd gpumesh-job >/dev/null; then
  useradd --system --no-create-home --home-dir / --shell /usr/sbin/nologin gpumesh-job
fi
if command -v systemd-sysctl >/dev/null 2>&1; then
  # May fail where /proc/sys is read-only (a container): boot applies it.
  /usr/lib/systemd/systemd-sysctl 60-gpumesh.conf 2>/dev/null || true
fi
# Reload and restart only under a running systemd (not in a chroot or
# an image build); a fresh install is left for the operator to
# configure and `systemctl enable --now gpumesh`.
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload || true
  if systemctl is-active --quiet gpumesh.service; then
    systemctl restart gpumesh.service || true
  fi
fi
exit 0
