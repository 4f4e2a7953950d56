package challenge

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/catalog"
)

// Assumptions of the margin table about impostors, each generous to
// them.
const (
	// regenRate is how fast an impostor generates one ChaCha8 stream:
	// 4 GB/s, 2.5 times the 1.56 GB/s one core of the development machine
	// measures (BenchmarkChaCha8), for an impostor that kept nothing of
	// a dropped buffer: generating a stream from its start is sequential,
	// so more cores or a GPU do not do it faster. (One that kept the
	// state at each 992-byte re-key is not caught: PROTOCOL §20.)
	regenRate = 4e9
	// rttCap is the most a challenger adds to the deadline for the round
	// trip (audit's maxRTTAllowance): an impostor that slows its pings
	// gains that much.
	rttCap = 250 * time.Millisecond
)

// memMargin is one catalog model's row of the margin table.
type memMargin struct {
	prof       catalog.Profile
	p          MemParams
	datasheet  time.Duration // all rounds at the datasheet bandwidth
	deadline   time.Duration
	halfBW     time.Duration // a card of half the bandwidth, at its own full bandwidth
	regenRound time.Duration // one dropped window regenerated, per round
}

func memMargins() []memMargin {
	var out []memMargin
	for _, prof := range catalog.Profiles() {
		p := RealMemParams(prof)
		ds := MemDatasheetTime(prof, p)
		// The mean depth of a window's end in its buffer: the stream an
		// impostor that dropped the buffer generates to fold it.
		depth := float64(p.BufferBytes-p.WindowBytes)/2 + float64(p.WindowBytes)
		out = append(out, memMargin{
			prof: prof, p: p, datasheet: ds, deadline: MemRealDeadline(prof, p), halfBW: 2 * ds,
			regenRound: time.Duration(depth / regenRate * float64(time.Second)),
		})
	}
	return out
}

// TestMemMargins checks, for every catalog model, that the real memory
// proof separates a genuine card from an impostor: a genuine card that
// reads at MemEfficiency of its datasheet bandwidth meets the deadline
// with the per-round overheads allowed; a card of half the claimed
// bandwidth misses it even at its own full bandwidth with no overhead
// and the largest round-trip allowance; a card with less memory, which
// must regenerate a dropped window from its ChaCha8 stream every round,
// misses a round's share of the deadline many times over.
// GPUMESH_MEM_TABLE=path writes the table of docs/PROTOCOL.md §20.
func TestMemMargins(t *testing.T) {
	rows := memMargins()
	for _, m := range rows {
		slug := m.prof.Slug
		if err := m.p.Validate(); err != nil {
			t.Errorf("%s: %+v: %v", slug, m.p, err)
		}
		genuine := time.Duration(float64(m.datasheet)/MemEfficiency) +
			time.Duration(m.p.Rounds)*(MemRoundOverhead+time.Duration(m.p.Buffers)*MemBufferOverhead)
		if genuine > m.deadline {
			t.Errorf("%s: a genuine card at %.0f%% of its bandwidth takes %v, deadline %v", slug, 100*MemEfficiency, genuine, m.deadline)
		}
		if r := float64(m.deadline) / float64(m.datasheet); r < 1/MemEfficiency {
			t.Errorf("%s: deadline %v is %.2f× the datasheet time %v, want at least %.2f×", slug, m.deadline, r, m.datasheet, 1/MemEfficiency)
		}
		if m.datasheet < time.Duration(MemTargetSeconds*float64(time.Second)) {
			t.Errorf("%s: rounds take %v at the datasheet bandwidth, want at least %v s (the round trip allowed must stay small beside it)", slug, m.datasheet, MemTargetSeconds)
		}
		if m.halfBW <= m.deadline+rttCap {
			t.Errorf("%s: half the bandwidth takes %v, within the deadline %v + %v", slug, m.halfBW, m.deadline, rttCap)
		}
		perRound := m.deadline / time.Duration(m.p.Rounds)
		if m.regenRound < 3*perRound {
			t.Errorf("%s: regenerating a dropped window takes %v a round, less than 3× the deadline's %v a round", slug, m.regenRound, perRound)
		}
	}
	table := memMarginTable(rows)
	if path := os.Getenv("GPUMESH_MEM_TABLE"); path != "" {
		if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Log("\n" + table)
}

// memMarginTable is the table of docs/PROTOCOL.md §20.
func memMarginTable(rows []memMargin) string {
	var b strings.Builder
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond)) }
	fmt.Fprintf(&b, "| Model | GiB | GB/s | buffers × 256 MiB | read per round | rounds | at datasheet (ms) | deadline (ms) | margin | half bandwidth (ms) | vs deadline + 250 ms | regenerate a window (ms per round) | vs deadline per round |\n")
	fmt.Fprintf(&b, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, m := range rows {
		perRound := m.deadline / time.Duration(m.p.Rounds)
		fmt.Fprintf(&b, "| `%s` | %d | %d | %d | %.2f GB | %d | %s | %s | %.2f× | %s | %.2f× | %s | %.1f× |\n",
			m.prof.Slug, m.prof.MemoryGiB, m.prof.MemoryBandwidthGBps, m.p.Buffers, float64(m.p.RoundBytes())/1e9, m.p.Rounds,
			ms(m.datasheet), ms(m.deadline), float64(m.deadline)/float64(m.datasheet),
			ms(m.halfBW), float64(m.halfBW)/float64(m.deadline+rttCap),
			ms(m.regenRound), float64(m.regenRound)/float64(perRound))
	}
	return b.String()
}
