package netlab_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/internal/leakcheck"
	"github.com/gpumesh/gpumesh/internal/testenv"
	"github.com/gpumesh/gpumesh/testnet/netlab"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// The lab's internet is 11.0.0.0/8, a public range, because go-libp2p
// ignores documentation ranges for hole punching and AutoNAT. Every
// address the tests send to lies inside namespaces the test created, with
// no link to the root namespace and no route out, so nothing leaves.

// need skips the test when this machine cannot build a lab.
func need(t *testing.T) {
	t.Helper()
	if err := netlab.Check(); err != nil {
		testenv.Skip(t, testenv.Netlab, "%v", err)
	}
}

// prefix is unique to this run and test.
func prefix(t *testing.T, tag string) string {
	return fmt.Sprintf("nl%s%d", tag, os.Getpid()%1000000)
}

// rootLinks lists the interface names of the root namespace.
func rootLinks(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("ip", "-o", "link").Output()
	if err != nil {
		t.Fatalf("ip -o link: %v", err)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 {
			names = append(names, strings.TrimSuffix(f[1], ":"))
		}
	}
	slices.Sort(names)
	return names
}

func namespacesWith(t *testing.T, prefix string) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v", err)
	}
	var nss []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
			nss = append(nss, f[0])
		}
	}
	return nss
}

func testSpec(p string) netlab.Spec {
	return netlab.Spec{
		Prefix: p,
		Hosts: []netlab.Host{
			{Name: "pa", Region: "eu-west", Kind: netlab.Public},
			{Name: "pb", Region: "us-east", Kind: netlab.Public},
			{Name: "cone", Region: "eu-west", Kind: netlab.Cone},
			{Name: "sym", Region: "us-east", Kind: netlab.Symmetric},
		},
	}
}

// up builds a lab and removes it when the test ends, checking that
// nothing is left and the root namespace's links are unchanged.
func up(t *testing.T, spec netlab.Spec) *netlab.Lab {
	t.Helper()
	before := rootLinks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lab, err := netlab.Up(ctx, spec, nil)
	if err != nil {
		t.Fatalf("Up: %v", err)
	}
	t.Cleanup(func() {
		if err := lab.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if left := namespacesWith(t, spec.Prefix); len(left) > 0 {
			t.Errorf("namespaces left after Close: %v", left)
		}
		if after := rootLinks(t); !slices.Equal(before, after) {
			t.Errorf("root links changed: before %v, after %v", before, after)
		}
	})
	return lab
}

func node(t *testing.T, lab *netlab.Lab, name string) netlab.Node {
	t.Helper()
	n, ok := lab.Node(name)
	if !ok {
		t.Fatalf("no host %s", name)
	}
	return n
}

// udpServer answers every datagram with the sender's address as text.
func udpServer(t *testing.T, lab *netlab.Lab, host string) net.PacketConn {
	t.Helper()
	pc, err := lab.ListenPacket(host, "udp4", "0.0.0.0:7000")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte(from.String()), from)
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return pc
}

// askUDP sends from pc to dst until it gets an answer (the WAN loses
// packets between regions), and returns the answer and the round trip.
func askUDP(t *testing.T, pc net.PacketConn, dst netip.Addr, tries int) (string, time.Duration, error) {
	t.Helper()
	buf := make([]byte, 2048)
	var err error
	for range tries {
		start := time.Now()
		if _, err = pc.WriteTo([]byte("ping"), net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 7000))); err != nil {
			return "", 0, err
		}
		_ = pc.SetReadDeadline(time.Now().Add(800 * time.Millisecond))
		var n int
		n, _, err = pc.ReadFrom(buf)
		if err == nil {
			return string(buf[:n]), time.Since(start), nil
		}
	}
	return "", 0, err
}

func TestLab(t *testing.T) {
	need(t)
	lab := up(t, testSpec(prefix(t, "a")))
	pa, pb := node(t, lab, "pa"), node(t, lab, "pb")
	cone, sym := node(t, lab, "cone"), node(t, lab, "sym")
	udpServer(t, lab, "pa")
	udpServer(t, lab, "pb")

	t.Run("addressing", func(t *testing.T) {
		for _, n := range []netlab.Node{pa, pb, cone, sym} {
			if !netlab.Internet.Contains(n.Public) {
				t.Errorf("%s: public %s outside %s", n.Name, n.Public, netlab.Internet)
			}
		}
		if cone.Router == "" || sym.Router == "" || pa.Router != "" {
			t.Errorf("routers: pa %q cone %q sym %q", pa.Router, cone.Router, sym.Router)
		}
	})

	t.Run("tcp and udp out of each NAT", func(t *testing.T) {
		ln, err := lab.Listen("pb", "tcp4", "0.0.0.0:7001")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		accepted := make(chan string, 4)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted <- c.RemoteAddr().String()
				c.Close()
			}
		}()
		for _, n := range []netlab.Node{cone, sym} {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			c, err := lab.Dialer(n.Name)(ctx, "tcp4", netip.AddrPortFrom(pb.Public, 7001).String())
			cancel()
			if err != nil {
				t.Fatalf("%s: tcp to pb: %v", n.Name, err)
			}
			c.Close()
			if from := <-accepted; !strings.HasPrefix(from, n.Public.String()+":") {
				t.Errorf("%s: pb saw tcp from %s, want its router's %s", n.Name, from, n.Public)
			}
			pc, err := lab.ListenPacket(n.Name, "udp4", ":0")
			if err != nil {
				t.Fatal(err)
			}
			from, _, err := askUDP(t, pc, pb.Public, 10)
			pc.Close()
			if err != nil {
				t.Fatalf("%s: udp to pb: %v", n.Name, err)
			}
			if !strings.HasPrefix(from, n.Public.String()+":") {
				t.Errorf("%s: pb saw udp from %s, want its router's %s", n.Name, from, n.Public)
			}
		}
	})

	t.Run("inbound to a router is dropped", func(t *testing.T) {
		ln, err := lab.Listen("cone", "tcp4", "0.0.0.0:7002")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		for _, n := range []netlab.Node{cone, sym} {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			c, err := lab.Dialer("pa")(ctx, "tcp4", netip.AddrPortFrom(n.Public, 7002).String())
			cancel()
			if err == nil {
				c.Close()
				t.Errorf("pa opened a connection to %s's router %s", n.Name, n.Public)
			}
		}
		// The host itself is not reachable from outside by its private
		// address either: there is no route to 10/8 on the internet.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if c, err := lab.Dialer("pa")(ctx, "tcp4", netip.AddrPortFrom(cone.Private, 7002).String()); err == nil {
			c.Close()
			t.Errorf("pa reached cone's private address")
		}
	})

	t.Run("cone keeps the port, symmetric does not", func(t *testing.T) {
		ports := func(host string) []string {
			pc, err := lab.ListenPacket(host, "udp4", ":0")
			if err != nil {
				t.Fatal(err)
			}
			defer pc.Close()
			var got []string
			for _, dst := range []netip.Addr{pa.Public, pb.Public} {
				from, _, err := askUDP(t, pc, dst, 10)
				if err != nil {
					t.Fatalf("%s: udp to %s: %v", host, dst, err)
				}
				ap, err := netip.ParseAddrPort(from)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, fmt.Sprint(ap.Port()))
			}
			return got
		}
		if p := ports("cone"); p[0] != p[1] {
			t.Errorf("cone: public ports %v to two hosts differ; want one mapping", p)
		}
		// fully-random picks a port per destination; a coincidence on all
		// three sockets is practically impossible.
		same := 0
		for range 3 {
			if p := ports("sym"); p[0] == p[1] {
				same++
			}
		}
		if same == 3 {
			t.Errorf("symmetric: the same public port to both hosts on 3 sockets")
		}
	})

	t.Run("delay", func(t *testing.T) {
		pc, err := lab.ListenPacket("pa", "udp4", ":0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		oneWay := netlab.DefaultLink("eu-west", "us-east").Delay
		for range 3 {
			_, rtt, err := askUDP(t, pc, pb.Public, 10)
			if err != nil {
				t.Fatal(err)
			}
			if rtt < 2*oneWay {
				t.Errorf("eu-west to us-east rtt %s, below 2 x %s", rtt, oneWay)
			}
		}
		if err := lab.WAN().SetLink("eu-west", "us-east", netlab.Link{Delay: 100 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		defer lab.WAN().SetLink("eu-west", "us-east", netlab.DefaultLink("eu-west", "us-east"))
		if _, rtt, err := askUDP(t, pc, pb.Public, 3); err != nil || rtt < 200*time.Millisecond {
			t.Errorf("after SetLink 100ms: rtt %s, err %v; want at least 200ms", rtt, err)
		}
		if err := lab.WAN().SetLink("eu-west", "us-east", netlab.Link{Loss: 2}); !errors.Is(err, netlab.ErrBadLink) {
			t.Errorf("SetLink with loss 2: %v, want ErrBadLink", err)
		}
	})

	t.Run("partition and heal", func(t *testing.T) {
		pc, err := lab.ListenPacket("pa", "udp4", ":0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		lab.WAN().Partition("eu-west", "us-east")
		if from, _, err := askUDP(t, pc, pb.Public, 3); err == nil {
			t.Errorf("partitioned, yet pb answered (%s)", from)
		}
		// Within a region traffic still flows.
		if _, _, err := askUDP(t, pc, pa.Public, 3); err != nil {
			t.Errorf("partition of eu-west from us-east cut pa from itself: %v", err)
		}
		lab.WAN().Heal("us-east", "eu-west")
		if _, _, err := askUDP(t, pc, pb.Public, 10); err != nil {
			t.Errorf("healed, yet no answer: %v", err)
		}
	})

	t.Run("flows", func(t *testing.T) {
		p0, b0 := lab.WAN().Flow(cone.Public, pb.Public)
		pc, err := lab.ListenPacket("cone", "udp4", ":0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		if _, _, err := askUDP(t, pc, pb.Public, 10); err != nil {
			t.Fatal(err)
		}
		p1, b1 := lab.WAN().Flow(cone.Public, pb.Public)
		if p1 <= p0 || b1 < b0+20+8+4 {
			t.Errorf("flow cone->pb: %d packets %d bytes, was %d %d", p1, b1, p0, b0)
		}
		if p, _ := lab.WAN().Flow(cone.Public, sym.Public); p != 0 {
			t.Errorf("flow cone->sym: %d packets, want none", p)
		}
	})

	t.Run("control socket", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		sock := filepath.Join(t.TempDir(), "wan.sock")
		served := make(chan error, 1)
		go func() { served <- netlab.ServeControl(ctx, lab.WAN(), sock, slog.New(slog.DiscardHandler)) }()
		defer func() {
			cancel()
			if err := <-served; err != nil {
				t.Errorf("ServeControl: %v", err)
			}
		}()
		var err error
		for range 100 { // the socket appears once ServeControl listens
			if _, err = netlab.Control(ctx, sock, "heal", "eu-west", "us-east"); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("heal over the socket: %v", err)
		}
		pc, err := lab.ListenPacket("pa", "udp4", ":0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		if _, err := netlab.Control(ctx, sock, "partition", "eu-west", "us-east"); err != nil {
			t.Fatalf("partition over the socket: %v", err)
		}
		if from, _, err := askUDP(t, pc, pb.Public, 3); err == nil {
			t.Errorf("partitioned over the socket, yet pb answered (%s)", from)
		}
		if _, err := netlab.Control(ctx, sock, "heal", "us-east", "eu-west"); err != nil {
			t.Fatalf("heal over the socket: %v", err)
		}
		if _, _, err := askUDP(t, pc, pb.Public, 10); err != nil {
			t.Errorf("healed over the socket, yet no answer: %v", err)
		}
		wantP, wantB := lab.WAN().Flow(pa.Public, pb.Public)
		p, b, err := netlab.ControlFlow(ctx, sock, pa.Public, pb.Public)
		if err != nil || p < wantP || b < wantB || p == 0 {
			t.Errorf("flow over the socket: %d packets %d bytes (%v), the WAN counted at least %d %d", p, b, err, wantP, wantB)
		}
		for _, bad := range [][]string{{"partition", "eu-west", "mars"}, {"flow", "x", "y"}, {"reboot", "a", "b"}, {"heal"}} {
			if _, err := netlab.Control(ctx, sock, bad...); !errors.Is(err, netlab.ErrControl) {
				t.Errorf("request %q: %v, want ErrControl", bad, err)
			}
		}
	})

	t.Run("command runs in the namespace", func(t *testing.T) {
		out, err := lab.Command(context.Background(), "cone", "ip", "-o", "-4", "addr", "show", "dev", "eth0").CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if !strings.Contains(string(out), cone.Private.String()+"/24") {
			t.Errorf("cone's eth0: %s, want %s", out, cone.Private)
		}
		if err := lab.Command(context.Background(), "nobody", "true").Run(); err == nil {
			t.Errorf("Command for an unknown host ran")
		}
	})
}

func TestCleanupAfterCrash(t *testing.T) {
	need(t)
	spec := testSpec(prefix(t, "c"))
	before := rootLinks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lab, err := netlab.Up(ctx, spec, nil, netlab.WithoutWAN())
	if err != nil {
		t.Fatalf("Up: %v", err)
	}
	t.Cleanup(func() { _ = lab.Close() })
	// A process left running inside a namespace, as a crashed testnet leaves
	// its nodes.
	sleeper := lab.Command(context.Background(), "cone", "sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- sleeper.Wait() }()
	if _, err := netlab.Up(ctx, spec, nil); err == nil || !strings.Contains(err.Error(), "exist already") {
		t.Errorf("second Up with the same prefix: %v, want a refusal", err)
	}
	if _, err := netlab.Attach(spec, nil); err != nil {
		t.Errorf("Attach: %v", err)
	}
	if err := netlab.Cleanup(spec.Prefix); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Errorf("the process in the lab survived Cleanup")
	}
	if left := namespacesWith(t, spec.Prefix); len(left) > 0 {
		t.Errorf("namespaces left after Cleanup: %v", left)
	}
	if after := rootLinks(t); !slices.Equal(before, after) {
		t.Errorf("root links changed: before %v, after %v", before, after)
	}
	if _, err := netlab.Attach(spec, nil); err == nil {
		t.Errorf("Attach after Cleanup succeeded")
	}
	if err := netlab.Cleanup("bad-prefix"); !errors.Is(err, netlab.ErrBadPrefix) {
		t.Errorf("Cleanup(bad-prefix): %v, want ErrBadPrefix", err)
	}
}
