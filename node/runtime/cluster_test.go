//go:build linux

package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/internal/testenv"
	"github.com/gpumesh/gpumesh/node/runtime"
)

// clusterChildEnv marks the copy of the test binary that TestCluster
// runs inside its lab "host" namespace.
const clusterChildEnv = "GPUMESH_RUNTIME_CLUSTER_CHILD"

// The cluster of the tests: three members of 100.64.0.0/24.
var (
	clusterPrefix = netip.MustParsePrefix("100.64.0.0/24")
	clusterHosts  = []runtime.HostEntry{
		{Addr: netip.MustParseAddr("100.64.0.1"), Name: "rank0"},
		{Addr: netip.MustParseAddr("100.64.0.2"), Name: "rank1"},
		{Addr: netip.MustParseAddr("100.64.0.3"), Name: "rank2"},
	}
)

// TestCluster runs the runtime in a lab "host" namespace (a copy of
// this test binary, started there) and gives its jobs cluster networks.
func TestCluster(t *testing.T) {
	if os.Getenv(clusterChildEnv) != "" {
		clusterChild(t)
		return
	}
	needNetLab(t)
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.Skip(t, testenv.Python3, "needs python3 for the cluster jobs")
	}
	host, _ := netLab(t)
	runInLab(t, host, "TestCluster", clusterChildEnv+"=1")
}

func clusterChild(t *testing.T) {
	rt := netRuntime(t, runtime.NetConfig{})
	if err := runtime.ClusterSupport(rt); err != nil {
		t.Fatalf("ClusterSupport = %v, want nil", err)
	}
	before, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("connect", func(t *testing.T) { clusterConnect(t, rt) })
	t.Run("members", func(t *testing.T) { clusterMembers(t, rt) })
	closeRuntime(t, rt)
	noLeftovers(t)
	if after, _ := os.Hostname(); after != before {
		t.Errorf("the node's hostname changed from %q to %q: a job's hostname must stay in its UTS namespace", before, after)
	}
}

// connects records the calls of a job's Connect.
type connects struct {
	mu   sync.Mutex
	dsts []netip.AddrPort
	// returned is closed when a Connect call to a held port returns.
	returned chan struct{}
}

func (c *connects) add(dst netip.AddrPort) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dsts = append(c.dsts, dst)
}

func (c *connects) list() []netip.AddrPort {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.dsts)
}

// clusterSpec is a job of rank rank (address 100.64.0.<rank+1>,
// hostname rank<rank>) running python3 -c script.
func clusterSpec(t *testing.T, out io.Writer, rank int, connect func(net.Conn, netip.AddrPort), script string, args ...string) runtime.Spec {
	s := spec(t, out, append([]string{"python3", "-u", "-c", script}, args...)...)
	s.Env = []string{"GLOO_SOCKET_IFNAME=eth0"} // the node's value wins
	s.Cluster = &runtime.ClusterNet{
		Addr: clusterHosts[rank].Addr, Prefix: clusterPrefix, Hostname: clusterHosts[rank].Name,
		Hosts: clusterHosts, Connect: connect,
	}
	return s
}

// connectScript is a cluster job that connects to another member (the
// test's Connect echoes), to the node's listener directly, sends UDP to
// another member, prints its names and variables, then holds a
// connection to another member open until stopped.
const connectScript = `
import os, socket

def line(*a):
    print(*a, flush=True)

s = socket.create_connection(("100.64.0.7", 4321), timeout=60)
s.sendall(b"ping")
s.shutdown(socket.SHUT_WR)
data = b""
while True:
    b = s.recv(100)
    if not b:
        break
    data += b
line("ECHO", data.decode())

ports = []
for l in open("/proc/net/tcp").readlines()[1:]:
    f = l.split()
    if f[3] == "0A" and f[1].startswith("0100007F:"):
        ports.append(int(f[1].split(":")[1], 16))
line("LISTENERS", len(ports))
for p in ports:
    c = socket.create_connection(("127.0.0.1", p), timeout=60)
    c.settimeout(60)
    try:
        r = c.recv(10)
        line("DIRECT", "closed" if r == b"" else "data")
    except ConnectionResetError:
        line("DIRECT", "closed")

u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    u.connect(("100.64.0.7", 9999))
    u.send(b"x")
    u.settimeout(3)
    u.recv(10)
    line("UDP", "delivered")
except socket.timeout:
    line("UDP", "timeout")
except OSError as e:
    line("UDP", "refused", e.errno)

line("HOSTNAME", socket.gethostname())
line("RESOLVE", socket.gethostbyname("rank0"), socket.gethostbyname("rank2"))
line("ENV", os.environ.get("GLOO_SOCKET_IFNAME"), os.environ.get("NCCL_SOCKET_IFNAME"), os.environ.get("TP_SOCKET_IFNAME"))
line("ADDR", " ".join(l.split()[3] for l in os.popen("ip -4 -o addr show dev gm0")))

h = socket.create_connection(("100.64.0.9", 4322), timeout=60)
line("HELD")
h.recv(1)
`

// clusterConnect: connections to another member reach Connect with the
// address dialled, and bytes flow both ways; one to the node's listener
// itself is closed without Connect; UDP to a member is refused; the
// hostname, hosts and variables are the cluster's; at the end the
// listener is closed and a Connect still running returns.
func clusterConnect(t *testing.T, rt runtime.Runtime) {
	rec := &connects{returned: make(chan struct{})}
	connect := func(conn net.Conn, dst netip.AddrPort) {
		defer conn.Close()
		rec.add(dst)
		switch dst.Port() {
		case 4321:
			_, _ = io.Copy(conn, conn) // echo until the job's half-close
		case 4322:
			_, _ = io.Copy(io.Discard, conn) // held until the job ends
			close(rec.returned)
		}
	}
	out := newLines()
	p := start(t, rt, clusterSpec(t, out, 1, connect, connectScript))
	var got []string
	for {
		l := out.next(t)
		got = append(got, l)
		if l == "HELD" {
			break
		}
	}
	t.Logf("job said:\n%s", strings.Join(got, "\n"))
	text := strings.Join(got, "\n") + "\n"
	for _, want := range []string{
		"ECHO ping\n",
		"LISTENERS 1\n",
		"DIRECT closed\n",
		"UDP refused 1\n", // EPERM: the filter's reject of a packet sent here
		"HOSTNAME rank1\n",
		"RESOLVE 100.64.0.1 100.64.0.3\n",
		"ENV gm0 gm0 gm0\n",
		"ADDR 100.64.0.2/24\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("job output lacks %q", want)
		}
	}
	want := []netip.AddrPort{netip.MustParseAddrPort("100.64.0.7:4321"), netip.MustParseAddrPort("100.64.0.9:4322")}
	eventually(t, "Connect for the held connection", func() bool { return len(rec.list()) >= 2 })
	if got := rec.list(); !slices.Equal(got, want) {
		t.Errorf("Connect called for %v, want %v", got, want)
	}
	ln := runtime.ClusterListener(p)
	if ln == nil {
		t.Fatal("the job has no cluster listener")
	}
	if err := p.Stop(5 * time.Second); err != nil {
		t.Errorf("Stop: %v", err)
	}
	select {
	case <-rec.returned:
	case <-time.After(waitLimit):
		t.Fatal("the held Connect did not return after the job ended")
	}
	if c, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		if c != nil {
			c.Close()
		}
		t.Errorf("Accept on the cluster listener after the job = %v, want net.ErrClosed", err)
	}
	if _, err := p.(runtime.ClusterDialer).DialCluster(context.Background(), 80); !errors.Is(err, runtime.ErrExited) {
		t.Errorf("DialCluster after the end = %v, want ErrExited", err)
	}
}

// serverScript listens on the job's cluster address, on a port the
// kernel chooses, writes the port to $HOME/port and says HELLO-<rank> to
// every connection.
const serverScript = `
import os, socket, sys
l = socket.socket()
l.bind((sys.argv[1], 0))
l.listen()
with open(os.path.join(os.environ["HOME"], "port.tmp"), "w") as f:
    f.write(str(l.getsockname()[1]))
os.rename(os.path.join(os.environ["HOME"], "port.tmp"), os.path.join(os.environ["HOME"], "port"))
while True:
    c, _ = l.accept()
    c.sendall(b"HELLO-" + sys.argv[2].encode())
    c.close()
`

// clientScript connects to 100.64.0.2:port (another member's) and to
// its own address on that port, and prints what it read.
const clientScript = `
import socket, sys

def get(addr):
    try:
        c = socket.create_connection((addr, int(sys.argv[1])), timeout=60)
        c.settimeout(60)
        data = b""
        while True:
            b = c.recv(100)
            if not b:
                break
            data += b
        return data.decode() or "closed"
    except OSError as e:
        return "error " + type(e).__name__

print("PEER", get("100.64.0.2"), flush=True)
print("OWN", get("100.64.0.3"), flush=True)
`

// clusterMembers: job A listens on its cluster address; DialCluster
// reaches it, DialPort and the node's namespace do not. Job B, of the
// same cluster on the same node, reaches A only through its Connect,
// which here dials A with DialCluster.
func clusterMembers(t *testing.T, rt runtime.Runtime) {
	recA := &connects{}
	var outA syncBuffer
	sA := clusterSpec(t, &outA, 1, func(c net.Conn, dst netip.AddrPort) { recA.add(dst); c.Close() }, serverScript, "100.64.0.2", "A")
	a := start(t, rt, sA)
	var port int
	eventually(t, "job A to write its port", func() bool {
		b, err := os.ReadFile(filepath.Join(sA.WorkDir, "port"))
		port, _ = strconv.Atoi(string(b))
		return err == nil && port > 0
	})
	cd, ok := a.(runtime.ClusterDialer)
	if !ok {
		t.Fatalf("%T is not a ClusterDialer", a)
	}
	if got := readVia(t, func(ctx context.Context) (net.Conn, error) { return cd.DialCluster(ctx, uint16(port)) }); got != "HELLO-A" {
		t.Errorf("DialCluster(%d) read %q, want HELLO-A", port, got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c, err := a.(runtime.PortDialer).DialPort(ctx, uint16(port)); err == nil {
		c.Close()
		t.Errorf("DialPort(%d) reached a server listening on the cluster address only", port)
	}
	if c, err := net.DialTimeout("tcp4", fmt.Sprintf("100.64.0.2:%d", port), 3*time.Second); err == nil {
		c.Close()
		t.Errorf("the node's namespace reached job A's cluster address")
	}

	recB := &connects{}
	proxy := func(c net.Conn, dst netip.AddrPort) {
		defer c.Close()
		recB.add(dst)
		if dst.Addr() != clusterHosts[1].Addr {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		up, err := cd.DialCluster(ctx, dst.Port())
		if err != nil {
			t.Errorf("proxy to A: %v", err)
			return
		}
		defer up.Close()
		pipe(c, up)
	}
	var outB syncBuffer
	b := start(t, rt, clusterSpec(t, &outB, 2, proxy, clientScript, strconv.Itoa(port)))
	if res := wait(t, b); res.ExitCode != 0 {
		t.Errorf("job B: %+v", res)
	}
	got := outB.String()
	t.Logf("job B said:\n%s", got)
	if !strings.Contains(got, "PEER HELLO-A\n") {
		t.Errorf("job B did not reach job A through its Connect")
	}
	if !strings.Contains(got, "OWN error ConnectionRefusedError\n") {
		t.Errorf("job B's own address on A's port: want refused (nothing listens there, and it is not redirected)")
	}
	if want := []netip.AddrPort{netip.AddrPortFrom(clusterHosts[1].Addr, uint16(port))}; !slices.Equal(recB.list(), want) {
		t.Errorf("job B's Connect called for %v, want %v", recB.list(), want)
	}
	if got := recA.list(); len(got) != 0 {
		t.Errorf("job A's Connect called for %v, want never", got)
	}
	if err := a.Stop(5 * time.Second); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

// readVia dials with dial (retrying while it fails) and reads until EOF.
func readVia(t *testing.T, dial func(context.Context) (net.Conn, error)) string {
	t.Helper()
	var got string
	eventually(t, "a dial to succeed", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := dial(ctx)
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		b, err := io.ReadAll(c)
		got = string(b)
		return err == nil
	})
	return got
}

// pipe copies both ways between a and b, passing half-closes on, until
// both directions end.
func pipe(a, b net.Conn) {
	var wg sync.WaitGroup
	one := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}
	wg.Add(2)
	go one(a, b)
	go one(b, a)
	wg.Wait()
}

// TestClusterNeedsJobNetworks: a runtime without job networks refuses a
// cluster job, and ClusterSupport says why.
func TestClusterNeedsJobNetworks(t *testing.T) {
	rt := newRuntime(t)
	if err := runtime.ClusterSupport(rt); err == nil || !strings.Contains(err.Error(), "Options.Net") {
		t.Errorf("ClusterSupport without Options.Net = %v, want an error naming it", err)
	}
	s := clusterSpec(t, io.Discard, 0, func(c net.Conn, _ netip.AddrPort) { c.Close() }, "pass")
	if p, err := rt.Start(context.Background(), s); !errors.Is(err, runtime.ErrInvalidSpec) {
		if p != nil {
			_ = p.Stop(0)
		}
		t.Errorf("Start of a cluster job without job networks = %v, want ErrInvalidSpec", err)
	}
}

// TestClusterSpecInvalid: Start refuses a malformed ClusterNet before
// anything runs.
func TestClusterSpecInvalid(t *testing.T) {
	rt := newRuntime(t)
	for name, change := range map[string]func(*runtime.ClusterNet){
		"ipv6 prefix":      func(c *runtime.ClusterNet) { c.Prefix = netip.MustParsePrefix("fd00::/64") },
		"prefix too wide":  func(c *runtime.ClusterNet) { c.Prefix = netip.MustParsePrefix("100.0.0.0/8") },
		"prefix too small": func(c *runtime.ClusterNet) { c.Prefix = netip.MustParsePrefix("100.64.0.0/31") },
		"host bits":        func(c *runtime.ClusterNet) { c.Prefix = netip.MustParsePrefix("100.64.0.1/24") },
		"addr outside":     func(c *runtime.ClusterNet) { c.Addr = netip.MustParseAddr("100.64.1.2") },
		"network addr":     func(c *runtime.ClusterNet) { c.Addr = netip.MustParseAddr("100.64.0.0") },
		"broadcast addr":   func(c *runtime.ClusterNet) { c.Addr = netip.MustParseAddr("100.64.0.255") },
		"no hostname":      func(c *runtime.ClusterNet) { c.Hostname = "" },
		"hostname blank":   func(c *runtime.ClusterNet) { c.Hostname = "rank 1" },
		"hostname newline": func(c *runtime.ClusterNet) { c.Hostname = "rank1\n1.2.3.4 evil" },
		"hostname long":    func(c *runtime.ClusterNet) { c.Hostname = strings.Repeat("a", 65) },
		"host name":        func(c *runtime.ClusterNet) { c.Hosts = []runtime.HostEntry{{Addr: c.Addr, Name: "-x"}} },
		"host outside": func(c *runtime.ClusterNet) {
			c.Hosts = []runtime.HostEntry{{Addr: netip.MustParseAddr("8.8.8.8"), Name: "x"}}
		},
		"too many hosts": func(c *runtime.ClusterNet) { c.Hosts = make([]runtime.HostEntry, 257) },
		"no connect":     func(c *runtime.ClusterNet) { c.Connect = nil },
	} {
		t.Run(name, func(t *testing.T) {
			s := clusterSpec(t, io.Discard, 0, func(c net.Conn, _ netip.AddrPort) { c.Close() }, "pass")
			change(s.Cluster)
			p, err := rt.Start(context.Background(), s)
			if p != nil {
				_ = p.Stop(0)
			}
			if !errors.Is(err, runtime.ErrInvalidSpec) || !strings.Contains(err.Error(), "cluster") {
				t.Errorf("Start = %v, want ErrInvalidSpec about the cluster", err)
			}
		})
	}
}
