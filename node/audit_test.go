package node

import (
	"context"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/doctor"
	"github.com/gpumesh/gpumesh/verify/audit"
	"github.com/gpumesh/gpumesh/verify/cuda"
	"github.com/gpumesh/gpumesh/verify/inventory"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// startImpostorNet starts an auditor without GPUs, an honest t4
// supplier (in honestRegion) and an impostor that claims t4s but corrupts
// a fifth of its rows (nodes 0, 1 and 2), and waits until the auditor
// knows both suppliers' profiles.
func startImpostorNet(t *testing.T, honestRegion string) *marketNet {
	t.Helper()
	impostorCfg := sellerConfig(t, "unset", "sim:t4:2", "eu-west", "fixed", []string{"t4=0.10"}, nil)
	impostorCfg.SimCheat = "wrong=0.2"
	m := startMarketNet(t, []Config{
		testConfig(t, "unset", "none", "eu-west", nil),
		sellerConfig(t, "unset", "sim:t4:2", honestRegion, "fixed", []string{"t4=0.20"}, nil),
		impostorCfg,
	})
	eventually(t, 20*time.Second, "auditor knows both profiles", func() bool {
		ps, _ := m.nodes[0].KnownProfiles()
		return len(ps) >= 2
	})
	return m
}

// TestAuditCatchesImpostor runs real challenges between in-process nodes:
// an honest simulated supplier passes, an impostor that corrupts rows
// fails, the verdicts are gossiped, and the impostor falls below the
// reputation floor on every node while the honest one rises above it.
func TestAuditCatchesImpostor(t *testing.T) {
	m := startImpostorNet(t, "eu-west")
	auditor, honest, impostor := m.nodes[0], m.nodes[1], m.nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	rep, err := auditor.ChallengePeer(ctx, honest.ID(), "")
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Passed || rep.GPUs != 2 || !rep.Attested || rep.RowsChecked == 0 || rep.VerifierCostRatio <= 0 {
		t.Fatalf("honest supplier: %+v", rep)
	}
	rep, err = auditor.ChallengePeer(ctx, impostor.ID(), "")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Passed || rep.GPUs != 0 || !strings.Contains(rep.Reason, "differs") {
		t.Fatalf("impostor: %+v", rep)
	}
	for _, n := range m.nodes {
		eventually(t, 10*time.Second, "verdicts gossiped to "+n.ID().ShortString(), func() bool {
			return n.Reputation().Score(impostor.ID()).Fails > 0 && n.Reputation().Score(honest.ID()).Passes > 0
		})
	}
	// Reputation as the honest supplier's node computes it (it pre-trusts
	// the auditor, its bootstrap peer).
	if s := honest.Reputation().Score(impostor.ID()); s.Reputation >= reputation.DefaultFloor || s.Verified {
		t.Fatalf("impostor's standing: %+v", s)
	}
	if s := impostor.Reputation().Score(honest.ID()); s.Reputation <= reputation.DefaultFloor {
		t.Fatalf("honest supplier's standing: %+v", s)
	}
	// The cheaper impostor is not leased.
	l, err := m.rent(t, "model=t4", 1, "1")
	if err != nil || l.Supplier != honest.ID() {
		t.Fatalf("rent: lease from %s, err %v; want the honest supplier", supplierOf(l), err)
	}
}

// TestChallengePriority: a renter holding a live lease of a supplier's
// GPUs challenges it ahead of strangers; a stranger, even one that bid,
// does not.
func TestChallengePriority(t *testing.T) {
	t.Parallel() // its own nodes; it waits on the network, not the CPU
	m := startMarketNet(t, []Config{
		sellerConfig(t, "unset", "sim:h100-sxm:2", "eu-west", "fixed", []string{"h100-sxm=2.10"}, nil),
		testConfig(t, "unset", "none", "eu-west", nil),
	})
	sup, renter := m.nodes[0], m.rc.Network().Host.ID()
	prio := sup.challengePriority()
	if prio(renter) {
		t.Fatal("a renter with no lease goes before strangers")
	}
	if !prio(sup.ID()) {
		t.Error("the node itself, pre-trusted, is a stranger")
	}
	if _, err := m.rent(t, "model=h100-sxm", 1, "2.50"); err != nil {
		t.Fatalf("rent: %v", err)
	}
	eventually(t, 5*time.Second, "the renter with a lease goes first", func() bool { return prio(renter) })
	// The leased GPU is not challenged (audit.ProverConfig.Leased) until
	// its lease lapses; the other one is.
	res := sup.Supplier().Ledger().Reservations()
	if len(res) != 1 || len(res[0].GPUs) != 1 {
		t.Fatalf("reservations: %+v, want one of one GPU", res)
	}
	var all []string
	for _, g := range sup.GPUs() {
		all = append(all, g.UUID)
	}
	free := slices.DeleteFunc(slices.Clone(all), func(u string) bool { return u == res[0].GPUs[0] })
	if got, want := sup.leasedGPUs(all), res[0].Until.Sub(sup.now()); got <= 0 || got > want+time.Second {
		t.Errorf("leasedGPUs(all) = %v, want the time until the lease lapses (%v)", got, want)
	}
	if got := sup.leasedGPUs(free); len(free) != 1 || got != 0 {
		t.Errorf("leasedGPUs(%v) = %v, want 0: not leased", free, got)
	}
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if stranger, _ := peer.IDFromPrivateKey(k); prio(stranger) {
		t.Error("a stranger goes before strangers")
	}
}

// TestRealGPUsWithoutProver: a supplier whose GPUs are real (NVML) but
// whose CUDA driver cannot be loaded refuses their challenges with
// no-prover, which the challenger neither passes nor fails nor counts as
// down, and its doctor says renters will not lease them.
func TestRealGPUsWithoutProver(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	auditor := startNode(t, testConfig(t, filepath.Join(root, "a"), "none", "eu-west", nil))
	sup := startNode(t, testConfig(t, filepath.Join(root, "s"), "none", "eu-west", bootstrapOf(auditor)),
		WithDetector(inventory.NewNVML(dgxh100.New(), nil)), WithCUDALibrary(filepath.Join(root, "no-libcuda.so.1")))
	if len(sup.GPUs()) != 8 || sup.GPUs()[0].Simulated {
		t.Fatalf("supplier's GPUs: %+v, want 8 real ones", sup.GPUs())
	}
	waitAdvertised(t, sup)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := auditor.ChallengePeer(ctx, sup.ID(), "h100-sxm")
	if err != nil {
		t.Fatalf("challenge: %v (%+v)", err, rep)
	}
	if len(rep.Models) != 1 || rep.Models[0].Outcome != audit.OutcomeNoProver || rep.Attested || rep.Passed {
		t.Fatalf("challenge of real GPUs without a prover: %+v", rep)
	}
	if s := auditor.verify.rep.Score(sup.ID()); s.Fails != 0 || s.Passes != 0 {
		t.Errorf("a no-prover answer was scored: %+v", s)
	}
	if got := gathered(t, auditor.reg)[key("gpumesh_challenges_total", "verdict", "no-prover")]; got != 1 {
		t.Errorf(`gpumesh_challenges_total{verdict="no-prover"} = %v, want 1`, got)
	}
	doc := sup.Doctor(ctx)
	c, ok := doc.Check(doctor.CheckProver)
	if !ok || c.Status != api.StatusWarn || !strings.Contains(c.Detail, "renters will not lease these GPUs by default: no GPU prover") || !strings.Contains(c.Detail, "no-libcuda.so.1") {
		t.Errorf("doctor's prover check: %+v", c)
	}
}

func TestDevicesOf(t *testing.T) {
	devs := []*cuda.Device{{Info: cuda.DeviceInfo{Ordinal: 0, UUID: "GPU-b"}}, {Info: cuda.DeviceInfo{Ordinal: 1, UUID: "GPU-a"}}}
	got, err := devicesOf([]inventory.GPU{{UUID: "GPU-a"}, {UUID: "GPU-sim-1", Simulated: true}, {UUID: "GPU-b"}}, devs)
	if err != nil || len(got) != 2 || got[0] != devs[1] || got[1] != devs[0] {
		t.Fatalf("devicesOf = %v, %v; want the devices of GPU-a then GPU-b", got, err)
	}
	if _, err := devicesOf([]inventory.GPU{{UUID: "GPU-c"}}, devs); err == nil || !strings.Contains(err.Error(), "GPU-c") {
		t.Errorf("a GPU the driver does not show: %v", err)
	}
}

// TestDevicesFor: on a supplier with A100s then H100s, a challenge of its
// H100s gets the devices of exactly those, in the order it names them,
// not the first devices of the node.
func TestDevicesFor(t *testing.T) {
	var devs []*cuda.Device
	var gpus []audit.GPU
	for i, m := range []string{"a100-80gb", "a100-80gb", "a100-80gb", "a100-80gb", "h100-sxm", "h100-sxm"} {
		uuid := fmt.Sprintf("GPU-%d", i)
		devs = append(devs, &cuda.Device{Info: cuda.DeviceInfo{Ordinal: i, UUID: uuid}})
		gpus = append(gpus, audit.GPU{UUID: uuid, Model: m})
	}
	got, err := devicesFor([]audit.GPU{gpus[5], gpus[4]}, devs)
	if err != nil || len(got) != 2 || got[0] != devs[5] || got[1] != devs[4] {
		t.Fatalf("devicesFor(the H100s) = %v, %v; want devices 5 then 4", got, err)
	}
	if _, err := devicesFor([]audit.GPU{{UUID: "GPU-x", Model: "h100-sxm"}}, devs); err == nil || !strings.Contains(err.Error(), "GPU-x") {
		t.Errorf("a GPU the driver does not show: %v", err)
	}
}

// TestRenterSetReadsAtMostEveryTTL: a challenger's priority reads the
// lease store at most every renterSetTTL, however many streams come in.
func TestRenterSetReadsAtMostEveryTTL(t *testing.T) {
	renter := peer.ID("renter")
	reads := 0
	r := &renterSet{read: func(time.Time) map[peer.ID]bool {
		reads++
		return map[peer.ID]bool{renter: reads > 1}
	}}
	t0 := time.Unix(1_000_000, 0)
	for i := range 1000 {
		if r.has(renter, t0.Add(time.Duration(i)*time.Millisecond)) {
			t.Fatal("a renter read before its lease counts")
		}
	}
	if reads != 1 {
		t.Fatalf("%d reads of the lease store in 1 s, want 1", reads)
	}
	if !r.has(renter, t0.Add(renterSetTTL)) || reads != 2 {
		t.Fatalf("after %v: %d reads, want the set read again (2)", renterSetTTL, reads)
	}
}
