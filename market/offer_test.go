package market

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	mpb "github.com/gpumesh/gpumesh/market/pb"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/p2p/pb"
)

// testProfile is a validated-looking profile of id in region with one
// GPU per model listed (a model listed twice has two).
func testProfile(t *testing.T, id peer.ID, region string, models ...string) *p2p.Profile {
	t.Helper()
	p := &p2p.Profile{
		Profile: &pb.Profile{Region: region, Software: "gpumesh/test", IssuedAtMs: testNow.UnixMilli()},
		ID:      id,
		Addrs:   []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/4001")},
	}
	for i, m := range models {
		p.Gpus = append(p.Gpus, &pb.GPU{Model: m, Name: "GPU " + m, Uuid: "GPU-" + string(rune('a'+i)), MemoryBytes: 80 << 30, CcMajor: 9})
	}
	return p
}

func TestOffersFromProfile(t *testing.T) {
	id := peerOf(t, newTestKey(t))
	p := testProfile(t, id, "eu-west", "h100-sxm", "rtx4090", "h100-sxm")
	p.Gpus[2].Simulated = true
	p.JobLimitsMax = &pb.JobLimits{Procs: 64}
	got := OffersFromProfile(p)
	if len(got) != 2 {
		t.Fatalf("%d offers, want one per model (2): %+v", len(got), got)
	}
	h := got[0]
	if h.Model != "h100-sxm" || h.Count != 2 || h.Free != 2 || h.VRAMGiB != 80 || h.ComputeCapability != "9.0" || h.TFLOPS != 989 || h.PeerID != id.String() || h.Region != "eu-west" || len(h.Addrs) != 1 {
		t.Errorf("h100 offer = %+v", h)
	}
	if !h.Simulated {
		t.Error("a model with one simulated GPU is not shown as simulated")
	}
	if h.JobLimits == nil || h.JobLimits.Max.Procs != 64 || h.JobLimits.Default != (JobLimitSet{}) {
		t.Errorf("job limits = %+v, want max procs 64 and no defaults", h.JobLimits)
	}
	if r := got[1]; r.Model != "rtx4090" || r.Count != 1 || r.TFLOPS != 165 || r.Simulated {
		t.Errorf("rtx4090 offer = %+v", r)
	}
	if o := OffersFromProfile(testProfile(t, id, "", "no-such-gpu")); o[0].JobLimits != nil || o[0].TFLOPS != 0 {
		t.Errorf("profile without limits, of a model the catalog lacks: %+v", o[0])
	}
}

func TestMatchOffers(t *testing.T) {
	f := newFixture(t)
	other := peerOf(t, newTestKey(t))
	ps := []*p2p.Profile{
		testProfile(t, other, "us-east", "h100-sxm"),
		testProfile(t, f.supplier, "eu-west", "rtx4090", "h100-sxm", "h100-sxm"),
	}
	ask, err := OpenAsk(f.ask(t, func(m *mpb.Ask) { m.Count, m.PriceMicros = 1, 2_000_000 }), testNow)
	if err != nil {
		t.Fatal(err)
	}
	up := 99.0
	score := func(p peer.ID) (float64, bool, *float64) {
		if p == f.supplier {
			return 0.9, true, &up
		}
		return 0.5, false, nil
	}
	all := mustParseFilter(t, "")

	// Without inputs: every offer, free as listed, sorted by model, region, peer.
	got := MatchOffers(ps, all, OfferInputs{})
	if len(got) != 3 || got[0].Model != "h100-sxm" || got[0].Region != "eu-west" || got[1].Region != "us-east" || got[2].Model != "rtx4090" {
		t.Fatalf("offers = %+v, want h100 eu-west, h100 us-east, rtx4090", got)
	}
	if got[0].Free != 2 || got[0].PriceMicros != 0 || got[0].Reputation != nil {
		t.Errorf("offer without inputs = %+v", got[0])
	}

	// With a book and scores: the live ask prices and caps the free count;
	// offers without an ask have none free.
	got = MatchOffers(ps, all, OfferInputs{Asks: []*Ask{ask}, Score: score})
	h := got[0]
	if h.PriceMicros != 2_000_000 || h.Free != 1 || h.Reputation == nil || *h.Reputation != 0.9 || !h.Verified || h.UptimePct == nil || *h.UptimePct != 99 {
		t.Errorf("offer with an ask and a score = %+v", h)
	}
	if got[1].Free != 0 || got[2].Free != 0 {
		t.Errorf("offers without a live ask have %d and %d free, want 0", got[1].Free, got[2].Free)
	}

	// The filter sees what the inputs added.
	for _, tt := range []struct {
		filter string
		want   int
	}{
		{"model=h100-sxm", 2},
		{"price<=2.00", 1},
		{"verified=true", 2}, // both of the scored supplier's models
		{"free>=1", 1},
		{"region=us-east rep>=0.6", 0},
	} {
		if got := MatchOffers(ps, mustParseFilter(t, tt.filter), OfferInputs{Asks: []*Ask{ask}, Score: score}); len(got) != tt.want {
			t.Errorf("filter %q: %d offers, want %d", tt.filter, len(got), tt.want)
		}
	}
}

// TestOffersFromProfileHardware: an offer states the least of its GPUs'
// PCIe, NVLink, CUDA and bandwidth, and a GPU that does not say makes the
// field unknown, so that a filter term holds for any GPU a lease gets.
func TestOffersFromProfileHardware(t *testing.T) {
	id := peerOf(t, newTestKey(t))
	p := testProfile(t, id, "eu-west", "h100-sxm", "h100-sxm", "a100-80gb", "a100-80gb")
	links := func(n uint32) *uint32 { return &n }
	p.Gpus[0].PcieGen, p.Gpus[0].PcieWidth, p.Gpus[0].NvlinkLinks, p.Gpus[0].CudaVersion, p.Gpus[0].DriverVersion, p.Gpus[0].MemBandwidthGbps = 5, 16, links(18), "12.10", "580.1", 3350
	p.Gpus[1].PcieGen, p.Gpus[1].PcieWidth, p.Gpus[1].NvlinkLinks, p.Gpus[1].CudaVersion, p.Gpus[1].DriverVersion, p.Gpus[1].MemBandwidthGbps = 4, 8, links(12), "12.9", "580.1", 3350
	p.Gpus[2].PcieGen, p.Gpus[2].NvlinkLinks, p.Gpus[2].CudaVersion = 4, links(12), "12.4"
	got := OffersFromProfile(p)
	h := got[0]
	if h.PCIeGen != 4 || h.PCIeWidth != 8 || h.NVLinks == nil || *h.NVLinks != 12 || h.CUDAVersion != "12.9" || h.DriverVersion != "580.1" || h.MemBandwidthGBps != 3350 {
		t.Errorf("h100 offer's hardware = %+v, want the least of its two GPUs", h)
	}
	a := got[1]
	if a.PCIeGen != 0 || a.NVLinks != nil || a.CUDAVersion != "" || a.MemBandwidthGBps != 0 {
		t.Errorf("a100 offer's hardware = %+v, want unknown where one GPU does not say", a)
	}
}
