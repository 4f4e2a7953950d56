package p2p

import (
	"context"
	"testing"

	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/net/conngater"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
	"github.com/prometheus/client_golang/prometheus"
)

// TestHostOptions applies the host's options to a libp2p config and
// checks what each concern sets, for a server and for a light client.
func TestHostOptions(t *testing.T) {
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	rm, err := newResourceManager()
	if err != nil {
		t.Fatal(err)
	}
	defer rm.Close()
	cm, err := connmgr.NewConnManager(1, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close()
	gater, err := conngater.NewBasicConnectionGater(nil)
	if err != nil {
		t.Fatal(err)
	}
	relays := func(context.Context, int) <-chan peer.AddrInfo { return nil }
	reg := prometheus.NewRegistry()

	for _, c := range []struct {
		name   string
		cfg    Config
		server bool
	}{
		{"server", Config{Key: key, UserAgent: "gpumesh/test", Mode: ModeServer,
			ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"}, Registerer: reg}, true},
		{"light client", Config{Key: key, UserAgent: "gpumesh/test", Mode: ModeClient}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var lc libp2p.Config
			if err := lc.Apply(hostOptions(c.cfg, rm, cm, gater, relays)...); err != nil {
				t.Fatal(err)
			}
			if lc.PeerKey != key || lc.UserAgent != "gpumesh/test" {
				t.Error("identity or user agent not set")
			}
			if len(lc.Transports) != 2 || len(lc.SecurityTransports) != 2 || len(lc.Muxers) != 1 {
				t.Errorf("%d transports, %d security, %d muxers; want 2, 2 (TLS, Noise), 1", len(lc.Transports), len(lc.SecurityTransports), len(lc.Muxers))
			} else if lc.SecurityTransports[0].ID != libp2ptls.ID || lc.SecurityTransports[1].ID != noise.ID {
				t.Errorf("security transports %s, %s; want TLS first, then Noise", lc.SecurityTransports[0].ID, lc.SecurityTransports[1].ID)
			}
			if lc.ResourceManager != rm || lc.ConnManager != cm || lc.ConnectionGater != gater {
				t.Error("resource manager, connection manager or gater not set")
			}
			if len(lc.ListenAddrs) != len(c.cfg.ListenAddrs) {
				t.Errorf("%d listen addrs, want %d", len(lc.ListenAddrs), len(c.cfg.ListenAddrs))
			}
			if wantMetrics := c.cfg.Registerer != nil; lc.DisableMetrics == wantMetrics || (lc.PrometheusRegisterer != nil) != wantMetrics {
				t.Errorf("metrics disabled %v, registerer %v; want metrics %v", lc.DisableMetrics, lc.PrometheusRegisterer, wantMetrics)
			}
			if !lc.EnableHolePunching {
				t.Error("hole punching off")
			}
			if lc.AutoNATConfig.EnableService != c.server || lc.EnableRelayService != c.server || lc.EnableAutoRelay != c.server {
				t.Errorf("NAT service %v, relay service %v, auto relay %v; want %v", lc.AutoNATConfig.EnableService, lc.EnableRelayService, lc.EnableAutoRelay, c.server)
			}
		})
	}
	if dhtMode(ModeServer) != dht.ModeAutoServer || dhtMode(ModeClient) != dht.ModeClient {
		t.Error("dhtMode maps a mode to the wrong DHT mode")
	}
}
