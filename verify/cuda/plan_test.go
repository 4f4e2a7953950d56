package cuda

import (
	"testing"
	"time"
)

func TestPlanT(t *testing.T) {
	// Fixed costs 1.5 s (derive 1, tree 0.5); a step 0.1 s on the device
	// and 2 s on the CPU verifier (its K rows together).
	probe := ChallengeResult{DeriveS: 1, TreeS: 0.5, VerifyS: 2, ChainS: 0.1}
	tests := []struct {
		name   string
		realT  int
		budget time.Duration
		want   int
	}{
		{"fits whole", 10, 100 * time.Second, 10},
		{"shortened", 141, 12 * time.Second, 5}, // (12−1.5)/(0.1+2)
		{"at least one", 141, time.Second, 1},
		{"no figures", 44, time.Second, 44},
	}
	for _, tt := range tests {
		p := probe
		if tt.name == "no figures" {
			p = ChallengeResult{}
		}
		if got := PlanT(p, tt.realT, tt.budget); got != tt.want {
			t.Errorf("%s: PlanT = %d, want %d", tt.name, got, tt.want)
		}
	}
}
