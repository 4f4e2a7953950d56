package job

// Cluster jobs, as both sides see them: the spec's cluster (checkSpec),
// the start Hello's member list, the environment contract a member's job
// gets, and the supplier's part: joining the cluster network
// (node/cluster) for the attempt and leaving it at its end.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/cluster"
	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/node/runtime"
)

const (
	// DefaultMasterPort is MASTER_PORT when the spec names none: torch's.
	DefaultMasterPort = 29500
	// MaxMemberAddrs bounds the addresses a Hello gives per member.
	MaxMemberAddrs = 4
	maxMemberAddr  = 128 // bytes of one such address
)

// ClusterEnv are the variables a cluster member's job gets from the node
// (the renter's env may not set them): its rank and the members'.
var ClusterEnv = []string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "NNODES", "MASTER_ADDR", "MASTER_PORT",
	"GPUMESH_CLUSTER_ADDRS", "GPUMESH_CLUSTER_ATTEMPT", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME"}

// checkCluster checks a spec's cluster: 2..MaxNodes members, the process
// runtime, no stdin, and none of the contract's variables in its env.
func checkCluster(m *pb.JobSpec) error {
	c := m.Cluster
	if c == nil {
		return nil
	}
	switch {
	case c.Nodes < 2 || c.Nodes > cluster.MaxNodes:
		return malformed("cluster of %d nodes: want 2..%d", c.Nodes, cluster.MaxNodes)
	case c.MasterPort > 65535:
		return malformed("master port %d outside 1..65535", c.MasterPort)
	case m.Runtime != "" && m.Runtime != "process":
		return malformed("a cluster needs the process runtime, not %s", m.Runtime)
	case m.Stdin != nil:
		return malformed("a cluster job has no stdin")
	}
	for _, e := range m.Env {
		for _, name := range ClusterEnv {
			if e.Name == name {
				return malformed("env %s: a cluster member's node sets it", name)
			}
		}
	}
	return nil
}

// masterPort is the spec's MASTER_PORT.
func masterPort(c *pb.Cluster) uint32 {
	if c.MasterPort == 0 {
		return DefaultMasterPort
	}
	return c.MasterPort
}

// clusterHello is the start Hello's cluster part for the member of rank
// self in attempt, the members' leases in rank order.
func clusterHello(attempt uint32, self int, leases []*market.Lease, addrs func(peer.ID) []ma.Multiaddr) *pb.ClusterHello {
	h := &pb.ClusterHello{Attempt: attempt, Rank: uint32(self)}
	for r, l := range leases {
		m := &pb.ClusterMember{Rank: uint32(r), Supplier: []byte(l.Supplier), LeaseId: l.ID[:]}
		for _, a := range addrs(l.Supplier) {
			if b := a.Bytes(); len(m.Addrs) < MaxMemberAddrs && len(b) <= maxMemberAddr {
				m.Addrs = append(m.Addrs, b)
			}
		}
		h.Members = append(h.Members, m)
	}
	return h
}

// manifestOf reads a start Hello's cluster part, for the supplier self
// running the lease l of a job whose spec asks for c: every member once,
// in rank order, on distinct suppliers, self at its rank with this very
// lease. What the renter sent is checked, never trusted.
func manifestOf(h *pb.ClusterHello, c *pb.Cluster, self peer.ID, l *market.Lease, jobID string) (cluster.Manifest, error) {
	if h == nil {
		return cluster.Manifest{}, fmt.Errorf("a cluster member's start names no members")
	}
	if len(h.Members) != int(c.Nodes) {
		return cluster.Manifest{}, fmt.Errorf("cluster of %d nodes, the start lists %d members", c.Nodes, len(h.Members))
	}
	if h.Attempt == 0 || int(h.Rank) >= len(h.Members) {
		return cluster.Manifest{}, fmt.Errorf("cluster attempt %d, rank %d of %d", h.Attempt, h.Rank, len(h.Members))
	}
	m := cluster.Manifest{Job: jobID, Attempt: h.Attempt, Self: int(h.Rank)}
	for i, pm := range h.Members {
		if int(pm.Rank) != i {
			return cluster.Manifest{}, fmt.Errorf("member %d listed as rank %d: want rank order", i, pm.Rank)
		}
		sup, err := peer.IDFromBytes(pm.Supplier)
		if err != nil {
			return cluster.Manifest{}, fmt.Errorf("member %d: supplier: %w", i, err)
		}
		if len(pm.LeaseId) != len(market.ID{}) {
			return cluster.Manifest{}, fmt.Errorf("member %d: lease id of %d bytes", i, len(pm.LeaseId))
		}
		if len(pm.Addrs) > MaxMemberAddrs {
			return cluster.Manifest{}, fmt.Errorf("member %d: %d addresses, at most %d", i, len(pm.Addrs), MaxMemberAddrs)
		}
		mem := cluster.Member{Rank: i, Supplier: sup, Lease: market.ID(pm.LeaseId)}
		for _, b := range pm.Addrs {
			a, err := ma.NewMultiaddrBytes(b)
			if err != nil {
				return cluster.Manifest{}, fmt.Errorf("member %d: address: %w", i, err)
			}
			mem.Addrs = append(mem.Addrs, a)
		}
		m.Members = append(m.Members, mem)
	}
	if me := m.Members[m.Self]; me.Lease != l.ID {
		return cluster.Manifest{}, fmt.Errorf("rank %d is listed on lease %s, not this one (%s)", m.Self, me.Lease.Short(), l.ID.Short())
	}
	if err := m.Check(self); err != nil {
		return cluster.Manifest{}, err
	}
	return m, nil
}

// clusterNet is the runtime's part of a member's start: its address,
// hostname and the other members' names.
func clusterNet(m cluster.Manifest, connect func(conn net.Conn, dst netip.AddrPort)) *runtime.ClusterNet {
	n := &runtime.ClusterNet{Addr: cluster.Addr(m.Self), Prefix: cluster.Prefix, Hostname: cluster.Hostname(m.Self), Connect: connect}
	for _, mem := range m.Members {
		n.Hosts = append(n.Hosts, runtime.HostEntry{Addr: cluster.Addr(mem.Rank), Name: cluster.Hostname(mem.Rank)})
	}
	return n
}

// clusterEnvOf is the contract a member's job sees, beside the
// interface names the runtime sets: its rank among world members, rank
// 0's address as the master, and every member's address.
func clusterEnvOf(m cluster.Manifest, c *pb.Cluster) []string {
	addrs := make([]string, len(m.Members))
	for i := range m.Members {
		addrs[i] = cluster.Addr(i).String()
	}
	n := strconv.Itoa(len(m.Members))
	r := strconv.Itoa(m.Self)
	return []string{
		"RANK=" + r, "NODE_RANK=" + r, "LOCAL_RANK=0", "WORLD_SIZE=" + n, "NNODES=" + n,
		"MASTER_ADDR=" + cluster.Addr(0).String(), "MASTER_PORT=" + strconv.Itoa(int(masterPort(c))),
		"GPUMESH_CLUSTER_ADDRS=" + strings.Join(addrs, ","), "GPUMESH_CLUSTER_ATTEMPT=" + strconv.Itoa(int(m.Attempt)),
	}
}

// ClusterJoiner makes a supplier's job a member of a cluster attempt:
// node/cluster's Service.
type ClusterJoiner interface {
	Join(m cluster.Manifest) (*cluster.Membership, error)
}

// joinCluster makes the attempt about to start on lease l a member of
// its cluster: it checks the Hello's member list and joins the cluster
// network. The membership is left when the attempt ends (or its start
// fails).
func (e *Executor) joinCluster(l *market.Lease, spec *Spec, h *pb.ClusterHello) (*cluster.Membership, cluster.Manifest, error) {
	if e.cfg.Cluster == nil {
		return nil, cluster.Manifest{}, fmt.Errorf("this supplier runs no cluster network")
	}
	if err := runtime.ClusterSupport(e.cfg.Runtimes[runtimeName(spec)]); err != nil {
		return nil, cluster.Manifest{}, err
	}
	m, err := manifestOf(h, spec.Cluster, e.cfg.Self, l, spec.ID())
	if err != nil {
		return nil, cluster.Manifest{}, err
	}
	mb, err := e.cfg.Cluster.Join(m)
	if err != nil {
		return nil, cluster.Manifest{}, fmt.Errorf("join the cluster network: %w", err)
	}
	return mb, m, nil
}

// pausedCode is how the cluster network tells other members why this
// attempt takes no connection now ("" while it runs).
func (r *run) pausedCode() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.paused:
		return "unpaid"
	case r.state != StateRunning || r.endState != "":
		return "not-running"
	}
	return ""
}

// linksEvery is how often a cluster member's supplier tells its renter
// how it reaches the other members.
const linksEvery = 5 * time.Second

// reportLinks sends the renter, every linksEvery while the attempt
// runs and a session is attached, this supplier's links to the other
// members' suppliers.
func (r *run) reportLinks() {
	t := r.e.cfg.Clock.NewTimer(time.Second) // the first soon: a short job ends before linksEvery
	defer t.Stop()
	for {
		select {
		case <-r.done:
			return
		case <-r.e.quit:
			return
		case <-t.C():
		}
		t.Reset(linksEvery)
		f := &pb.ClusterLinks{Attempt: r.attempt}
		for _, l := range r.member.Links() {
			f.Links = append(f.Links, &pb.ClusterLink{Rank: uint32(l.Rank), Direct: l.Direct, RttUs: uint32(min(l.RTT.Microseconds(), math.MaxUint32))})
		}
		r.mu.Lock()
		s := r.sess
		r.mu.Unlock()
		if s != nil {
			s.send(&pb.ServerFrame{Body: &pb.ServerFrame_ClusterLinks{ClusterLinks: f}})
		}
	}
}

// LinkView is how one member reaches another, as its supplier last
// said.
type LinkView struct {
	To     int     `json:"to"`
	Direct bool    `json:"direct"`
	RTTms  float64 `json:"rtt_ms"` // 0: not measured yet
}

// onLinks keeps what a member's supplier said of its links, if it is of
// the current attempt and names only other members.
func (js *jobState) onLinks(attempt uint32, f *pb.ClusterLinks) {
	if js.cl == nil || f.Attempt != attempt || len(f.Links) >= len(js.cl.members) {
		return
	}
	var out []LinkView
	for _, l := range f.Links {
		if int(l.Rank) >= len(js.cl.members) || int(l.Rank) == js.rec.Rank {
			return
		}
		out = append(out, LinkView{To: int(l.Rank), Direct: l.Direct, RTTms: float64(l.RttUs) / 1000})
	}
	js.mu.Lock()
	js.links = out
	js.mu.Unlock()
}

// RetryRefused wraps dial so that a refused connection (nothing listens
// on the port yet) is tried again every 100 ms until ctx ends: the
// members of a cluster start at about the same time, and a rank that
// connects to another's store or listener before that one listens
// would otherwise see its connection reset.
func RetryRefused(dial func(ctx context.Context, port uint16) (net.Conn, error)) func(ctx context.Context, port uint16) (net.Conn, error) {
	return func(ctx context.Context, port uint16) (net.Conn, error) {
		for {
			c, err := dial(ctx, port)
			if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
				return c, err
			}
			select {
			case <-ctx.Done():
				return nil, err
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}
