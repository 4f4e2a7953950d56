package sim

import (
	"math/rand/v2"
	"testing"
)

// bipartite builds a flow network for a b-matching: left vertices of
// demand 1, right vertices of capacity caps[j], edges[i] the right
// vertices left i may use with costs[i] (nil: cost 0).
func bipartite(left int, caps []int64, edges [][]int, costs [][]int64) (*flowNet, int, int) {
	s, t := left+len(caps), left+len(caps)+1
	f := newFlowNet(t + 1)
	for i := range left {
		f.addEdge(s, i, 1, 0)
		for k, j := range edges[i] {
			var w int64
			if costs != nil {
				w = costs[i][k]
			}
			f.addEdge(i, left+j, 1, w)
		}
	}
	for j, c := range caps {
		f.addEdge(left+j, t, c, 0)
	}
	return f, s, t
}

func TestMaxFlowKnownCases(t *testing.T) {
	for _, c := range []struct {
		name       string
		left       int
		caps       []int64
		edges      [][]int
		costs      [][]int64
		flow, cost int64
	}{
		{"empty", 0, nil, nil, nil, 0, 0},
		{"no edges", 2, []int64{1}, [][]int{nil, nil}, nil, 0, 0},
		// Greedy 0→0 would block 1; the maximum reroutes 0 to 1.
		{"augmenting path", 2, []int64{1, 1}, [][]int{{0, 1}, {0}}, nil, 2, 0},
		{"capacity two", 3, []int64{2, 1}, [][]int{{0}, {0}, {0}}, nil, 2, 0},
		{"perfect 3x3", 3, []int64{1, 1, 1}, [][]int{{0, 1}, {1, 2}, {0}}, nil, 3, 0},
		// Both left vertices can take the cheap right one; the least
		// cost of a maximum flow is 1+5, not 1 alone.
		{"least cost", 2, []int64{1, 1}, [][]int{{0, 1}, {0}}, [][]int64{{1, 5}, {2}}, 2, 7},
		{"cheaper of two", 1, []int64{1, 1}, [][]int{{0, 1}}, [][]int64{{9, 4}}, 1, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, s, tt := bipartite(c.left, c.caps, c.edges, c.costs)
			flow, cost := f.maxFlow(s, tt)
			if flow != c.flow || cost != c.cost {
				t.Errorf("flow %d cost %d, want %d and %d", flow, cost, c.flow, c.cost)
			}
		})
	}
}

// TestMaxFlowNonBipartite is a classic network with a known maximum of
// 23 (CLRS figure 26.6).
func TestMaxFlowNonBipartite(t *testing.T) {
	f := newFlowNet(6)
	for _, e := range [][3]int64{{0, 1, 16}, {0, 2, 13}, {1, 3, 12}, {2, 1, 4}, {2, 4, 14}, {3, 2, 9}, {3, 5, 20}, {4, 3, 7}, {4, 5, 4}} {
		f.addEdge(int(e[0]), int(e[1]), e[2], 0)
	}
	if flow, _ := f.maxFlow(0, 5); flow != 23 {
		t.Errorf("flow %d, want 23", flow)
	}
}

// TestMaxFlowMatchesBruteForce compares the flow with an exhaustive
// search over every assignment on small random b-matchings: the same
// maximum size and, among maximum ones, the same least cost.
func TestMaxFlowMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		left, right := 1+rng.IntN(5), 1+rng.IntN(3)
		caps := make([]int64, right)
		for j := range caps {
			caps[j] = int64(rng.IntN(3))
		}
		edges := make([][]int, left)
		costs := make([][]int64, left)
		for i := range left {
			for j := range right {
				if rng.IntN(2) == 0 {
					edges[i] = append(edges[i], j)
					costs[i] = append(costs[i], int64(rng.IntN(10)))
				}
			}
		}
		f, s, tt := bipartite(left, caps, edges, costs)
		flow, cost := f.maxFlow(s, tt)
		bestN, bestCost := bruteForce(0, edges, costs, append([]int64(nil), caps...))
		if flow != int64(bestN) || cost != bestCost {
			t.Fatalf("trial %d: flow %d cost %d, brute force %d cost %d (caps %v edges %v costs %v)", trial, flow, cost, bestN, bestCost, caps, edges, costs)
		}
	}
}

// bruteForce is the largest number of left vertices from i on that can
// be assigned within caps, and the least cost of doing so.
func bruteForce(i int, edges [][]int, costs [][]int64, caps []int64) (int, int64) {
	if i == len(edges) {
		return 0, 0
	}
	bestN, bestCost := bruteForce(i+1, edges, costs, caps) // i unassigned
	for k, j := range edges[i] {
		if caps[j] == 0 {
			continue
		}
		caps[j]--
		n, c := bruteForce(i+1, edges, costs, caps)
		caps[j]++
		n, c = n+1, c+costs[i][k]
		if n > bestN || n == bestN && c < bestCost {
			bestN, bestCost = n, c
		}
	}
	return bestN, bestCost
}

func TestFlowOn(t *testing.T) {
	f, s, tt := bipartite(2, []int64{1, 1}, [][]int{{0, 1}, {0}}, nil)
	f.maxFlow(s, tt)
	// Edges are added in order: s→0, 0→r0, 0→r1, s→1, 1→r0, ...
	if got := f.flowOn(4); got != 1 { // 0→r1
		t.Errorf("flow on 0→r1 = %d, want 1", got)
	}
	if got := f.flowOn(2); got != 0 { // 0→r0
		t.Errorf("flow on 0→r0 = %d, want 0", got)
	}
}
