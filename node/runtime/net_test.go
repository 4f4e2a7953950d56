//go:build linux

package runtime_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/internal/testenv"
	"github.com/gpumesh/gpumesh/node/runtime"
	"golang.org/x/sys/unix"
)

// netChildEnv marks the copy of the test binary that TestJobNetwork runs
// inside its "host" namespace; its value is the "internet" namespace.
const netChildEnv = "GPUMESH_RUNTIME_NET_CHILD"

// Addresses of the lab TestJobNetwork builds. 11.99.0.0/24 is a public
// range, safe here because the lab has no link to the machine's network.
const (
	inetAddr  = "11.99.0.1"       // the "internet" server
	wanAddr   = "11.99.0.2"       // the host's address towards it
	lanAddr   = "192.168.77.1"    // a LAN server
	metaAddr  = "169.254.169.254" // a cloud metadata server
	labPrefix = "gmjtest-"
)

// needNetLab skips unless this machine can build network namespaces.
func needNetLab(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Jobnet, "needs root: network namespaces, veth pairs and nftables")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Skip(t, testenv.Jobnet, "needs %s (iproute2, nftables)", tool)
		}
	}
	if _, err := exec.LookPath("bash"); err != nil {
		testenv.Skip(t, testenv.Jobnet, "needs bash (its /dev/tcp probes the network)")
	}
}

func ipT(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// netLab makes two namespaces joined by a veth pair: "host", where the
// runtime runs, with a default route to "inet", which holds the
// internet, LAN and metadata addresses. Neither has a link to the
// machine's network; both go at the end of the test.
func netLab(t *testing.T) (host, inet string) {
	t.Helper()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	host, inet = labPrefix+hex.EncodeToString(b)+"-h", labPrefix+hex.EncodeToString(b)+"-i"
	for _, ns := range []string{host, inet} {
		ipT(t, "netns", "add", ns)
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("remove namespace %s: %v: %s", ns, err, out)
			}
		})
		ipT(t, "-n", ns, "link", "set", "lo", "up")
	}
	ipT(t, "-n", host, "link", "add", "wan0", "type", "veth", "peer", "name", "wan1", "netns", inet)
	ipT(t, "-n", host, "addr", "add", wanAddr+"/24", "dev", "wan0")
	ipT(t, "-n", host, "link", "set", "wan0", "up")
	ipT(t, "-n", host, "route", "add", "default", "via", inetAddr)
	ipT(t, "-n", inet, "addr", "add", inetAddr+"/24", "dev", "wan1")
	ipT(t, "-n", inet, "link", "set", "wan1", "up")
	for _, a := range []string{lanAddr, metaAddr} {
		ipT(t, "-n", inet, "addr", "add", a+"/32", "dev", "lo")
	}
	return host, inet
}

// TestJobNetwork runs the runtime in a lab "host" namespace (a copy of
// this test binary, started there) and checks what its jobs can reach.
func TestJobNetwork(t *testing.T) {
	if inet := os.Getenv(netChildEnv); inet != "" {
		jobNetworkChild(t, inet)
		return
	}
	needNetLab(t)
	host, inet := netLab(t)
	runInLab(t, host, "TestJobNetwork", netChildEnv+"="+inet)
}

// runInLab runs the test called name, alone, in a copy of this test
// binary started in the lab namespace host with env added (the mark of
// the copy), and fails unless it passes there (goroutine leaks
// included: the copy's TestMain checks them).
func runInLab(t *testing.T, host, name, env string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", host, self, "-test.run", "^"+name+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), env)
	out, err := cmd.CombinedOutput()
	t.Logf("in namespace %s:\n%s", host, out)
	if err != nil {
		t.Fatalf("the test in the lab's host namespace failed: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatal("the test in the lab's host namespace did not pass")
	}
}

// jobNetworkChild is TestJobNetwork inside the lab's host namespace.
func jobNetworkChild(t *testing.T, inet string) {
	inetPort := serve(t, inet, "0.0.0.0:0", "inet")
	hostPort := serve(t, "", "0.0.0.0:0", "host")

	t.Run("filter", func(t *testing.T) {
		rt := netRuntime(t, runtime.NetConfig{})
		if err := runtime.NetworkIsolation(rt); err != nil {
			t.Fatalf("NetworkIsolation = %v, want nil", err)
		}
		got := probeJob(t, rt, inetPort, hostPort)
		want := map[string]bool{"inet": true, "lan": false, "meta": false, "loopback": false, "gateway": false, "hostwan": false}
		checkProbes(t, got, want)
		if !strings.Contains(got, "from "+wanAddr) {
			t.Errorf("the internet server did not see the host's address (no NAT?)")
		}
		if strings.Contains(got, "IPV6 ") && !strings.Contains(got, "IPV6 lo") {
			t.Errorf("job has IPv6 addresses beyond loopback")
		}
		closeRuntime(t, rt)
		noLeftovers(t)
	})
	t.Run("allow-lan", func(t *testing.T) {
		rt := netRuntime(t, runtime.NetConfig{AllowLAN: true, DNS: []netip.Addr{netip.MustParseAddr(inetAddr)}})
		got := probeJob(t, rt, inetPort, hostPort, "sed 's/^/RESOLV /' /etc/resolv.conf")
		want := map[string]bool{"inet": true, "lan": true, "meta": false, "loopback": false, "gateway": false, "hostwan": false}
		checkProbes(t, got, want)
		if !strings.Contains(got, "RESOLV nameserver "+inetAddr+"\n") {
			t.Errorf("the job's resolv.conf does not name NetConfig.DNS")
		}
		closeRuntime(t, rt)
		noLeftovers(t)
	})
	t.Run("jobs-apart", func(t *testing.T) { jobsApart(t, inetPort) })
	t.Run("leftovers", func(t *testing.T) {
		// A table left by a node that died: New removes it when no job
		// link is left, and keeps it while one is (another node's job).
		ipT(t, "link", "add", "gmj0badc0de", "type", "veth", "peer", "name", "keep0")
		if out, err := exec.Command("nft", "add", "table", "inet", "gpumesh_jobs").CombinedOutput(); err != nil {
			t.Fatalf("nft add table: %v: %s", err, out)
		}
		netRuntime(t, runtime.NetConfig{Warm: -1})
		if exec.Command("nft", "list", "table", "inet", "gpumesh_jobs").Run() != nil {
			t.Error("New removed the table while a job link exists")
		}
		if exec.Command("ip", "link", "show", "gmj0badc0de").Run() != nil {
			t.Error("New removed a job link")
		}
		ipT(t, "link", "del", "gmj0badc0de")
		netRuntime(t, runtime.NetConfig{Warm: -1})
		noLeftovers(t)
		if exec.Command("ip", "link", "show", "wan0").Run() != nil {
			t.Error("New removed a link that is not a job's")
		}
	})
	noLeftovers(t)
}

// netRuntime is a process runtime with cfg as its job network, closed
// at the end of the test.
func netRuntime(t *testing.T, cfg runtime.NetConfig) runtime.Runtime {
	t.Helper()
	rt, err := runtime.New("process", runtime.Options{Log: testLogger(t), Net: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeRuntime(t, rt) })
	return rt
}

// closeRuntime closes rt, which releases the job networks it keeps
// ready.
func closeRuntime(t *testing.T, rt runtime.Runtime) {
	t.Helper()
	if err := rt.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// bashProbe tries a target with bash's /dev/tcp.
const bashProbe = `
probe() {
	if out=$(timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1" && cat <&3' "$2" "$3" 2>&1); then echo "OK $1 $out"; else echo "FAIL $1"; fi
}
`

// probeTargets runs probe (defined before it) against each target,
// each printing "OK name <what the server said>" or "FAIL name", then
// the extra lines, then the job's IPv6 addresses.
const probeTargets = `
set -- $(ip -4 route show default)
gw=$3
[ -n "$gw" ] || echo "NO-DEFAULT-ROUTE"
probe inet %[1]s %[5]d &
probe lan %[2]s %[5]d &
probe meta %[3]s %[5]d &
probe loopback 127.0.0.1 %[6]d &
probe gateway "$gw" %[6]d &
probe hostwan %[4]s %[6]d &
%[7]s
wait
while read -r a b c d e dev; do echo "IPV6 $dev"; done < /proc/net/if_inet6
`

// netProbes is probe's definition and probeTargets.
func netProbes(probe string, inetPort, hostPort int, extra ...string) string {
	return probe + fmt.Sprintf(probeTargets, inetAddr, lanAddr, metaAddr, wanAddr, inetPort, hostPort, strings.Join(extra, "\n"))
}

func probeJob(t *testing.T, rt runtime.Runtime, inetPort, hostPort int, extra ...string) string {
	t.Helper()
	var out syncBuffer
	res := runJob(t, rt, spec(t, &out, "bash", "-c", netProbes(bashProbe, inetPort, hostPort, extra...)))
	t.Logf("job output:\n%s", out.String())
	if res.ExitCode != 0 {
		t.Fatalf("probe job: %+v", res)
	}
	return out.String()
}

// checkProbes wants each probe of want in got, reached or not as want says.
func checkProbes(t *testing.T, got string, want map[string]bool) {
	t.Helper()
	if strings.Contains(got, "NO-DEFAULT-ROUTE") {
		t.Error("job has no default route")
	}
	for name, reach := range want {
		ok := strings.Contains(got, "OK "+name+" HELLO")
		failed := strings.Contains(got, "FAIL "+name+"\n")
		switch {
		case !ok && !failed:
			t.Errorf("probe %s: no result", name)
		case reach && !ok:
			t.Errorf("job could not reach %s, want reached", name)
		case !reach && ok:
			t.Errorf("job reached %s, want blocked", name)
		}
	}
}

// jobsApart runs two jobs at once: one serves HTTP on all its addresses
// and on 127.0.0.1 only; DialPort reaches both, the other job neither.
func jobsApart(t *testing.T, inetPort int) {
	rt := netRuntime(t, runtime.NetConfig{})
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.Skip(t, testenv.Python3, "needs python3 for the job's HTTP servers")
	}
	var outA syncBuffer
	sA := spec(t, &outA, "bash", "-c", `ip -4 -o addr show dev eth0 > "$HOME/addr"
python3 -m http.server --bind 127.0.0.1 8001 & exec python3 -m http.server --bind 0.0.0.0 8000`)
	a := start(t, rt, sA)
	pd, ok := a.(runtime.PortDialer)
	if !ok {
		t.Fatalf("%T is not a PortDialer", a)
	}
	for _, port := range []uint16{8000, 8001} {
		var status string
		eventually(t, fmt.Sprintf("DialPort(%d) to answer HTTP", port), func() bool {
			status = httpVia(pd, port)
			return status != ""
		})
		if !strings.Contains(status, "200") {
			t.Errorf("DialPort(%d): HTTP status %q, want 200", port, status)
		}
	}
	var addrA string
	eventually(t, "job A to write its address", func() bool {
		b, _ := os.ReadFile(filepath.Join(sA.WorkDir, "addr"))
		f := strings.Fields(string(b))
		if len(f) >= 4 {
			addrA, _, _ = strings.Cut(f[3], "/")
		}
		return addrA != ""
	})
	// The node dials in over the link; only other jobs may not.
	c, err := net.DialTimeout("tcp4", net.JoinHostPort(addrA, "8000"), 5*time.Second)
	if err != nil {
		t.Errorf("the node cannot reach job A's port over its link: %v", err)
	} else {
		c.Close()
	}
	// B, at the same time, started by another runtime (another node on
	// the machine): the internet yes, A no, another address.
	rt2 := netRuntime(t, runtime.NetConfig{})
	var outB syncBuffer
	b := start(t, rt2, spec(t, &outB, "bash", "-c", fmt.Sprintf(`
if timeout 3 bash -c 'exec 3<>/dev/tcp/%[1]s/8000'; then echo "OK peer"; else echo "FAIL peer"; fi
if timeout 3 bash -c 'exec 3<>/dev/tcp/%[2]s/%[3]d && cat <&3'; then echo; echo "OK inet"; else echo "FAIL inet"; fi
ip -4 -o addr show dev eth0`, addrA, inetAddr, inetPort)))
	wait(t, b)
	got := outB.String()
	t.Logf("job A at %s; job B said:\n%s", addrA, got)
	if !strings.Contains(got, "FAIL peer") {
		t.Errorf("job B reached job A's port")
	}
	if !strings.Contains(got, "OK inet") {
		t.Errorf("job B could not reach the internet while A ran")
	}
	if strings.Contains(got, addrA+"/") {
		t.Errorf("jobs A and B got the same address %s", addrA)
	}
	// B's end, the last job of its runtime, leaves A's filter in place.
	if exec.Command("nft", "list", "table", "inet", "gpumesh_jobs").Run() != nil {
		t.Errorf("the nft table went with job B while job A runs")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if c, err := pd.DialPort(ctx, 8000); err == nil {
		c.Close()
		t.Error("DialPort with a cancelled context succeeded")
	}
	if err := a.Stop(5 * time.Second); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if _, err := pd.DialPort(context.Background(), 8000); !errors.Is(err, runtime.ErrExited) {
		t.Errorf("DialPort after the end = %v, want ErrExited", err)
	}
}

// httpVia GETs / through DialPort and returns the status line ("" when
// the dial or the request failed).
func httpVia(pd runtime.PortDialer, port uint16) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pd.DialPort(ctx, port)
	if err != nil {
		return "" // not serving yet
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.0\r\n\r\n"); err != nil {
		return ""
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return ""
	}
	resp.Body.Close()
	return resp.Status
}

// noLeftovers wants no gmj* link and no nft table of ours in this
// namespace once no job runs.
func noLeftovers(t *testing.T) {
	t.Helper()
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], "gmj") {
			t.Errorf("link left after the jobs: %s", line)
		}
	}
	if exec.Command("nft", "list", "table", "inet", "gpumesh_jobs").Run() == nil {
		t.Error("nft table inet gpumesh_jobs left after the jobs")
	}
}

// serve accepts on addr in the namespace ns ("" for this one) until the
// test ends, writing "HELLO name <local> from <remote>" to each
// connection. It returns the port.
func serve(t *testing.T, ns, addr, name string) int {
	t.Helper()
	var ln net.Listener
	listen := func() (err error) { ln, err = net.Listen("tcp4", addr); return err }
	var err error
	if ns == "" {
		err = listen()
	} else {
		err = inNamespace(filepath.Join("/run/netns", ns), listen)
	}
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "HELLO %s %s from %s", name, c.LocalAddr(), c.RemoteAddr())
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().(*net.TCPAddr).Port
}

// inNamespace runs fn on a thread in the network namespace at path.
func inNamespace(path string, fn func() error) error {
	home, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return err
	}
	defer home.Close()
	target, err := os.Open(path)
	if err != nil {
		return err
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			errc <- err
			return
		}
		err := fn()
		if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
			goruntime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// TestJobNetworkWithoutRoot starts a stand-in node as nobody: its jobs
// get a network namespace with loopback only, and it cannot dial in.
func TestJobNetworkWithoutRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "needs root to start the stand-in node as another user")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.Skip(t, testenv.Python3, "needs python3 to test the job's loopback")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	base, err := os.MkdirTemp("/var/tmp", "gpumesh-runtime-test-")
	if err != nil {
		t.Skipf("no /var/tmp: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "node")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	work, ck := jobDirs(t, base)
	for _, d := range []string{work, ck} {
		if err := os.Chown(d, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	script := `grep -o '^ *[a-z0-9]*:' /proc/net/dev | tr -d ' ' | sed 's/^/LINK /'
python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); socket.create_connection(s.getsockname()); print("LO-OK")'
python3 -m http.server --bind 127.0.0.1 8002 >/dev/null 2>&1 & sleep 1; echo SERVING; wait`
	cmd := exec.Command(bin, work, ck, script)
	cmd.Env = []string{helperEnv + "=netrun", "PATH=" + runtime.DefaultPath}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("node log:\n%s", stderr.String())
	t.Logf("output:\n%s", out)
	if err != nil {
		t.Fatalf("stand-in node: %v", err)
	}
	got := string(out)
	if strings.Contains(got, "user namespaces do not work") {
		t.Skip("user namespaces do not work here")
	}
	for _, want := range []string{"LINK lo:", "LO-OK", "ISOLATION not isolated", "DIAL error", "EXIT"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Count(got, "LINK ") != 1 {
		t.Errorf("job sees links other than lo")
	}
}

// netHelper is the "netrun" helper mode: netrun WORKDIR CKDIR SCRIPT runs
// bash -c SCRIPT as a job with a network of its own, reports
// NetworkIsolation and a DialPort to 8002 once the job says SERVING,
// stops the job and prints "EXIT <code>".
func netHelper(args []string) int {
	rt, err := runtime.New("process", runtime.Options{Log: slog.New(slog.NewTextHandler(os.Stderr, nil)), Net: &runtime.NetConfig{}})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	if err := runtime.NetworkIsolation(rt); err != nil {
		fmt.Println("ISOLATION not isolated:", err)
	}
	pr, pw := io.Pipe()
	p, err := rt.Start(context.Background(), runtime.Spec{
		JobID: "feed", Argv: []string{"bash", "-c", args[2]}, WorkDir: args[0], CheckpointDir: args[1],
		Stdout: pw, Stderr: pw,
	})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		fmt.Println(sc.Text())
		if sc.Text() == "SERVING" {
			break
		}
	}
	go func() { _, _ = io.Copy(os.Stdout, pr) }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := p.(runtime.PortDialer).DialPort(ctx, 8002); err != nil {
		fmt.Println("DIAL error:", err)
	} else {
		fmt.Println("DIAL ok")
		c.Close()
	}
	_ = p.Stop(time.Second)
	pw.Close()
	fmt.Println("EXIT", strconv.Itoa(p.Result().ExitCode))
	return 0
}

func TestNetworkIsolationNeedsNet(t *testing.T) {
	if err := runtime.NetworkIsolation(newRuntime(t)); !errors.Is(err, runtime.ErrNotIsolated) {
		t.Errorf("NetworkIsolation without Options.Net = %v, want ErrNotIsolated", err)
	}
}

func TestNetConfigPool(t *testing.T) {
	for _, pool := range []string{"10.0.0.0/31", "fd00::/64"} {
		_, err := runtime.New("process", runtime.Options{Log: testLogger(t), Net: &runtime.NetConfig{Pool: netip.MustParsePrefix(pool)}})
		if err == nil || !strings.Contains(err.Error(), "pool") {
			t.Errorf("New with pool %s = %v, want an error about the pool", pool, err)
		}
	}
}
