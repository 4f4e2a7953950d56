package job

import (
	"crypto/rand"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/job/pb"
)

func newPeer(t testing.TB) peer.ID {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// members are n leases on n distinct suppliers, as a renter's gang makes
// them (only what clusterHello reads).
func members(t testing.TB, n int) []*market.Lease {
	t.Helper()
	var ls []*market.Lease
	for i := range n {
		l := &market.Lease{Supplier: newPeer(t)}
		l.ID[0], l.ID[1] = byte(i+1), 0xaa
		ls = append(ls, l)
	}
	return ls
}

func addrsOf(peer.ID) []ma.Multiaddr {
	return []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/4001"), ma.StringCast("/ip4/10.0.0.2/udp/4001/quic-v1")}
}

// TestManifestOf: a supplier takes a start's member list only when it
// names every member once, in rank order, on distinct suppliers, with
// itself at its rank on the very lease it starts; each bad list is
// refused with what is wrong.
func TestManifestOf(t *testing.T) {
	ls := members(t, 3)
	c := &pb.Cluster{Nodes: 3}
	good := func() *pb.ClusterHello { return clusterHello(2, 1, ls, addrsOf) }
	m, err := manifestOf(good(), c, ls[1].Supplier, ls[1], "job")
	if err != nil {
		t.Fatal(err)
	}
	if m.Self != 1 || m.Attempt != 2 || len(m.Members) != 3 || m.Members[2].Supplier != ls[2].Supplier || len(m.Members[0].Addrs) != 2 {
		t.Fatalf("manifest %+v", m)
	}
	env := strings.Join(clusterEnvOf(m, c), " ")
	for _, want := range []string{"RANK=1", "NODE_RANK=1", "LOCAL_RANK=0", "WORLD_SIZE=3", "NNODES=3", "MASTER_ADDR=100.64.0.1",
		"MASTER_PORT=29500", "GPUMESH_CLUSTER_ADDRS=100.64.0.1,100.64.0.2,100.64.0.3", "GPUMESH_CLUSTER_ATTEMPT=2"} {
		if !strings.Contains(env, want) {
			t.Errorf("env %q lacks %s", env, want)
		}
	}
	net := clusterNet(m, nil)
	if net.Addr.String() != "100.64.0.2" || net.Hostname != "rank1" || len(net.Hosts) != 3 || net.Hosts[2].Name != "rank2" {
		t.Errorf("cluster net %+v", net)
	}

	other := newPeer(t)
	for _, tc := range []struct {
		name  string
		edit  func(h *pb.ClusterHello)
		self  peer.ID
		lease *market.Lease
		want  string
	}{
		{"no member list", nil, ls[1].Supplier, ls[1], "names no members"},
		{"fewer members than nodes", func(h *pb.ClusterHello) { h.Members = h.Members[:2] }, ls[1].Supplier, ls[1], "lists 2 members"},
		{"rank past the members", func(h *pb.ClusterHello) { h.Rank = 3 }, ls[1].Supplier, ls[1], "rank 3 of 3"},
		{"attempt 0", func(h *pb.ClusterHello) { h.Attempt = 0 }, ls[1].Supplier, ls[1], "attempt 0"},
		{"out of rank order", func(h *pb.ClusterHello) { h.Members[0].Rank, h.Members[1].Rank = 1, 0 }, ls[1].Supplier, ls[1], "want rank order"},
		{"a bad supplier ID", func(h *pb.ClusterHello) { h.Members[2].Supplier = []byte("nope") }, ls[1].Supplier, ls[1], "member 2: supplier"},
		{"a short lease ID", func(h *pb.ClusterHello) { h.Members[0].LeaseId = h.Members[0].LeaseId[:5] }, ls[1].Supplier, ls[1], "lease id of 5 bytes"},
		{"too many addresses", func(h *pb.ClusterHello) {
			for range MaxMemberAddrs {
				h.Members[0].Addrs = append(h.Members[0].Addrs, h.Members[0].Addrs[0])
			}
		}, ls[1].Supplier, ls[1], "addresses, at most"},
		{"a bad address", func(h *pb.ClusterHello) { h.Members[0].Addrs[0] = []byte{0xff, 0xff} }, ls[1].Supplier, ls[1], "member 0: address"},
		{"another lease at this rank", nil, ls[1].Supplier, ls[0], "not this one"},
		{"this supplier is not at its rank", nil, other, ls[1], ""},
		{"one supplier twice", func(h *pb.ClusterHello) { h.Members[2].Supplier = h.Members[0].Supplier }, ls[1].Supplier, ls[1], ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := good()
			switch {
			case tc.name == "no member list":
				h = nil
			case tc.edit != nil:
				tc.edit(h)
			}
			_, err := manifestOf(h, c, tc.self, tc.lease, "job")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("manifestOf: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestCheckCluster: a spec's cluster is checked with the spec.
func TestCheckCluster(t *testing.T) {
	base := func() *pb.JobSpec {
		return &pb.JobSpec{Version: SpecVersion, JobId: NewJobID(), Argv: []string{"true"}, Gpus: 1, Cluster: &pb.Cluster{Nodes: 2}}
	}
	if _, err := EncodeSpec(base()); err != nil {
		t.Fatalf("a good cluster spec: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*pb.JobSpec)
		want string
	}{
		{"one node", func(m *pb.JobSpec) { m.Cluster.Nodes = 1 }, "2..64"},
		{"too many nodes", func(m *pb.JobSpec) { m.Cluster.Nodes = 65 }, "2..64"},
		{"master port", func(m *pb.JobSpec) { m.Cluster.MasterPort = 70000 }, "master port"},
		{"a container", func(m *pb.JobSpec) { m.Runtime, m.Image = "docker", "x" }, "process runtime"},
		{"stdin", func(m *pb.JobSpec) { m.Stdin = &pb.Stdin{} }, "no stdin"},
		{"the contract's env", func(m *pb.JobSpec) { m.Env = []*pb.EnvVar{{Name: "MASTER_ADDR", Value: "1.2.3.4"}} }, "env MASTER_ADDR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := base()
			tc.edit(m)
			if _, err := EncodeSpec(m); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("EncodeSpec: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestOnLinks: a member's links are kept only when they are of the
// current attempt and name other members of its cluster.
func TestOnLinks(t *testing.T) {
	cl := &clusterState{}
	for r := range 3 {
		cl.members = append(cl.members, &jobState{rec: jobRecord{Rank: r}, cl: cl})
	}
	js := cl.members[1]
	ok := &pb.ClusterLinks{Attempt: 2, Links: []*pb.ClusterLink{{Rank: 0, Direct: true, RttUs: 1500}, {Rank: 2, RttUs: 0}}}
	js.onLinks(2, ok)
	if len(js.links) != 2 || js.links[0].RTTms != 1.5 || !js.links[0].Direct {
		t.Fatalf("links %+v", js.links)
	}
	for name, bad := range map[string]*pb.ClusterLinks{
		"another attempt": {Attempt: 1, Links: ok.Links[:1]},
		"itself":          {Attempt: 2, Links: []*pb.ClusterLink{{Rank: 1}}},
		"no such rank":    {Attempt: 2, Links: []*pb.ClusterLink{{Rank: 7}}},
		"too many":        {Attempt: 2, Links: []*pb.ClusterLink{{Rank: 0}, {Rank: 2}, {Rank: 0}}},
	} {
		js.onLinks(2, bad)
		if len(js.links) != 2 {
			t.Fatalf("%s: links replaced by %+v", name, js.links)
		}
	}
}

// TestJudgeAttempt: a cluster attempt in which a member was lost is a
// failover even though the survivors failed (their peer vanished); one
// in which members only failed counts against the restart policy.
func TestJudgeAttempt(t *testing.T) {
	c := &Controller{cfg: ControllerConfig{RetryBudget: 1}}
	never, err := EncodeSpec(&pb.JobSpec{Version: SpecVersion, JobId: NewJobID(), Argv: []string{"true"}, Gpus: 1, Cluster: &pb.Cluster{Nodes: 2}})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(outcomes ...State) *clusterState {
		cl := &clusterState{cause: "rank 1 lost"}
		for r, o := range outcomes {
			cl.members = append(cl.members, &jobState{spec: never, cl: cl,
				rec: jobRecord{Rank: r, ExitCode: 1, Attempts: []attemptRec{{Attempt: 1, Outcome: o}}}})
		}
		return cl
	}
	cl := mk(StateFailed, StateLost)
	if give := c.judgeAttempt(cl); give != "" || cl.failovers != 1 || cl.restarts != 0 {
		t.Fatalf("a lost member: %q, %d failovers, %d restarts; want a failover", give, cl.failovers, cl.restarts)
	}
	if give := c.judgeAttempt(cl); !strings.Contains(give, "gave up after 1 failovers") {
		t.Fatalf("past the budget: %q", give)
	}
	if give := c.judgeAttempt(mk(StateFailed, StateStopped)); !strings.Contains(give, "cluster failed") {
		t.Fatalf("a member's own failure under restart=never: %q", give)
	}
}

// FuzzManifestOf: whatever a renter puts in a start's member list, the
// supplier reads it without panicking and never takes a list that does
// not put it at its rank on its lease.
func FuzzManifestOf(f *testing.F) {
	ls := members(f, 2)
	good, _ := proto.Marshal(clusterHello(1, 0, ls, addrsOf))
	f.Add(good)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var h pb.ClusterHello
		if proto.Unmarshal(b, &h) != nil {
			return
		}
		m, err := manifestOf(&h, &pb.Cluster{Nodes: 2}, ls[0].Supplier, ls[0], "job")
		if err == nil && (m.Members[m.Self].Supplier != ls[0].Supplier || m.Members[m.Self].Lease != ls[0].ID) {
			t.Fatalf("took %+v", m)
		}
	})
}
