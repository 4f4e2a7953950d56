package audit

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/verify/challenge"
)

// BenchmarkChallengeSim times a whole challenge of one simulated GPU of
// each model over real libp2p on loopback (commit, sweep, openings checked,
// memory proof), and reports the verifier's share of the prover's work at
// this size and at the real one.
//
//	go test -run '^$' -bench ChallengeSim ./verify/audit/
func BenchmarkChallengeSim(b *testing.B) {
	for _, prof := range catalog.Profiles() {
		b.Run(prof.Slug, func(b *testing.B) {
			ph, ch := newHost(b), newHost(b)
			Serve(ProverConfig{Host: ph, GPUs: []GPU{{UUID: "GPU-sim-x", Model: prof.Slug, Simulated: true}}, PeerGap: time.Nanosecond, Log: quiet()})
			ctx := context.Background()
			if err := ch.Connect(ctx, peer.AddrInfo{ID: ph.ID(), Addrs: ph.Addrs()}); err != nil {
				b.Fatal(err)
			}
			c := NewChallenger(ch, 0, quiet())
			sim, _ := Sizes(prof, true, 0)
			b.ResetTimer()
			for b.Loop() {
				res, err := c.Challenge(ctx, ph.ID(), prof.Slug, []string{"GPU-sim-x"}, true)
				if err != nil || !res.Passed {
					b.Fatalf("challenge: %v %s", err, res.Reason)
				}
			}
			b.ReportMetric(100*challenge.CostRatio(sim), "%verifier-sim")
			b.ReportMetric(100*challenge.CostRatio(challenge.RealParams(prof)), "%verifier-real")
		})
	}
}
