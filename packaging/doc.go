// Package packaging holds what gpumesh's .deb and .rpm install beside
// the binary, and the tests of those packages; it has no Go code of its
// own. tools/pkg builds the packages (`make package`) from:
//
//   - gpumesh.service: the hardened systemd unit (Type=notify, with the
//     node's sd_notify readiness, status and watchdog; root with a
//     bounding set of the capabilities job sandboxes and job networks
//     need);
//   - sysusers.conf: the gpumesh-job user that renters' jobs run as;
//   - sysctl.conf: net.ipv4.ip_forward=1 for job networks, set at boot
//     (the unit may not write /proc/sys);
//   - config.toml: /etc/gpumesh/config.toml, a conffile;
//   - postinstall.sh, preremove.sh, postremove.sh: the maintainer
//     scripts (they use systemctl only under a running systemd).
//
// The tests (package_test.go; `make package-test`) build the packages,
// install the .deb into an overlay of this machine's root in a private
// mount namespace (test/install.sh), check the unit with systemd-analyze
// and, where systemd-nspawn and mmdebstrap are present, boot Debian with
// the package installed and see the service report ready, log to the
// journal with levels, answer `gpumesh doctor`, run a job a renter's
// node beside it rents, stop cleanly and refuse a bad config without a
// restart loop (test/boot.sh). docs/operators.md is the operator's
// guide.
package packaging
