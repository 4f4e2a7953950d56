package job

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/gpumesh/gpumesh/market/settle"
	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/node/runtime"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/store"
)

// startSupplier runs an Executor on a gpumesh host (its resource manager
// included) over a Badger store that holds no leases, as a supplier that
// nobody has rented from.
func startSupplier(t *testing.T, tune func(*ExecutorConfig)) (*Executor, host.Host) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	net, err := p2p.New(p2p.Config{Key: key, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { net.Close() })
	dir := t.TempDir()
	st, err := store.OpenBadger(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	led, err := settle.OpenLedger(st)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New("process", runtime.Options{Log: quiet, AllowUnsandboxed: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg := ExecutorConfig{
		Host: net.Host, Key: key, Store: st, Ledger: led, Runtimes: map[string]runtime.Runtime{"process": rt},
		DataDir: dir, Log: quiet,
		Leases: &testSupplier{}, // it confirmed no lease
	}
	if tune != nil {
		tune(&cfg)
	}
	e, err := NewExecutor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, net.Host
}

// attackers starts n plain libp2p hosts connected to the supplier.
func attackers(t *testing.T, n int, supplier host.Host) []host.Host {
	t.Helper()
	var hs []host.Host
	for range n {
		h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableMetrics())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = h.Connect(ctx, peer.AddrInfo{ID: supplier.ID(), Addrs: supplier.Addrs()})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	return hs
}

func openSession(t *testing.T, from host.Host, to peer.ID) network.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := from.NewStream(ctx, to, SessionProtocol)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// hugeHello is the start of a length-prefixed Hello whose lease field
// announces size bytes, without a lease: what an attacker sends to make a
// supplier buffer size bytes.
func hugeHello(size int) []byte {
	field := protowire.AppendTag(nil, 1, protowire.BytesType)
	field = protowire.AppendVarint(field, uint64(size))
	return append(protowire.AppendVarint(nil, uint64(len(field)+size)), field...)
}

// sendHuge writes a Hello with a 32 MiB lease field of zeros on st, until
// the stream fails or all is written; it returns how many
// bytes were written. Meanwhile it reads the supplier's answer and resets
// the stream when one comes (a Welcome, or an error), as a client that
// gives up would.
func sendHuge(st network.Stream) (written int, answer string) {
	const size = 32 << 20
	_ = st.SetDeadline(time.Now().Add(2 * time.Minute))
	done := make(chan struct{})
	go func() {
		defer close(done)
		var w pb.Welcome
		if err := p2p.ReadMsg(st, MaxWelcomeSize, &w); err != nil {
			answer = "error: " + err.Error()
		} else {
			answer = "welcome: " + w.Refused
		}
		st.Reset()
	}()
	head := hugeHello(size)
	n, err := st.Write(head)
	written += n
	zeros := make([]byte, 64<<10)
	for left := size; err == nil && left > 0; left -= len(zeros) {
		n, err = st.Write(zeros[:min(left, len(zeros))])
		written += n
	}
	<-done
	return written, answer
}

// TestSessionHugeHellosNotBuffered is issue 9's memory attack: 4 peers
// without a lease open 5 job sessions each and send a Hello of 32 MiB.
// The supplier must drop each after a small header, not read (and hold)
// the payload: every attacker stream stalls or is reset within a few MiB,
// far below what it tried to send.
func TestSessionHugeHellosNotBuffered(t *testing.T) {
	_, sup := startSupplier(t, nil)
	hs := attackers(t, 4, sup)
	type outcome struct {
		written int
		answer  string
	}
	var mu sync.Mutex
	var outs []outcome
	var wg sync.WaitGroup
	for _, h := range hs {
		for range 5 {
			st := openSession(t, h, sup.ID())
			wg.Go(func() {
				n, a := sendHuge(st)
				mu.Lock()
				outs = append(outs, outcome{n, a})
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	// A stream's flow-control window lets a few hundred KiB through
	// before the supplier reads; 4 MiB is far above that and far below
	// the 32 MiB sent.
	const most = 4 << 20
	answers := map[string]int{}
	for _, o := range outs {
		answers[o.answer]++
	}
	t.Logf("answers: %v", answers)
	for i, o := range outs {
		if o.written > most {
			t.Errorf("stream %d: the supplier took %d bytes of a Hello without a lease (answer %q); want at most %d", i, o.written, o.answer, most)
		}
	}
}

// pendingTotal is TestSessionPendingCaps's cap on waiting streams.
const pendingTotal = 16

// TestSessionPendingCaps: streams that have not sent their Hello are
// capped per peer (2) and in all (here 16); extra ones are refused at once
// as busy, and slots come back when the streams end.
func TestSessionPendingCaps(t *testing.T) {
	e, sup := startSupplier(t, func(c *ExecutorConfig) {
		c.HeaderTimeout = 2 * time.Minute // the waiting streams must outlast the test
		c.MaxPending = pendingTotal       // reached by 8 peers (the default is 128)
	})
	hs := attackers(t, 9, sup)
	// A lone byte of a length prefix: the supplier waits for the rest.
	stall := func(h host.Host) network.Stream {
		st := openSession(t, h, sup.ID())
		if _, err := st.Write([]byte{0x80}); err != nil {
			t.Fatal(err)
		}
		return st
	}
	var waiting []network.Stream
	for _, h := range hs[:8] {
		waiting = append(waiting, stall(h), stall(h))
	}
	eventually(t, time.Minute, "16 streams waiting for their Hello", func() bool { return e.gate.held("") == pendingTotal })
	for _, h := range hs[:8] {
		if n := e.gate.held(h.ID()); n != MaxPendingPerPeer {
			t.Fatalf("peer holds %d slots, want %d", n, MaxPendingPerPeer)
		}
	}
	refusedBusy := func(st network.Stream, why string) {
		t.Helper()
		defer st.Reset()
		_ = st.SetReadDeadline(time.Now().Add(time.Minute))
		var w pb.Welcome
		if err := p2p.ReadMsg(st, MaxWelcomeSize, &w); err != nil {
			t.Fatalf("%s: want a busy refusal, got %v", why, err)
		}
		if !w.Busy || !strings.HasPrefix(w.Refused, "busy:") {
			t.Fatalf("%s: want a busy refusal, got %+v", why, &w)
		}
	}
	for _, h := range hs[:4] {
		for range 3 {
			refusedBusy(stall(h), "a third stream of one peer")
		}
	}
	refusedBusy(stall(hs[8]), "a new peer's stream beyond the total")
	if n := e.gate.held(""); n != pendingTotal {
		t.Fatalf("%d slots held after the refusals, want %d", n, pendingTotal)
	}
	for _, st := range waiting {
		st.Reset()
	}
	eventually(t, time.Minute, "every slot given back", func() bool { return e.gate.held("") == 0 })
	// A freed slot serves the next stream: it is read, and refused on its
	// merits.
	st := openSession(t, hs[8], sup.ID())
	defer st.Reset()
	_ = st.SetDeadline(time.Now().Add(time.Minute))
	w, err := Handshake(st, &pb.Hello{LeaseId: make([]byte, 32), Attempt: 1}, nil, nil)
	if err != nil || w.Busy || !strings.Contains(w.Refused, "no job runs") {
		t.Fatalf("attach after the slots came back: %+v, %v", w, err)
	}
}

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
