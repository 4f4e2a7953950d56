#!/usr/bin/env bash
# Installs a gpumesh .deb into this machine's /etc, /usr and /var as seen
# through overlays in a private mount namespace, checks what it put
# there, removes and purges it. Nothing reaches the host: every write
# lands in WORK's upper dirs, /proc/sys is read-only, and the mounts go
# with the namespace.
#   unshare --mount --propagation private bash install.sh DEB WORK
# Prints "score <N>" (systemd-analyze security --offline) on success.
set -euo pipefail
deb=$1 work=$2
for d in etc usr var; do
  mkdir -p "$work/$d/upper" "$work/$d/work"
  mount -t overlay overlay -o "lowerdir=/$d,upperdir=$work/$d/upper,workdir=$work/$d/work" "/$d"
done
# The host's sysctls are not the package's to change here: postinstall's
# ip_forward write fails (and is let fail, as in a container).
mount --bind /proc/sys /proc/sys
mount -o remount,bind,ro /proc/sys
# No running systemd here: the maintainer scripts must not try to use one.
dpkg -i "$deb" >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; exit 1; }
getent passwd gpumesh-job >/dev/null || { echo "no gpumesh-job user after install"; exit 1; }
for f in /usr/bin/gpumesh /usr/lib/systemd/system/gpumesh.service /usr/lib/sysusers.d/gpumesh.conf \
  /usr/lib/sysctl.d/60-gpumesh.conf /etc/gpumesh/config.toml /usr/share/man/man1/gpumesh-node.1 \
  /usr/share/bash-completion/completions/gpumesh /usr/share/zsh/vendor-completions/_gpumesh \
  /usr/share/fish/vendor_completions.d/gpumesh.fish; do
  [ -e "$f" ] || { echo "missing after install: $f"; exit 1; }
done
grep -qx /etc/gpumesh/config.toml /var/lib/dpkg/info/gpumesh.conffiles || { echo "config.toml is not a conffile"; exit 1; }
# The shipped config parses, with the package's job user.
gpumesh config show --config /etc/gpumesh/config.toml --data "$work/data" --json >"$work/config.json" \
  || { echo "gpumesh config show rejects the shipped config"; exit 1; }
grep -q '"gpumesh-job"' "$work/config.json" || { echo "job_user is not gpumesh-job"; cat "$work/config.json"; exit 1; }
# The unit as installed.
# Documentation=man:gpumesh-node(1) is checked with man, where there is
# one: the package installs the page.
man=yes; command -v man >/dev/null || man=no
systemd-analyze verify --man=$man /usr/lib/systemd/system/gpumesh.service
score=$(systemd-analyze security --offline=true /usr/lib/systemd/system/gpumesh.service 2>&1 \
  | sed -n 's/.*Overall exposure level for gpumesh.service: \([0-9.]*\).*/\1/p')
[ -n "$score" ] || { echo "no security score"; exit 1; }
echo "score $score"
# Remove keeps the edited conffile; purge removes it.
echo '# edited' >>/etc/gpumesh/config.toml
dpkg -r gpumesh >>"$work/dpkg.log" 2>&1
[ ! -e /usr/bin/gpumesh ] || { echo "binary left after dpkg -r"; exit 1; }
grep -q '# edited' /etc/gpumesh/config.toml || { echo "dpkg -r lost the edited config"; exit 1; }
dpkg -P gpumesh >>"$work/dpkg.log" 2>&1
[ ! -e /etc/gpumesh/config.toml ] || { echo "config left after dpkg -P"; exit 1; }
