//go:build linux

package runtime_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/internal/testenv"
	"github.com/gpumesh/gpumesh/node/runtime"
	"github.com/gpumesh/gpumesh/node/runtime/runtimetest"
)

// containerNetChildEnv marks the copy of the test binary that
// TestContainerJobNetwork runs in its lab's host namespace: its value is
// "<engine> <internet namespace>".
const containerNetChildEnv = "GPUMESH_RUNTIME_CONTAINER_NET_CHILD"

// TestContainerJobNetwork runs docker's and podman's containers with a
// job network, from a runtime in a lab "host" namespace (as
// TestJobNetwork does for the process runtime): they reach the
// "internet" through NAT and nothing of the host, the LAN or the
// metadata address; the node reaches a server in them by DialPort; and
// nothing is left once they end.
func TestContainerJobNetwork(t *testing.T) {
	if v := os.Getenv(containerNetChildEnv); v != "" {
		engine, inet, _ := strings.Cut(v, " ")
		containerNetChild(t, engine, inet)
		return
	}
	needNetLab(t)
	if _, err := exec.LookPath("nsenter"); err != nil {
		testenv.Skip(t, testenv.Jobnet, "needs nsenter (util-linux)")
	}
	for _, engine := range []string{"docker", "podman"} {
		t.Run(engine, func(t *testing.T) {
			runtimetest.Engine(t, engine) // skips without one; imports the image here
			host, inet := netLab(t)
			self, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			// nsenter, not "ip netns exec", which mounts a sysfs of the
			// namespace's own over /sys and so hides the cgroup mounts
			// the engines need.
			cmd := exec.Command("nsenter", "--net=/run/netns/"+host, self, "-test.run", "^TestContainerJobNetwork$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), containerNetChildEnv+"="+engine+" "+inet)
			out, err := cmd.CombinedOutput()
			t.Logf("in namespace %s:\n%s", host, out)
			if err != nil {
				t.Fatalf("the test in the lab's host namespace failed: %v", err)
			}
			if !strings.Contains(string(out), "--- PASS: TestContainerJobNetwork") {
				t.Fatal("the test in the lab's host namespace did not pass")
			}
		})
	}
}

// ncProbe is bashProbe for busybox: nc instead of bash's /dev/tcp. It
// first waits (at most 10 s) for the default route, and says whether the
// route was there when the job began.
const ncProbe = `
if ip -4 route show default | grep -q via; then echo "ROUTE-AT-START"; fi
i=0; while ! ip -4 route show default | grep -q via && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
probe() {
	if out=$(timeout 3 nc "$2" "$3" </dev/null 2>&1) && [ -n "$out" ]; then echo "OK $1 $out"; else echo "FAIL $1"; fi
}
`

// containerNetChild is TestContainerJobNetwork in the lab's host
// namespace, for engine.
func containerNetChild(t *testing.T, engine, inet string) {
	image := runtimetest.Engine(t, engine)
	inetPort := serve(t, inet, "0.0.0.0:0", "inet")
	hostPort := serve(t, "", "0.0.0.0:0", "host")
	rt, err := runtime.New(engine, runtime.Options{Log: testLogger(t), Net: &runtime.NetConfig{DNS: []netip.Addr{netip.MustParseAddr(inetAddr)}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := runtime.NetworkIsolation(rt); err != nil {
		t.Fatalf("NetworkIsolation = %v, want nil", err)
	}

	var out syncBuffer
	s := spec(t, &out, "sh", "-c", netProbes(ncProbe, inetPort, hostPort, "sed 's/^/RESOLV /' /etc/resolv.conf"))
	s.JobID, s.Image = "0be1", image
	res := runJob(t, rt, s)
	got := out.String()
	t.Logf("job output:\n%s", got)
	if res.ExitCode != 0 {
		t.Fatalf("probe container: %+v", res)
	}
	checkProbes(t, got, map[string]bool{"inet": true, "lan": false, "meta": false, "loopback": false, "gateway": false, "hostwan": false})
	if !strings.Contains(got, "from "+wanAddr) {
		t.Errorf("the internet server did not see the host's address (no NAT?)")
	}
	if strings.Contains(got, "IPV6 ") && !strings.Contains(got, "IPV6 lo") {
		t.Errorf("container has IPv6 addresses beyond loopback")
	}
	if !strings.Contains(got, "RESOLV nameserver "+inetAddr+"\n") {
		t.Errorf("the container's resolv.conf does not name NetConfig.DNS")
	}
	if engine == "podman" && !strings.Contains(got, "ROUTE-AT-START") {
		t.Errorf("podman's container began before its network was up")
	}
	noLeftovers(t)

	// A job that ends at once (before docker's container could be
	// linked) keeps its result.
	s = spec(t, &out, "sh", "-c", "exit 7")
	s.JobID, s.Image = "e7", image
	if res := runJob(t, rt, s); res.ExitCode != 7 {
		t.Errorf("short container: %+v, want exit 7", res)
	}
	noLeftovers(t)

	// A container of the same name left by a node that died: the new
	// one fails to start, and the leftover gets no link.
	leftover := exec.Command(engine, "run", "-d", "--rm", "--network", "none", "--ulimit", "nofile=1024:1024", "--name", "gpumesh-1eff-1", image, "sleep", "60")
	if out, err := leftover.CombinedOutput(); err != nil {
		t.Fatalf("leftover container: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command(engine, "rm", "-f", "gpumesh-1eff-1").Run() })
	s = spec(t, &out, "sh", "-c", "exit 0")
	s.JobID, s.Image = "1eff", image
	if res := runJob(t, rt, s); res.ExitCode == 0 {
		t.Errorf("a container named as a leftover one: %+v, want the engine's failure", res)
	}
	if links, err := exec.Command(engine, "exec", "gpumesh-1eff-1", "ip", "-o", "link").CombinedOutput(); err != nil || strings.Contains(string(links), "eth0") {
		t.Errorf("the leftover container's links: %s (%v), want loopback only", links, err)
	}
	noLeftovers(t)

	// A server in the container, on all its addresses: the node reaches
	// it through DialPort, and no longer once the container has ended.
	lines := newLines()
	s = spec(t, lines, "sh", "-c", "echo hello > index.html; echo SERVING; exec httpd -f -p 8000")
	s.JobID, s.Image = "5e4e", image
	p := start(t, rt, s)
	if l := lines.next(t); l != "SERVING" {
		t.Fatalf("server container said %q", l)
	}
	pd, ok := p.(runtime.PortDialer)
	if !ok {
		t.Fatalf("%T is not a PortDialer", p)
	}
	eventually(t, "DialPort(8000) to answer HTTP", func() bool { return httpVia(pd, 8000) == "200 OK" })
	if err := p.Stop(time.Second); err != nil {
		t.Errorf("Stop: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := pd.DialPort(ctx, 8000); err == nil {
		c.Close()
		t.Error("DialPort reached the container after it ended")
	} else if !errors.Is(err, runtime.ErrExited) {
		t.Errorf("DialPort after the end = %v, want ErrExited", err)
	}
	noLeftovers(t)
}
