#!/bin/sh
# gpumesh package: after install or upgrade.
set -e
if command -v systemd-sysusers >/dev/null 2>&1; then
  systemd-sysusers gpumesh.conf
elif ! getent passwd gpumesh-job >/dev/null; then
  useradd --system --no-create-home --home-dir / --shell /usr/sbin/nologin gpumesh-job
fi
# ip_forward for job networks now, not only from the next boot. This may
# fail where /proc/sys is read-only (a container): boot applies it.
if [ -x /usr/lib/systemd/systemd-sysctl ]; then
  /usr/lib/systemd/systemd-sysctl 60-gpumesh.conf 2>/dev/null || true
elif command -v sysctl >/dev/null 2>&1; then
  sysctl -q -p /usr/lib/sysctl.d/60-gpumesh.conf 2>/dev/null || true
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
