package node

import (
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/gpumesh/gpumesh/internal/metrics"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/p2p"
)

// TestProvideOnlyWhatIsDue: a republished profile announces again only
// the provider records that are due: none while the last announcements
// are fresh, one that failed, all once provideEvery has passed, and all
// at once when the node's addresses changed (a provider record carries
// them).
func TestProvideOnlyWhatIsDue(t *testing.T) {
	var p provided
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	models := []string{"h100-sxm", "l40s"}
	all := []string{"h100-sxm", "l40s", p2p.EverySupplier}
	names := func(m map[string]cid.Cid) []string {
		var out []string
		for n := range m {
			out = append(out, n)
		}
		slices.Sort(out)
		return out
	}
	check := func(what string, got, want []string) {
		t.Helper()
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: due %v, want %v", what, got, want)
		}
	}

	due := p.due(models, "reach-a", t0)
	check("first publish", names(due), slices.Clone(all))
	if due["h100-sxm"] != p2p.ModelCID("h100-sxm") || due[p2p.EverySupplier] != p2p.SupplierCID() {
		t.Fatalf("due keys are not the model and supplier CIDs: %v", due)
	}
	// Two announced, the supplier key failed.
	p.done("h100-sxm", t0)
	p.done("l40s", t0)
	check("after a failed announcement", names(p.due(models, "reach-a", t0.Add(time.Minute))), []string{p2p.EverySupplier})
	p.done(p2p.EverySupplier, t0.Add(time.Minute))
	check("30 min later, nothing changed", names(p.due(models, "reach-a", t0.Add(30*time.Minute))), nil)
	check("a model added", names(p.due(append(models, "a100-80gb"), "reach-a", t0.Add(31*time.Minute))), []string{"a100-80gb"})
	check("provideEvery later", names(p.due(models, "reach-a", t0.Add(provideEvery))), []string{"h100-sxm", "l40s"})
	check("addresses changed", names(p.due(models, "reach-b", t0.Add(32*time.Minute))), slices.Clone(all))
}

// TestProfilesFetchedFromADirectory: a daemon that hears a peer announce a
// new profile reads it from a connected peer's directory, in one round
// trip, not by walking the DHT; and it holds the very profile announced.
func TestProfilesFetchedFromADirectory(t *testing.T) {
	root := t.TempDir()
	boot := startNode(t, testConfig(t, filepath.Join(root, "boot"), "none", "eu-west", nil))
	var sups []*Node
	for i, gpus := range []string{"sim:h100-sxm:2", "sim:l40s:1"} {
		sups = append(sups, startNode(t, testConfig(t, filepath.Join(root, "s"+strconv.Itoa(i)), gpus, "us-east", bootstrapOf(boot))))
	}
	for _, s := range sups {
		waitAdvertised(t, s)
	}
	eventually(t, 20*time.Second, "the boot node to hold both suppliers' announced profiles", func() bool {
		for _, s := range sups {
			announced, held := boot.peers.seqs(s.ID())
			if announced == 0 || held < announced {
				return false
			}
		}
		return true
	})
	token, err := api.ReadToken(boot.cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := scrape(t, boot, token)
	dir, dht := got[key("gpumesh_profiles_fetched_total", "source", string(metrics.FromDirectory))], got[key("gpumesh_profiles_fetched_total", "source", string(metrics.FromDHT))]
	if dir < 2 {
		t.Fatalf("profiles fetched from a directory: %v (from the DHT: %v), want both suppliers'", dir, dht)
	}
	for _, s := range sups {
		p, ok := boot.keptProfile(s.ID())
		if !ok {
			t.Fatalf("no profile of %s kept", s.ID())
		}
		if p.Seq != s.currentProfileSeq() {
			t.Fatalf("kept profile of %s: seq %d; want the one it published, seq %d", s.ID(), p.Seq, s.currentProfileSeq())
		}
	}
}
