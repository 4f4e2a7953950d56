package sim

// flowNet is a flow network for an exact min-cost maximum flow
// (successive shortest paths, Bellman–Ford on the residual graph, so
// residual edges of negative cost are fine). The central matcher's
// graphs are small (one slot's requests and suppliers), so its
// O(F·V·E) bound is ample.
type flowNet struct {
	head []int   // first edge out of each vertex, -1: none
	next []int   // next edge out of the same vertex
	to   []int   // edge head
	cap  []int64 // residual capacity
	cost []int64
}

// newFlowNet is an empty network of n vertices, 0..n-1.
func newFlowNet(n int) *flowNet {
	f := &flowNet{head: make([]int, n)}
	for i := range f.head {
		f.head[i] = -1
	}
	return f
}

// addEdge adds an edge u→v of capacity c and cost per unit w (and its
// residual twin) and returns its index, for flowOn.
func (f *flowNet) addEdge(u, v int, c, w int64) int {
	e := len(f.to)
	for _, x := range [][2]int{{u, v}, {v, u}} {
		f.to = append(f.to, x[1])
		f.next = append(f.next, f.head[x[0]])
		f.head[x[0]] = len(f.to) - 1
	}
	f.cap = append(f.cap, c, 0)
	f.cost = append(f.cost, w, -w)
	return e
}

// flowOn is the flow on edge e after maxFlow.
func (f *flowNet) flowOn(e int) int64 { return f.cap[e^1] }

// maxFlow pushes a maximum flow from s to t of least total cost and
// returns its value and cost.
func (f *flowNet) maxFlow(s, t int) (flow, cost int64) {
	n := len(f.head)
	const inf = int64(1) << 62
	dist := make([]int64, n)
	via := make([]int, n) // edge into each vertex on the shortest path
	inQueue := make([]bool, n)
	for {
		for i := range dist {
			dist[i], via[i] = inf, -1
		}
		dist[s] = 0
		queue := []int{s}
		inQueue[s] = true
		for len(queue) > 0 {
			u := queue[0]
			queue = queue[1:]
			inQueue[u] = false
			for e := f.head[u]; e >= 0; e = f.next[e] {
				if v := f.to[e]; f.cap[e] > 0 && dist[u]+f.cost[e] < dist[v] {
					dist[v], via[v] = dist[u]+f.cost[e], e
					if !inQueue[v] {
						inQueue[v] = true
						queue = append(queue, v)
					}
				}
			}
		}
		if dist[t] == inf {
			return flow, cost
		}
		push := inf
		for v := t; v != s; v = f.to[via[v]^1] {
			push = min(push, f.cap[via[v]])
		}
		for v := t; v != s; v = f.to[via[v]^1] {
			f.cap[via[v]] -= push
			f.cap[via[v]^1] += push
		}
		flow += push
		cost += push * dist[t]
	}
}
