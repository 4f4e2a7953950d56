package runtime

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// testCluster is a valid ClusterNet of rank 1 in a cluster of three.
func testCluster() *ClusterNet {
	return &ClusterNet{
		Addr: netip.MustParseAddr("100.64.0.2"), Prefix: netip.MustParsePrefix("100.64.0.0/24"), Hostname: "rank1",
		Hosts: []HostEntry{
			{Addr: netip.MustParseAddr("100.64.0.1"), Name: "rank0"},
			{Addr: netip.MustParseAddr("100.64.0.2"), Name: "rank1"},
			{Addr: netip.MustParseAddr("100.64.0.3"), Name: "rank2"},
		},
		Connect: func(c net.Conn, _ netip.AddrPort) { c.Close() },
	}
}

// Containers refuse cluster jobs before anything runs: no engine is
// needed to see it.
func TestClusterRefusedByContainers(t *testing.T) {
	for _, name := range []string{"docker", "podman"} {
		c := &containerRuntime{name: name, bin: "/nonexistent/" + name, log: slog.New(slog.DiscardHandler)}
		err := ClusterSupport(c)
		if err == nil || !strings.Contains(err.Error(), "process runtime") {
			t.Errorf("%s: ClusterSupport = %v, want an error naming the process runtime", name, err)
		}
		dir := t.TempDir()
		s := Spec{JobID: "ab", Argv: []string{"true"}, WorkDir: dir, CheckpointDir: dir, Image: "img", Cluster: testCluster()}
		p, err := c.Start(context.Background(), s)
		if p != nil {
			_ = p.Stop(0)
		}
		if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "process runtime") {
			t.Errorf("%s: Start of a cluster job = %v, want ErrInvalidSpec naming the process runtime", name, err)
		}
	}
}

func TestClusterSupportOfProcessRuntime(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    *processRuntime
		want string
	}{
		{"no job networks", &processRuntime{root: true}, "Options.Net"},
		{"not root", &processRuntime{ns: &netns{}}, "root"},
		{"root without the link", &processRuntime{ns: &netns{}, root: true}, "root"},
		{"root with job networks", &processRuntime{ns: &netns{}, root: true, jnet: &jobNetwork{}}, ""},
	} {
		err := ClusterSupport(tc.r)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: ClusterSupport = %v, want nil", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: ClusterSupport = %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}

func TestClusterHostsFile(t *testing.T) {
	got := hostsFile(testCluster())
	want := "# written by gpumesh for this job's cluster\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"100.64.0.2\trank1\n100.64.0.1\trank0\n100.64.0.3\trank2\n"
	if got != want {
		t.Errorf("hosts file:\n got %q\nwant %q", got, want)
	}
}

// The node's interface variables win over the renter's, and a job
// without a cluster keeps the renter's.
func TestClusterEnv(t *testing.T) {
	dir := t.TempDir()
	s := Spec{JobID: "ab", Argv: []string{"true"}, WorkDir: dir, CheckpointDir: dir, Env: []string{"GLOO_SOCKET_IFNAME=eth0", "A=1"}}
	cfg, _, err := buildPlan(s, planInput{devDir: "/dev"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cfg.Env, "GLOO_SOCKET_IFNAME=eth0") || cfg.Hostname != "" || cfg.Hosts != "" {
		t.Errorf("job without a cluster: env %q, hostname %q, hosts %q", cfg.Env, cfg.Hostname, cfg.Hosts)
	}
	s.Cluster = testCluster()
	cfg, _, err = buildPlan(s, planInput{devDir: "/dev"})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range []string{"GLOO_SOCKET_IFNAME=gm0", "NCCL_SOCKET_IFNAME=gm0", "TP_SOCKET_IFNAME=gm0", "A=1"} {
		if !slices.Contains(cfg.Env, kv) {
			t.Errorf("cluster job's env %q lacks %s", cfg.Env, kv)
		}
	}
	if slices.Contains(cfg.Env, "GLOO_SOCKET_IFNAME=eth0") {
		t.Errorf("the renter's GLOO_SOCKET_IFNAME stayed: %q", cfg.Env)
	}
	if cfg.Hostname != "rank1" || !strings.Contains(cfg.Hosts, "100.64.0.3\trank2\n") {
		t.Errorf("cluster job: hostname %q, hosts %q", cfg.Hostname, cfg.Hosts)
	}
}

func TestClusterSockaddrIn(t *testing.T) {
	b := make([]byte, 16)
	binary.NativeEndian.PutUint16(b, unix.AF_INET)
	b[2], b[3] = 0x10, 0xe1 // 4321
	copy(b[4:8], []byte{100, 64, 0, 7})
	got, err := parseSockaddrIn(b)
	if err != nil || got != netip.MustParseAddrPort("100.64.0.7:4321") {
		t.Errorf("parseSockaddrIn = %v, %v; want 100.64.0.7:4321", got, err)
	}
	b[0], b[1] = 10, 10
	if _, err := parseSockaddrIn(b); err == nil {
		t.Error("parseSockaddrIn of another family: no error")
	}
	if _, err := parseSockaddrIn(b[:7]); err == nil {
		t.Error("parseSockaddrIn of 7 bytes: no error")
	}
}
