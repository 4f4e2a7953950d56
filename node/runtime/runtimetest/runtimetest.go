//go:build linux

// Package runtimetest gives tests a container engine to run jobs in: it
// skips a test where no docker or podman engine answers (fails it where
// GPUMESH_REQUIRE lists the engine), fits podman to a
// sandboxed host, and builds a small test image from the host's static
// busybox, so that tests pull nothing.
package runtimetest

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/internal/testenv"
)

// BuiltImage is the image the container tests build from a static
// busybox when GPUMESH_TEST_IMAGE names none: tests pull nothing.
const BuiltImage = "localhost/gpumesh-test-busybox:latest"

// Engine skips t unless the engine name answers "<name> info" (and
// fails it instead where GPUMESH_REQUIRE lists name: testenv.Skip),
// and returns an image it holds: GPUMESH_TEST_IMAGE, else BuiltImage,
// imported on first use from a static busybox (Debian's busybox-static).
// podman is first fitted to a sandboxed host (fitPodman).
func Engine(t testing.TB, name string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		testenv.Skip(t, name, "no %s client", name)
	}
	if name == "podman" && os.Getenv(podmanFitted) == "" {
		fitPodman(t, bin)
	}
	if out, err := exec.Command(name, "info").CombinedOutput(); err != nil {
		testenv.Skip(t, name, "%s engine not available: %v: %s", name, err, lastLine(out))
	}
	if image := os.Getenv("GPUMESH_TEST_IMAGE"); image != "" {
		if err := exec.Command(name, "image", "inspect", image).Run(); err != nil {
			testenv.Skip(t, name, "image %s not present in %s: %v", image, name, err)
		}
		return image
	}
	if exec.Command(name, "image", "inspect", BuiltImage).Run() == nil {
		return BuiltImage
	}
	rootfs := busyboxRootfs(t, name)
	cmd := exec.Command(name, "import", "--change", "ENV PATH=/bin", "-", BuiltImage)
	cmd.Stdin = bytes.NewReader(rootfs)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s import: %v: %s", name, err, lastLine(out))
	}
	return BuiltImage
}

// podmanFitted is set (and inherited by the tests' child processes) once
// fitPodman has run.
const podmanFitted = "GPUMESH_TEST_PODMAN_FITTED"

// fitPodman fits podman (at bin) to a sandboxed host such as CI's, for
// the rest of t (and the processes it starts): a containers.conf with no default network, that picks runc
// where it is installed
// (crun refuses hosts with cgroup v1 and v2 controllers both mounted),
// and a podman on PATH that adds a modest nproc limit to "run". As root,
// podman otherwise raises RLIMIT_NPROC to 1048576, which a host without
// CAP_SYS_RESOURCE refuses, and the runtime's own --ulimit flags replace
// containers.conf's default_ulimits.
func fitPodman(t testing.TB, bin string) {
	t.Helper()
	dir := t.TempDir()
	// Containers run without Options.Net get no network rather than
	// podman's default bridge, which would leave a link and firewall
	// rules on the test machine.
	conf := "[containers]\nnetns = \"none\"\n"
	if _, err := exec.LookPath("runc"); err == nil {
		conf += "[engine]\nruntime = \"runc\"\n"
	}
	wrapper := fmt.Sprintf("#!/bin/sh\nif [ \"$1\" = run ]; then shift; exec %q run --ulimit nproc=4096:4096 \"$@\"; fi\nexec %q \"$@\"\n", bin, bin)
	if err := errors.Join(
		os.WriteFile(filepath.Join(dir, "containers.conf"), []byte(conf), 0o644),
		os.WriteFile(filepath.Join(dir, "podman"), []byte(wrapper), 0o755),
	); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CONTAINERS_CONF", filepath.Join(dir, "containers.conf"))
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv(podmanFitted, "1")
}

// busyboxRootfs is a tar of a root file system holding a static busybox
// as /bin/busybox and a link to it for each of its applets, for the
// test image of engine.
func busyboxRootfs(t testing.TB, engine string) []byte {
	t.Helper()
	bin, err := exec.LookPath("busybox")
	if err != nil {
		testenv.Skip(t, engine, "no busybox to build the %s test image from (install busybox-static, or set GPUMESH_TEST_IMAGE)", engine)
	}
	f, err := elf.Open(bin)
	if err != nil {
		testenv.Skip(t, engine, "busybox %s: %v", bin, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			f.Close()
			testenv.Skip(t, engine, "busybox %s is dynamically linked: install busybox-static, or set GPUMESH_TEST_IMAGE", bin)
		}
	}
	f.Close()
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	list, err := exec.Command(bin, "--list").Output()
	if err != nil {
		t.Fatalf("busybox --list: %v", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, dir := range []string{"bin/", "etc/", "tmp/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(data))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(data); err != nil {
		t.Fatal(err)
	}
	for _, applet := range strings.Fields(string(list)) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", Mode: 0o777}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// ImageWithEnv returns an image of engine name made from image with
// each of env ("KEY=VALUE") set as an ENV of the image, as images set
// variables the node must override; it is removed when t ends.
func ImageWithEnv(t testing.TB, name, image string, env ...string) string {
	t.Helper()
	dir := t.TempDir()
	dockerfile := "FROM " + image + "\n"
	for _, kv := range env {
		dockerfile += "ENV " + kv + "\n"
	}
	ctx := filepath.Join(dir, "context")
	if err := errors.Join(os.Mkdir(ctx, 0o755), os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644)); err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("localhost/gpumesh-test-env-%d:latest", os.Getpid())
	if out, err := exec.Command(name, "build", "-q", "-t", tag, "-f", filepath.Join(dir, "Dockerfile"), ctx).CombinedOutput(); err != nil {
		t.Fatalf("%s build: %v: %s", name, err, lastLine(out))
	}
	t.Cleanup(func() { _ = exec.Command(name, "rmi", "-f", tag).Run() })
	return tag
}
