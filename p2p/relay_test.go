package p2p

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	ma "github.com/multiformats/go-multiaddr"
)

// startRelay starts a server that serves as a relay at once (ReachabilityPublic:
// on loopback AutoNAT never finds it public) with limits l, and waits
// until its relay service answers.
func startRelay(t *testing.T, l RelayLimits) *Network {
	t.Helper()
	n, err := New(Config{Key: newKey(t), Mode: ModeServer, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"},
		Relay: l, Reachability: ReachabilityPublic, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	// The relay service starts once the host's reachability event is
	// out; until then a reservation is answered "protocols not supported".
	waitFor(t, 10*time.Second, "the relay service", func() bool {
		protos, _ := n.Host.Peerstore().SupportsProtocols(n.Host.ID(), "/libp2p/circuit/relay/0.2.0/hop")
		return len(protos) > 0 || hasHandler(n.Host, "/libp2p/circuit/relay/0.2.0/hop")
	})
	return n
}

func hasHandler(h host.Host, proto string) bool {
	for _, p := range h.Mux().Protocols() {
		if string(p) == proto {
			return true
		}
	}
	return false
}

// plainHost is a bare libp2p host on loopback, as a peer behind NAT that
// wants a reservation would run (its relay client is on by default).
func plainHost(t testing.TB) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableMetrics())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// TestRelayLimits checks the relay service of a public server:
//   - it grants MaxReservations reservations and refuses the next ones;
//   - a flood of reservation requests from many fresh keys is refused,
//     leaves no goroutines behind, and the reserved peers stay reachable
//     through it;
//   - a relayed connection is cut after Data bytes, which is why long
//     protocols wait for a direct connection.
func TestRelayLimits(t *testing.T) {
	const slots = 3
	relay := startRelay(t, RelayLimits{MaxReservations: slots, MaxReservationsPerIP: 1000, Data: 64 << 10})
	ri := peer.AddrInfo{ID: relay.Host.ID(), Addrs: relay.Host.Addrs()}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	reserve := func(h host.Host) error {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := client.Reserve(rctx, h, ri)
		return err
	}
	var held []host.Host
	for i := range slots + 2 {
		h := plainHost(t)
		err := reserve(h)
		switch {
		case i < slots && err != nil:
			t.Fatalf("reservation %d of %d refused: %v", i+1, slots, err)
		case i >= slots && err == nil:
			t.Fatalf("reservation %d granted beyond the %d slots", i+1, slots)
		case i >= slots && !isRefused(err):
			t.Fatalf("reservation %d beyond the slots failed, but not as refused: %v", i+1, err)
		case i < slots:
			held = append(held, h)
		}
	}

	// The flood: many fresh keys at once, each asking for a slot.
	settle := func() int { runtime.GC(); time.Sleep(200 * time.Millisecond); return runtime.NumGoroutine() }
	before := settle()
	const flood = 40
	var granted, refused atomic.Int32
	var wg sync.WaitGroup
	for range flood {
		h, err := libp2p.New(libp2p.NoListenAddrs, libp2p.DisableMetrics())
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer h.Close()
			switch err := reserve(h); {
			case err == nil:
				granted.Add(1)
			case isRefused(err):
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	if granted.Load() != 0 {
		t.Fatalf("%d of %d flood reservations granted with every slot taken", granted.Load(), flood)
	}
	if refused.Load() != flood {
		t.Errorf("%d of %d flood reservations refused as such (others failed otherwise)", refused.Load(), flood)
	}
	waitFor(t, 10*time.Second, "the flood's goroutines to end", func() bool { return settle() <= before+10 })

	// A reserved peer is still reached through the relay, and the relayed
	// connection is cut past its data limit.
	target, dialer := held[0], plainHost(t)
	received := make(chan int64, 2)
	target.SetStreamHandler("/gpumesh-test/bulk", func(s network.Stream) {
		buf := make([]byte, 4096)
		var n int64
		for {
			k, err := s.Read(buf)
			n += int64(k)
			if err != nil {
				break
			}
		}
		s.Reset()
		received <- n
	})
	circuit := ma.StringCast(fmt.Sprintf("%s/p2p/%s/p2p-circuit", relay.Host.Addrs()[0], relay.Host.ID()))
	if err := dialer.Connect(ctx, peer.AddrInfo{ID: target.ID(), Addrs: []ma.Multiaddr{circuit}}); err != nil {
		t.Fatalf("connect to a reserved peer through the relay after the flood: %v", err)
	}
	send := func(size int) error {
		s, err := dialer.NewStream(network.WithAllowLimitedConn(ctx, "test"), target.ID(), "/gpumesh-test/bulk")
		if err != nil {
			return fmt.Errorf("stream over the relayed connection: %w", err)
		}
		if !s.Conn().Stat().Limited {
			t.Fatal("the connection to the reserved peer is not the limited, relayed one")
		}
		if _, err := s.Write(make([]byte, size)); err != nil {
			return err
		}
		return s.CloseWrite()
	}
	// Below the limit, the relay carries a stream whole.
	if err := send(8 << 10); err != nil {
		t.Fatalf("8 KiB through the relay: %v", err)
	}
	select {
	case n := <-received:
		if n != 8<<10 {
			t.Fatalf("the reserved peer got %d of 8192 bytes through the relay", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("8 KiB through the relay did not arrive within 10 s")
	}
	// Past it, the relay cuts the connection: the rest never arrives.
	const sent = 256 << 10
	werr := send(sent)
	waitFor(t, 20*time.Second, "the relay to cut the relayed connection past its 64 KiB limit", func() bool {
		return len(dialer.Network().ConnsToPeer(target.ID())) == 0
	})
	var got int64
	select {
	case got = <-received:
	case <-time.After(2 * time.Second): // the stream never reached the handler
	}
	if got >= sent {
		t.Fatalf("the relay carried all %d bytes past its 64 KiB limit", got)
	}
	t.Logf("relayed connection cut past the limit: %d of %d bytes arrived (write: %v)", got, sent, werr)
}

// isRefused reports whether err is the relay's refusal of a reservation.
func isRefused(err error) bool {
	var re client.ReservationError
	return errors.As(err, &re) && re.Status.String() == "RESERVATION_REFUSED"
}
