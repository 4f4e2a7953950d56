// Package testenv decides what a test does when this machine lacks a
// capability it needs (a docker engine, a writable cgroup2, root...): it
// skips, saying why, unless GPUMESH_REQUIRE names that capability, and
// then it fails, naming it. CI (.ci/run) lists in GPUMESH_REQUIRE every
// capability it provided and checked, so a CI run cannot pass by
// skipping the tests that need one of them.
package testenv

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// RequireEnv is the environment variable that lists, comma-separated,
// the capabilities a test may not skip for.
const RequireEnv = "GPUMESH_REQUIRE"

// The capabilities tests skip for, each a name GPUMESH_REQUIRE may list.
const (
	// Root: the tests run as root (device nodes, chown, jobs run as
	// another user).
	Root = "root"
	// Netlab: testnet/netlab can build a namespace lab (root, ip, nft,
	// network namespaces and a usable /dev/net/tun; netlab.Check).
	Netlab = "netlab"
	// Jobnet: jobs can get networks of their own and tests namespaces
	// of their own (root, ip, nft, nsenter and bash).
	Jobnet = "jobnet"
	// Docker: a docker engine answers and holds or can build the test
	// image (node/runtime/runtimetest.Engine).
	Docker = "docker"
	// Podman: the same with podman.
	Podman = "podman"
	// Cgroup: a cgroup2 hierarchy this process may write, at
	// /sys/fs/cgroup or /sys/fs/cgroup/unified.
	Cgroup = "cgroup"
	// Chromium: a Chromium or Chrome on PATH (the Explorer's browser
	// test).
	Chromium = "chromium"
	// Python3: python3 on PATH (the HTTP servers of service jobs).
	Python3 = "python3"
	// Package: the packages can be built and a .deb installed into an
	// overlay of this machine's root (root, go, dpkg, unshare, overlayfs
	// and systemd-analyze; packaging/).
	Package = "package"
	// Nspawn: a Debian root can be made and booted with systemd in a
	// container (root, mmdebstrap with Debian's mirror, systemd-nspawn;
	// packaging/).
	Nspawn = "nspawn"
	// Torch: /usr/bin/python3 (or the python3 on PATH) imports
	// torch.distributed with gloo
	// (Debian's python3-torch; the cluster lab's DDP test).
	Torch = "torch"
	// Solc: npx can run the pinned solc-js (npm's solc@0.8.37, from
	// the npm registry or npm's cache), so that the chain module's
	// contracts can be recompiled and compared with the committed
	// build (chain/contracts/build.sh).
	Solc = "solc"
)

// Capabilities are the names GPUMESH_REQUIRE may list.
func Capabilities() []string {
	return []string{Root, Netlab, Jobnet, Docker, Podman, Cgroup, Chromium, Python3, Package, Nspawn, Torch, Solc}
}

// Skip ends t for want of capability: with t.Fatalf, as "required
// capability <capability> unavailable: <reason>", when GPUMESH_REQUIRE
// lists it, else with t.Skip and the reason. The reason is
// fmt.Sprintf(format, args...).
func Skip(t testing.TB, capability, format string, args ...any) {
	t.Helper()
	fail, msg := Decide(os.Getenv(RequireEnv), capability, fmt.Sprintf(format, args...))
	if fail {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Decide is Skip's decision for capability given require, the value of
// GPUMESH_REQUIRE: whether the test fails rather than skips, and the
// message it ends with. A capability that is not one of Capabilities is
// a mistake in the test, which fails.
func Decide(require, capability, reason string) (fail bool, msg string) {
	if !slices.Contains(Capabilities(), capability) {
		return true, fmt.Sprintf("testenv: unknown capability %q (want one of %s); the test wanted to skip: %s", capability, strings.Join(Capabilities(), ", "), reason)
	}
	if slices.Contains(Parse(require), capability) {
		return true, fmt.Sprintf("required capability %s unavailable: %s", capability, reason)
	}
	return false, fmt.Sprintf("%s (capability %s, not in %s)", reason, capability, RequireEnv)
}

// Parse splits a GPUMESH_REQUIRE value into its capabilities, dropping
// blanks.
func Parse(require string) []string {
	var caps []string
	for _, c := range strings.Split(require, ",") {
		if c = strings.TrimSpace(c); c != "" {
			caps = append(caps, c)
		}
	}
	return caps
}

// Unknown returns the names in require (a GPUMESH_REQUIRE value) that
// are not capabilities, which would otherwise require nothing.
func Unknown(require string) []string {
	var bad []string
	for _, c := range Parse(require) {
		if !slices.Contains(Capabilities(), c) {
			bad = append(bad, c)
		}
	}
	return bad
}
