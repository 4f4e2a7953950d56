package packaging

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/internal/testenv"
	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/api"
)

// maxExposure is the highest `systemd-analyze security --offline=true`
// exposure the unit may score (0 safe .. 10 unsafe; a unit with no
// hardening scores 9.6). It runs as root with a bounding set; see the
// unit's comments for what it cannot restrict.
const maxExposure = 5.5

// TestShippedConfigParses: /etc/gpumesh/config.toml as shipped is a
// config the node loads, every key known and well-typed. The job user
// it names is made by the package; where it does not exist here, the
// test reads it as nobody (the install test loads it with its user).
func TestShippedConfigParses(t *testing.T) {
	b, err := os.ReadFile("config.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `job_user = "gpumesh-job"`) {
		t.Fatal(`config.toml does not set job_user = "gpumesh-job"`)
	}
	cfg, err := node.LoadConfig(node.Input{
		DataFlag: t.TempDir(), ConfigFlag: "/etc/gpumesh/config.toml",
		ReadFile: func(string) ([]byte, error) {
			return []byte(strings.Replace(string(b), `"gpumesh-job"`, `"nobody"`, 1)), nil
		},
	})
	if err != nil {
		t.Fatalf("the shipped config does not load: %v", err)
	}
	if cfg.Sources["job_user"] != "file:/etc/gpumesh/config.toml" || cfg.GPUs.String() != "auto" {
		t.Fatalf("job_user from %q, gpus %s", cfg.Sources["job_user"], cfg.GPUs)
	}
}

// TestUnitMatchesTheNode: the unit's paths are the node's defaults for
// the service, and it does not restart on the node's config exit code.
func TestUnitMatchesTheNode(t *testing.T) {
	b, err := os.ReadFile("gpumesh.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{
		"Type=notify", "WatchdogSec=", "StateDirectory=gpumesh", "Delegate=yes", "RestartPreventExitStatus=78",
		"ExecStart=/usr/bin/gpumesh node --data " + node.ServiceDataDir + " --config " + node.ServiceConfigFile,
	} {
		if !strings.Contains(unit, want+"\n") && !strings.Contains(unit, want) {
			t.Errorf("gpumesh.service lacks %q", want)
		}
	}
}

// build builds gpumesh and, with tools/pkg (nfpm), its .deb and .rpm
// into dir, and returns the .deb's path.
func build(t *testing.T, dir string) string {
	t.Helper()
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if p, err := exec.LookPath("go"); err == nil {
		gobin = p
	}
	run := func(wd string, name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = wd
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	bin, tool := filepath.Join(dir, "gpumesh"), filepath.Join(dir, "pkgtool")
	run("..", gobin, "build", "-o", bin, "./cmd/gpumesh")
	run(filepath.Join("..", "tools", "pkg"), gobin, "build", "-o", tool, ".")
	src, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	run(dir, tool, "-bin", bin, "-src", src, "-out", filepath.Join(dir, "dist"))
	debs, _ := filepath.Glob(filepath.Join(dir, "dist", "gpumesh_*_*.deb"))
	rpms, _ := filepath.Glob(filepath.Join(dir, "dist", "gpumesh-*.rpm"))
	if len(debs) != 1 || len(rpms) != 1 {
		t.Fatalf("packages built: %v %v; want a .deb and an .rpm", debs, rpms)
	}
	return debs[0]
}

// need skips (or, where CI requires capability, fails) the test unless
// it runs as root with every command on PATH.
func need(t *testing.T, capability string, commands ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, capability, "needs root")
	}
	for _, c := range commands {
		if _, err := exec.LookPath(c); err != nil {
			testenv.Skip(t, capability, "needs %s on PATH", c)
		}
	}
}

// TestPackage builds the packages, installs the .deb into an overlay of
// this machine's /etc, /usr and /var (test/install.sh: files, conffile,
// the job user, the shipped config loading, `systemd-analyze verify` and
// the security score, then remove and purge), and, where it can, boots
// Debian with the package in a container (test/boot.sh): the service
// comes up ready with its status, `gpumesh doctor` as root finds it, a
// renter's node beside it runs a job on its simulated GPUs, and it stops
// cleanly.
func TestPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds packages and installs them: not in -short")
	}
	need(t, testenv.Package, "dpkg", "dpkg-deb", "unshare", "systemd-analyze", "bash")
	dir := t.TempDir()
	deb := build(t, dir)

	t.Run("install", func(t *testing.T) {
		work := t.TempDir()
		out, err := exec.Command("unshare", "--mount", "--propagation", "private", "bash", "test/install.sh", deb, work).CombinedOutput()
		if err != nil {
			if strings.Contains(string(out), "overlay") && strings.Contains(string(out), "mount") {
				testenv.Skip(t, testenv.Package, "no overlayfs here: %s", out)
			}
			t.Fatalf("install.sh: %v\n%s", err, out)
		}
		m := regexp.MustCompile(`(?m)^score ([0-9.]+)$`).FindStringSubmatch(string(out))
		if m == nil {
			t.Fatalf("no security score in:\n%s", out)
		}
		score, _ := strconv.ParseFloat(m[1], 64)
		t.Logf("systemd-analyze security --offline=true: exposure %.1f (at most %.1f)", score, maxExposure)
		if score > maxExposure {
			t.Errorf("the unit's exposure is %.1f, above %.1f", score, maxExposure)
		}
	})

	t.Run("boot", func(t *testing.T) {
		need(t, testenv.Nspawn, "systemd-nspawn", "mmdebstrap", "chroot")
		work := t.TempDir()
		if cache := os.Getenv("GPUMESH_ROOTFS_CACHE"); cache != "" {
			work = cache // keeps WORK/rootfs between runs (mmdebstrap takes a minute or two)
		}
		out, err := exec.Command("unshare", "--mount", "--propagation", "private", "bash", "test/boot.sh", deb, work).CombinedOutput()
		report, _ := os.ReadFile(filepath.Join(work, "check"))
		t.Logf("the container's report:\n%s", report)
		if err != nil {
			t.Fatalf("boot.sh: %v\n%s", err, out)
		}
		for _, want := range []string{
			"ActiveState=active", "SubState=running", "NRestarts=0", "NoNewPrivs:\t1",
			"after stop: ActiveState=inactive", "after stop: Result=success",
			// A renter's node beside it ran a job on the service's GPUs:
			// as the package's user, with no capabilities, in a job
			// network of its own (the unit's capabilities suffice).
			"job exit 0", "job: job user gpumesh-job", "job: CapEff:\t0000000000000000", "inet 10.213.",
			// A config the node cannot load is not restarted.
			"bad config: ExecMainStatus=78", "bad config: SubState=failed",
		} {
			if !strings.Contains(string(report), want) {
				t.Errorf("the report lacks %q", want)
			}
		}
		// The node's log lines reach the journal with their level parsed
		// (no <N> left in the text) and without a time of their own.
		logLines := regexp.MustCompile(`(?m)gpumesh\[\d+\]: .*$`).FindAll(report, -1)
		sawLevel := false
		for _, l := range logLines {
			sawLevel = sawLevel || strings.Contains(string(l), "]: level=INFO ")
			if regexp.MustCompile(`[ :]time=|\]: <\d>`).Match(l) {
				t.Errorf("journal line %q: want no time= and no <N> prefix", l)
			}
		}
		if !sawLevel {
			t.Error("no level=INFO line of the node in the journal")
		}
		if !regexp.MustCompile(`(?m)^StatusText=\d+ peers, reach \S+, 2 of 2 GPUs free$`).Match(report) {
			t.Error("no STATUS= from the node: want StatusText=N peers, reach R, 2 of 2 GPUs free")
		}
		// `gpumesh doctor` as root, with no flags, found the service's node.
		b, err := os.ReadFile(filepath.Join(work, "doctor.json"))
		if err != nil {
			t.Fatal(err)
		}
		var rep api.DoctorReport
		if err := json.Unmarshal(b, &rep); err != nil || rep.PeerID == "" {
			t.Fatalf("doctor: %v, peer %q: want the running node's report\n%s", err, rep.PeerID, b)
		}
		status := map[string]string{}
		for _, c := range rep.Checks {
			status[c.Name] = c.Status
		}
		// A node alone has no peers (fail) and no reach verdict (warn);
		// what the unit could break must pass.
		for _, name := range []string{"gpus", "disk", "api-bind", "listen", "services"} {
			if status[name] != api.StatusOK {
				t.Errorf("doctor check %s: %q, want ok (%v)", name, status[name], status)
			}
		}
	})
}
