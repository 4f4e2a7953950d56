package cuda

import (
	"testing"
	"time"
)

func TestPlanT(t *testing.T) {
	// Fixed costs 2 s (derive 1, tree 0.5, verify of one row 0.5); a step
	// 0.1 s on the device, 0.5 s per row on the CPU verifier.
	probe := ChallengeResult{DeriveS: 1, TreeS: 0.5, VerifyS: 0.5, ChainS: 0.1}
	tests := []struct {
		name   string
		realT  int
		k      int
		budget time.Duration
		want   int
	}{
		{"fits whole", 10, 2, 100 * time.Second, 10},
		{"shortened", 141, 2, 12 * time.Second, 9}, // (12−2)/(0.1+1.0)
		{"at least one", 141, 66, time.Second, 1},
		{"no figures", 44, 66, time.Second, 44},
	}
	for _, tt := range tests {
		p := probe
		if tt.name == "no figures" {
			p = ChallengeResult{}
		}
		if got := PlanT(p, tt.realT, tt.k, tt.budget); got != tt.want {
			t.Errorf("%s: PlanT = %d, want %d", tt.name, got, tt.want)
		}
	}
}
