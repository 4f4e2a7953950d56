package chaos

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	mpb "github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/p2p/pb"
	"github.com/gpumesh/gpumesh/testnet"
)

// flooder is a peer that floods the orders topic with valid-signed asks:
// of h100-sxm at a tenth of anyone's price, under a signed profile that
// claims 8 such GPUs (so that its asks are listed and renters try it
// first), and of made-up models. It answers no bid, and takes lease
// proposals without answering them.
type flooder struct {
	id     peer.ID
	net    *p2p.Network
	cancel context.CancelFunc
	wg     sync.WaitGroup
	sent   atomic.Int64
}

// floodModel is the real model the flooder undercuts.
const floodModel = "h100-sxm"

// startFlooder joins the testnet st through its bootstrap peers and every
// node, publishes its profile and heartbeats, and floods rate asks a
// second until Close.
func startFlooder(ctx context.Context, st *testnet.State, rate float64, log *slog.Logger) (*flooder, error) {
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("flooder: key: %w", err)
	}
	var boots, all []peer.AddrInfo
	for _, nd := range st.Nodes {
		ai, err := peer.AddrInfoFromString(nd.Addr)
		if err != nil {
			return nil, fmt.Errorf("flooder: node %d address %s: %w", nd.Index, nd.Addr, err)
		}
		all = append(all, *ai)
		if nd.Index < len(st.Bootstrap) {
			boots = append(boots, *ai)
		}
	}
	n, err := p2p.New(p2p.Config{
		Key: key, Network: testnet.Network, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, Bootstrap: boots,
		Mode: p2p.ModeServer, PubSub: true, UserAgent: "gpumesh-chaos-flooder",
		Logger: log.With("who", "flooder"),
	})
	if err != nil {
		return nil, fmt.Errorf("flooder: %w", err)
	}
	f := &flooder{id: n.Host.ID(), net: n}
	// It looks like a supplier to a renter that checks: it takes lease
	// proposals, and never answers them.
	n.Host.SetStreamHandler(market.LeaseProtocol, func(s network.Stream) {
		_ = s.SetDeadline(time.Now().Add(time.Minute))
		_, _ = io.Copy(io.Discard, s)
		s.Reset()
	})
	fail := func(err error) (*flooder, error) {
		n.Close()
		return nil, fmt.Errorf("flooder: %w", err)
	}
	if err := n.Bootstrap(ctx, 10*time.Second); err != nil {
		return fail(err)
	}
	for _, ai := range all {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = n.Host.Connect(cctx, ai) // a node down now is simply not flooded directly
		cancel()
	}
	hbs, err := p2p.JoinHeartbeats(n.PubSub, key, time.Now, log)
	if err != nil {
		return fail(err)
	}
	// The flooder publishes what it likes: its own check accepts all.
	orders, err := p2p.JoinTopic(n.PubSub, f.id, market.OrdersTopic, func(peer.ID, []byte) (struct{}, error) { return struct{}{}, nil }, log)
	if err != nil {
		hbs.Close()
		return fail(err)
	}
	now := time.Now()
	prof := &pb.Profile{Version: p2p.RecordVersion, Seq: 1, IssuedAtMs: now.UnixMilli(), ExpiresAtMs: now.Add(time.Hour).UnixMilli(),
		Region: "eu-west", Software: "gpumesh/chaos-flooder", Reach: string(p2p.ReachPublic)}
	for _, a := range n.Host.Addrs() {
		prof.Addrs = append(prof.Addrs, a.Bytes())
	}
	for i := range 8 {
		prof.Gpus = append(prof.Gpus, &pb.GPU{Model: floodModel, Name: "NVIDIA H100 80GB HBM3", Uuid: fmt.Sprintf("GPU-f100d000-0000-0000-0000-%012d", i), MemoryBytes: 80 << 30, CcMajor: 9, Simulated: true})
	}
	sealed, err := p2p.SealProfile(prof, key)
	if err != nil {
		return fail(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = n.PublishProfile(pctx, sealed, []string{floodModel})
	cancel()
	if err != nil {
		log.Warn("flooder: publish profile", "err", err)
	}
	fctx, stop := context.WithCancel(context.Background())
	f.cancel = stop
	f.wg.Go(func() {
		defer hbs.Close()
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			_ = hbs.Publish(fctx, &pb.Heartbeat{GpusTotal: 8, GpusFree: 8, Software: prof.Software, ProfileSeq: 1, Region: prof.Region})
			select {
			case <-fctx.Done():
				return
			case <-t.C:
			}
		}
	})
	f.wg.Go(func() {
		defer orders.Close()
		f.flood(fctx, orders, key, prof.Addrs, rate)
	})
	log.Info("chaos: flooder started", "peer", f.id, "rate", rate)
	return f, nil
}

// flood publishes rate asks a second: every other one of floodModel, the
// rest of a fresh made-up model each.
func (f *flooder) flood(ctx context.Context, orders *p2p.Topic[struct{}], key crypto.PrivKey, addrs [][]byte, rate float64) {
	t := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		model := floodModel
		if i%2 == 1 {
			model = fmt.Sprintf("flood-%d", i)
		}
		nonce, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
		now := time.Now()
		raw, err := market.SealAsk(&mpb.Ask{
			Nonce: nonce.Uint64() + 1, CreatedMs: now.UnixMilli(), ExpiresMs: now.Add(10 * time.Minute).UnixMilli(),
			Model: model, Count: 8, PriceMicros: 100_000, Region: "eu-west",
			MinDurationS: 60, MaxDurationS: 24 * 3600, Pricing: "fixed", Simulated: true, Addrs: addrs,
		}, key)
		if err != nil {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		if orders.Publish(pctx, raw) == nil {
			f.sent.Add(1)
		}
		cancel()
	}
}

// Close stops the flood and the flooder's host, and returns how many asks
// it published.
func (f *flooder) Close() int64 {
	f.cancel()
	f.wg.Wait()
	f.net.Close()
	return f.sent.Load()
}

// floodEnv carries a flooder process's orders (floodOrders, JSON): a
// chaos run starts its flooder as a process of its own, the executable
// running it again (FloodMain), so that the attacker's work does not
// share a process, and its scheduler, with the renter being measured.
const floodEnv = "GPUMESH_CHAOS_FLOOD"

type floodOrders struct {
	Nodes     []string `json:"nodes"` // every node's multiaddr, bootstrap peers first
	Bootstrap int      `json:"bootstrap"`
	Rate      float64  `json:"rate"`
}

// FloodMain runs this process as a chaos run's flooder when it was
// started as one, and reports whether it was: a program that runs
// chaos.Run (the chaos command, a test binary) calls it first thing and
// exits when it returns true. The flooder prints "ready PEER-ID" once it
// floods, and "sent N" after its standard input closes.
func FloodMain() bool {
	spec := os.Getenv(floodEnv)
	if spec == "" {
		return false
	}
	var o floodOrders
	if err := json.Unmarshal([]byte(spec), &o); err != nil {
		fmt.Fprintln(os.Stderr, "flooder:", err)
		os.Exit(2)
	}
	st := &testnet.State{}
	for i, a := range o.Nodes {
		st.Nodes = append(st.Nodes, testnet.NodeInfo{Index: i, Addr: a})
		if i < o.Bootstrap {
			st.Bootstrap = append(st.Bootstrap, a)
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	f, err := startFlooder(context.Background(), st, o.Rate, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "flooder:", err)
		os.Exit(1)
	}
	fmt.Printf("ready %s\n", f.id)
	_, _ = io.Copy(io.Discard, os.Stdin)
	fmt.Printf("sent %d\n", f.Close())
	return true
}

// floodProc is a flooder process.
type floodProc struct {
	id    peer.ID
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// spawnFlooder starts this executable again as a flooder of st's network
// and returns once it floods.
func spawnFlooder(ctx context.Context, st *testnet.State, rate float64) (*floodProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("flooder: %w", err)
	}
	o := floodOrders{Bootstrap: len(st.Bootstrap), Rate: rate}
	for _, nd := range st.Nodes {
		o.Nodes = append(o.Nodes, nd.Addr)
	}
	spec, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), floodEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("flooder: start: %w", err)
	}
	p := &floodProc{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	ready := make(chan error, 1)
	go func() {
		line, err := p.out.ReadString('\n')
		if err == nil {
			var id string
			if _, err = fmt.Sscanf(line, "ready %s", &id); err == nil {
				p.id, err = peer.Decode(id)
			}
		}
		ready <- err
	}()
	select {
	case err = <-ready:
	case <-ctx.Done():
		err = ctx.Err()
	case <-time.After(time.Minute):
		err = errors.New("not ready after a minute")
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("flooder: %w", err)
	}
	return p, nil
}

// Close stops the flooder and returns how many asks it published.
func (p *floodProc) Close() int64 {
	_ = p.stdin.Close()
	var sent int64
	if line, err := p.out.ReadString('\n'); err == nil {
		_, _ = fmt.Sscanf(line, "sent %d", &sent)
	}
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
	return sent
}
