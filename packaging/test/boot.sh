#!/usr/bin/env bash
# Boots Debian bookworm with systemd in a container (systemd-nspawn),
# with a gpumesh .deb installed and its service enabled on simulated
# GPUs, and lets a check unit inside report how the service came up:
#   unshare --mount --propagation private bash boot.sh DEB WORK
# WORK/rootfs is the container's root (mmdebstrap, from Debian's
# mirror; reused when it is there). The container has a network of its
# own (--private-network: loopback only) and is not registered with
# machined, and what systemd-nspawn keeps under /run goes to a tmpfs of
# this mount namespace, so nothing of it outlives the boot. The check's report is
# left in WORK/check, the doctor's in WORK/doctor.json.
set -euo pipefail
deb=$1 work=$2
root=$work/rootfs
if [ ! -x "$root/usr/lib/systemd/systemd" ]; then
  rm -rf "$root"
  mmdebstrap --quiet --variant=minbase --include=systemd,systemd-sysv,dbus,iproute2,nftables \
    bookworm "$root" </dev/null >"$work/mmdebstrap.log" 2>&1 || { tail -20 "$work/mmdebstrap.log"; exit 1; }
fi
cp "$deb" "$root/root/gpumesh.deb"
chroot "$root" dpkg -i /root/gpumesh.deb >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; exit 1; }
# The package's config (a reused root keeps the last run's edits), with
# simulated GPUs for sale and no bootstrap: a first node.
dpkg-deb --fsys-tarfile "$deb" | tar -xO ./etc/gpumesh/config.toml >"$root/etc/gpumesh/config.toml"
sed -i 's/^gpus = .*/gpus = "sim:t4:2"\nprice = ["t4=0.50"]/' "$root/etc/gpumesh/config.toml"
cat >"$root/usr/local/bin/gpumesh-check" <<'SH'
#!/bin/bash
# Inside the container: wait for gpumesh.service, report, stop it, power off.
exec >/root/check 2>&1
for _ in $(seq 120); do
  case $(systemctl show -p ActiveState --value gpumesh.service) in active|failed) break ;; esac
  sleep 1
done
systemctl show -p ActiveState -p SubState -p StatusText -p Result -p NRestarts gpumesh.service
pid=$(systemctl show -p MainPID --value gpumesh.service)
grep -E '^(CapBnd|NoNewPrivs|Seccomp):' "/proc/$pid/status" || true
echo "cgroup $(cat /proc/$pid/cgroup | tr '\n' ' ')"
# As an operator would: the default data dir is the service's.
gpumesh doctor --json >/root/doctor.json
echo "doctor exit $?"
# A renter's node beside it rents a GPU and runs a job under the unit:
# the sandbox, job_user and the job network with the unit's capabilities.
id=$(gpumesh id --json | sed -n 's/.*"peer_id": *"\([^"]*\)".*/\1/p')
renter=(--data /root/renter --api 127.0.0.1:7451)
gpumesh node "${renter[@]}" --listen /ip4/127.0.0.1/tcp/4002 --gpus none \
  --bootstrap "/ip4/127.0.0.1/tcp/4001/p2p/$id" >/root/renter.log 2>&1 &
for _ in $(seq 60); do gpumesh peers "${renter[@]}" >/dev/null 2>&1 && break; sleep 1; done
code=1
for _ in $(seq 20); do
  gpumesh run "${renter[@]}" model=t4 --count 1 --max-price 1 --hours 1 --allow-unproven --allow-simulated \
    -- sh -c 'echo "job user $(id -un)"; grep CapEff /proc/self/status; ip -4 -o addr show | grep -v " lo "' \
    >/root/job.out 2>&1 && { code=0; break; }
  code=$?
  grep -q "no lease made" /root/job.out || break
  sleep 2
done
sed 's/^/job: /' /root/job.out
echo "job exit $code"
journalctl -b -u gpumesh.service --no-pager -o short-monotonic | tail -40
echo "warnings: $(journalctl -b -u gpumesh.service -p warning --no-pager -o cat | wc -l)"
systemctl stop gpumesh.service
systemctl show -p ActiveState -p Result gpumesh.service | sed 's/^/after stop: /'
# A config the node cannot load: exit 78, and no restart loop.
cp /etc/gpumesh/config.toml /root/config.good
echo 'colour = "blue"' >>/etc/gpumesh/config.toml
# start returns once the start job fails; a restart would show as
# SubState=auto-restart.
systemctl start gpumesh.service 2>/dev/null
systemctl show -p SubState -p ExecMainStatus gpumesh.service | sed 's/^/bad config: /'
cp /root/config.good /etc/gpumesh/config.toml
echo done
systemctl poweroff --no-block
SH
chmod 755 "$root/usr/local/bin/gpumesh-check"
cat >"$root/etc/systemd/system/gpumesh-check.service" <<'UNIT'
[Unit]
Description=report how gpumesh.service came up (packaging test)
Wants=gpumesh.service
After=gpumesh.service
[Service]
Type=oneshot
ExecStart=/usr/local/bin/gpumesh-check
[Install]
WantedBy=multi-user.target
UNIT
systemctl --root="$root" enable gpumesh.service gpumesh-check.service >/dev/null 2>&1
rm -f "$root/root/check" "$root/root/doctor.json"
mkdir -p "$root/var/log/journal"
mount -t tmpfs -o mode=0755 tmpfs /run
timeout 240 systemd-nspawn --quiet --register=no --keep-unit --private-network --console=pipe -D "$root" -b \
  </dev/null >"$work/console.log" 2>&1 || echo "systemd-nspawn exit $?" >>"$work/console.log"
cp "$root/root/check" "$work/check" 2>/dev/null || { echo "no report from the container"; tail -30 "$work/console.log"; exit 1; }
cp "$root/root/doctor.json" "$work/doctor.json" 2>/dev/null || true
