package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/money"
)

// GoalFillRatio is the goal: the market fills at least this
// share of what the optimal central matcher fills.
const GoalFillRatio = 0.95

// Table is the figures of runs side by side, one column per run, as a
// Markdown table: figure, each run, the goal, and whether the last run
// meets it (pass/short, where there is a goal).
func Table(runs ...*Result) string {
	var b strings.Builder
	b.WriteString("| figure |")
	sizes := map[int]int{}
	for _, r := range runs {
		sizes[r.Nodes]++
	}
	for _, r := range runs {
		if sizes[r.Nodes] > 1 { // seeds of one size, side by side
			fmt.Fprintf(&b, " %d nodes, seed %d |", r.Nodes, r.Seed)
		} else {
			fmt.Fprintf(&b, " %d nodes |", r.Nodes)
		}
	}
	b.WriteString(" goal | pass/short |\n|---|")
	for range runs {
		b.WriteString("---|")
	}
	b.WriteString("---|---|\n")
	row := func(name, goal string, meets func(*Result) bool, cell func(*Result) string) {
		fmt.Fprintf(&b, "| %s |", name)
		for _, r := range runs {
			fmt.Fprintf(&b, " %s |", cell(r))
		}
		verdict := ""
		if meets != nil {
			verdict = "pass"
			for _, r := range runs {
				if !meets(r) {
					verdict = "short"
				}
			}
		}
		fmt.Fprintf(&b, " %s | %s |\n", goal, verdict)
	}
	row("requests (seed, slots × slot)", "", nil, func(r *Result) string {
		return fmt.Sprintf("%d (seed %d, %d × %s)", r.Requests, r.Seed, r.Slots, r.Slot)
	})
	row("filled by the market", "", nil, func(r *Result) string { return pct(r.Filled, r.Requests) })
	row("filled by the central matcher", "", nil, func(r *Result) string { return pct(r.Central, r.Requests) })
	row("fill ratio, market / central", fmt.Sprintf("≥ %.2f", GoalFillRatio), func(r *Result) bool { return r.FillRatio() >= GoalFillRatio },
		func(r *Result) string { return fmt.Sprintf("%.3f", r.FillRatio()) })
	row("leases already running at the first slot (warm start)", "", nil, func(r *Result) string {
		if r.WarmFailed > 0 {
			return fmt.Sprintf("%d (%d more drawn, not made in time: left out of both starts)", r.Warm, r.WarmFailed)
		}
		return fmt.Sprint(r.Warm)
	})
	row("utilisation of honest GPUs, market / central", "", nil, func(r *Result) string {
		return fmt.Sprintf("%.1f%% / %.1f%%", 100*r.Utilisation, 100*r.CentralUtilisation)
	})
	row("missed requests the central matcher filled: out of time / in all", "", nil, func(r *Result) string {
		return fmt.Sprintf("%d / %d", r.MissedInTime, len(r.Missed))
	})
	row("leases released before their job started (claim window passed in real time)", "", nil, func(r *Result) string { return fmt.Sprint(r.Released) })
	row("slots and leases off the slot grid (a slot's renting past its end, a lease not sized to end on its boundary)", "0", func(r *Result) bool { return r.OffGrid == 0 }, func(r *Result) string { return fmt.Sprint(r.OffGrid) })
	row("leases from impostors", "0", func(r *Result) bool { return r.ImpostorLeases == 0 }, func(r *Result) string { return fmt.Sprint(r.ImpostorLeases) })
	row("double-booked GPUs", "0", func(r *Result) bool { return r.DoubleBooked == 0 }, func(r *Result) string { return fmt.Sprint(r.DoubleBooked) })
	row("leases not countersigned or not kept", "0", func(r *Result) bool { return len(r.Faults) == 0 }, func(r *Result) string { return fmt.Sprint(len(r.Faults)) })
	row("gossip messages per node per simulated s", "", nil, func(r *Result) string { return fmt.Sprintf("%.2f", r.Messages) })
	row("gossip messages per node per real s", "", nil, func(r *Result) string { return fmt.Sprintf("%.1f", r.MessagesReal) })
	row("streams per node per simulated s", "", nil, func(r *Result) string { return fmt.Sprintf("%.3f", r.Streams) })
	row("gossip delivery p50 / p99", "", nil, func(r *Result) string { return fmt.Sprintf("%s / %s", r.GossipP50, r.GossipP99) })
	row("gossip reach (mean share of nodes)", "", nil, func(r *Result) string { return fmt.Sprintf("%.3f", r.Reach) })
	for i := range models {
		m := models[i].slug
		row("price "+m+": median first → last third (spread)", "", nil, func(r *Result) string {
			p := r.Prices[i]
			return fmt.Sprintf("%s → %s (%.2f → %.2f)", price(p.FirstMedian), price(p.LastMedian), p.FirstSpread, p.LastSpread)
		})
		row("price index "+m+": median (spread across nodes)", "", nil, func(r *Result) string {
			p := r.Prices[i]
			return fmt.Sprintf("%s (%.3f)", price(p.IndexMedian), p.IndexSpread)
		})
	}
	row("wall time", "", nil, func(r *Result) string { return r.Wall.Round(time.Second).String() })
	return b.String()
}

func pct(n, of int) string {
	if of == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%.1f%%)", n, 100*float64(n)/float64(of))
}

func price(micros int64) string {
	if micros == 0 {
		return "–"
	}
	return money.Micros(micros).String()
}
