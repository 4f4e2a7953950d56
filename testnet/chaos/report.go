package chaos

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/node/job"
)

// Report is what a chaos run did and found.
type Report struct {
	Nodes  int                   `json:"nodes"`
	Skew   map[int]time.Duration `json:"skew"`   // node index → clock offset
	Honest map[string]bool       `json:"honest"` // peer ID → clock not skewed
	UpTook time.Duration         `json:"up_took"`
	Took   time.Duration         `json:"took"`
	Phases []PhaseSpan           `json:"phases"`

	Rents            []RentSample `json:"rents"`
	Jobs             []JobSample  `json:"jobs"`
	SubmitsWhileDown int          `json:"submits_while_down"` // refused: the renter's own node was down
	SubmitErrors     []string     `json:"submit_errors"`
	Unplaced         []Unplaced   `json:"unplaced"` // jobs refused for want of a lease
	Kills            []Kill       `json:"kills"`

	// NodeCPU is the honest nodes' mean CPU, in percent of a core, over
	// the calm and the flood phases.
	NodeCPU map[string]float64 `json:"node_cpu"`

	Flooder   string `json:"flooder"`
	FloodSent int64  `json:"flood_sent"` // asks the flooder published
	FloodHeld int    `json:"flood_held"` // the most of them any node's book held at the end of the flood

	Orphans []string `json:"orphans"` // job processes alive after every node stopped

	Ledger LedgerAudit `json:"ledger"`

	// Failures are the checks that did not hold, each saying what and
	// where; none for a run where everything held.
	Failures []string `json:"failures"`

	jobPhases map[string]string // job ID → phase at submission
}

// Unplaced is a job the renter's node could find no lease for.
type Unplaced struct {
	Phase string `json:"phase"`
	Why   string `json:"why"`
}

// PhaseSpan is when a phase began.
type PhaseSpan struct {
	Name  string    `json:"name"`
	Start time.Time `json:"start"`
}

// RentSample is one cold light client's rent.
type RentSample struct {
	Phase    string        `json:"phase"`
	Model    string        `json:"model"`
	Took     time.Duration `json:"took"`
	Supplier string        `json:"supplier,omitempty"`
	Err      string        `json:"err,omitempty"`
}

// JobSample is one job as its renter's node last showed it.
type JobSample struct {
	Renter int      `json:"renter"`
	Phase  string   `json:"phase"` // when it was submitted; "" for a job whose submission's answer was lost
	View   job.View `json:"view"`
}

// Kill is one node killed and restarted.
type Kill struct {
	Node      int       `json:"node"`
	Peer      string    `json:"peer"`
	Killed    time.Time `json:"killed"`
	Restarted time.Time `json:"restarted"`
	Ready     time.Time `json:"ready"` // ready and found by search again (testnet.Restart returned)
	Err       string    `json:"err,omitempty"`
}

// LedgerAudit is what the stores held after the run.
type LedgerAudit struct {
	Leases         int      `json:"leases"`        // leases in any ledger
	Paired         int      `json:"paired"`        // leases both of whose sides' ledgers were read
	Receipts       int      `json:"receipts"`      // receipts renters kept (each acknowledged by a voucher)
	SupplierOnly   int      `json:"supplier_only"` // receipts suppliers signed that no voucher acknowledged
	Lost           []string `json:"lost"`          // acknowledged receipts or vouchers missing on one side
	Invalid        []string `json:"invalid"`       // ledgers that did not verify
	DoubleBooked   []string `json:"double_booked"` // one GPU metered for two leases at once
	MeteredGPUSecs float64  `json:"metered_gpu_secs"`
}

func (r *Report) jobPhase(id, phase string) {
	if r.jobPhases == nil {
		r.jobPhases = map[string]string{}
	}
	r.jobPhases[id] = phase
}

func (r *Report) setJobs(all []JobSample) {
	for i := range all {
		all[i].Phase = r.jobPhases[all[i].View.JobID]
	}
	// A job refused for want of a lease stays on its node as failed with
	// no attempt: it is counted as unplaced (from the refusal), not run.
	all = slices.DeleteFunc(all, func(j JobSample) bool {
		return j.Phase == "" && len(j.View.Attempts) == 0 && j.View.State == job.StateFailed
	})
	slices.SortFunc(all, func(a, b JobSample) int { return a.View.Created.Compare(b.View.Created) })
	r.Jobs = all
}

// judge fills Failures from what was recorded.
func (r *Report) judge() {
	fail := func(format string, a ...any) { r.Failures = append(r.Failures, fmt.Sprintf(format, a...)) }
	for _, j := range r.Jobs {
		if j.View.State != job.StateSucceeded {
			fail("job %s (renter node %d, submitted in %s) ended %s after %d attempt(s): %s", j.View.JobID, j.Renter, cmpOr(j.Phase, "?"), j.View.State, len(j.View.Attempts), j.View.Message)
		}
	}
	if len(r.Jobs) == 0 {
		fail("no job ran")
	}
	for _, e := range r.SubmitErrors {
		fail("a job was refused while its renter's node was up: %s", e)
	}
	for _, k := range r.Kills {
		if k.Err != "" {
			fail("node %d did not come back after its kill: %s", k.Node, k.Err)
		}
	}
	for _, rs := range r.Rents {
		if rs.Supplier != "" && rs.Supplier == r.Flooder {
			fail("a rent leased from the flooder, which serves nothing")
		}
	}
	if r.FloodHeld > maxAsksPerSupplier {
		fail("a node's book held %d of the flooder's asks, over the %d a supplier may have", r.FloodHeld, maxAsksPerSupplier)
	}
	for _, o := range r.Orphans {
		fail("job process alive after every node stopped: %s", o)
	}
	for _, l := range r.Ledger.Lost {
		fail("lost: %s", l)
	}
	for _, l := range r.Ledger.Invalid {
		fail("ledger: %s", l)
	}
	for _, l := range r.Ledger.DoubleBooked {
		fail("double-booked: %s", l)
	}
}

func cmpOr(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// PhaseStats are the rents and jobs of one phase.
type PhaseStats struct {
	Phase          string
	Rents, RentsOK int
	RentP50        time.Duration
	RentP99        time.Duration
	Jobs, JobsOK   int
	Unplaced       int // jobs refused for want of a lease
	Failovers      int // jobs that ran on more than one supplier
	JobP50         time.Duration
}

// Stats groups the rents and jobs by the phase they began in.
func (r *Report) Stats() []PhaseStats {
	var out []PhaseStats
	for _, p := range []string{PhaseCalm, PhaseFlood, PhaseKills} {
		s := PhaseStats{Phase: p}
		var took, jobs []time.Duration
		for _, rs := range r.Rents {
			if rs.Phase != p {
				continue
			}
			s.Rents++
			if rs.Err == "" {
				s.RentsOK++
				took = append(took, rs.Took)
			}
		}
		for _, u := range r.Unplaced {
			if u.Phase == p {
				s.Unplaced++
			}
		}
		for _, j := range r.Jobs {
			if j.Phase != p {
				continue
			}
			s.Jobs++
			if j.View.State == job.StateSucceeded {
				s.JobsOK++
				jobs = append(jobs, j.View.Updated.Sub(j.View.Created))
			}
			if len(j.View.Attempts) > 1 {
				s.Failovers++
			}
		}
		s.RentP50, s.RentP99, s.JobP50 = pct(took, 0.5), pct(took, 0.99), pct(jobs, 0.5)
		out = append(out, s)
	}
	return out
}

// Recovery is how long things took to come back after kills.
type Recovery struct {
	Restarts     []time.Duration // restart → ready and found by search
	JobFailovers []time.Duration // supplier killed → the job running on another
}

// Recovery measures the restarts and the failovers of jobs whose supplier
// was killed.
func (r *Report) Recovery() Recovery {
	var rec Recovery
	for _, k := range r.Kills {
		if k.Err == "" {
			rec.Restarts = append(rec.Restarts, k.Ready.Sub(k.Restarted))
		}
	}
	for _, j := range r.Jobs {
		for i, a := range j.View.Attempts[:max(0, len(j.View.Attempts)-1)] {
			next := j.View.Attempts[i+1]
			started, err := time.Parse(time.RFC3339Nano, next.StartedAtUTC)
			if err != nil || a.Supplier == next.Supplier {
				continue
			}
			// The kill of a's supplier just before the next attempt began.
			var killed time.Time
			for _, k := range r.Kills {
				if k.Peer == a.Supplier && k.Killed.Before(started) && k.Killed.After(killed) {
					killed = k.Killed
				}
			}
			if !killed.IsZero() {
				rec.JobFailovers = append(rec.JobFailovers, started.Sub(killed))
			}
		}
	}
	return rec
}

// AllHeld is the line of the Markdown report of a run whose every check
// held (make bench carries the verdict into bench/RESULTS.md by it).
const AllHeld = "**Every check held.**"

// Markdown renders the report as bench/CHAOS.md shows it.
func (r *Report) Markdown(machine string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Chaos run\n\n%s\n\n", machine)
	var skew []string
	for i, d := range r.Skew {
		skew = append(skew, fmt.Sprintf("node %d %+v", i, d))
	}
	slices.Sort(skew)
	fmt.Fprintf(&b, "%d node processes on 127.0.0.1 (up in %s); clocks skewed: %s. Whole run: %s.\n\n", r.Nodes, r.UpTook.Round(time.Second), strings.Join(skew, ", "), r.Took.Round(time.Second))
	if len(r.Failures) == 0 {
		b.WriteString(AllHeld + "\n\n")
	} else {
		fmt.Fprintf(&b, "**%d check(s) failed:**\n\n", len(r.Failures))
		for _, f := range r.Failures {
			fmt.Fprintf(&b, "- %s\n", f)
		}
		b.WriteString("\n")
	}
	b.WriteString("## Per phase\n\n| phase | rents ok | rent p50 | rent p99 | jobs ok | jobs failed over | job p50 (submit → end) | jobs not placed (no lease) |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, s := range r.Stats() {
		fmt.Fprintf(&b, "| %s | %d / %d | %s | %s | %d / %d | %d | %s | %d |\n", s.Phase, s.RentsOK, s.Rents, ms(s.RentP50), ms(s.RentP99), s.JobsOK, s.Jobs, s.Failovers, s.JobP50.Round(100*time.Millisecond), s.Unplaced)
	}
	errs := map[string]int{}
	for _, rs := range r.Rents {
		if rs.Err != "" {
			errs[rs.Phase+": "+trim(rs.Err)]++
		}
	}
	if len(errs) > 0 {
		b.WriteString("\nRents that failed:\n\n")
		keys := slices.Sorted(maps.Keys(errs))
		for _, k := range keys {
			fmt.Fprintf(&b, "- %d× %s\n", errs[k], k)
		}
	}
	if len(r.Unplaced) > 0 {
		why := map[string]int{}
		for _, u := range r.Unplaced {
			why[u.Phase+": "+trim(u.Why)]++
		}
		b.WriteString("\nJobs not placed (the renter's node found no lease):\n\n")
		for _, k := range slices.Sorted(maps.Keys(why)) {
			fmt.Fprintf(&b, "- %d× %s\n", why[k], k)
		}
	}
	unsubmitted := 0
	for _, j := range r.Jobs {
		if j.Phase == "" {
			unsubmitted++
		}
	}
	fmt.Fprintf(&b, "\nJobs whose submission's answer was lost to a kill of their renter's node, then found on it: %d. Submissions refused while the renter's node was down: %d.\n", unsubmitted, r.SubmitsWhileDown)
	rec := r.Recovery()
	fmt.Fprintf(&b, "\n## Recovery\n\n| what | n | p50 | max |\n| --- | --- | --- | --- |\n")
	fmt.Fprintf(&b, "| node restart → ready and found by search | %d | %s | %s |\n", len(rec.Restarts), ms(pct(rec.Restarts, 0.5)), ms(pct(rec.Restarts, 1)))
	fmt.Fprintf(&b, "| supplier killed → job running on another supplier | %d | %s | %s |\n", len(rec.JobFailovers), ms(pct(rec.JobFailovers, 0.5)), ms(pct(rec.JobFailovers, 1)))
	fmt.Fprintf(&b, "\nKills: %d (nodes %s).\n", len(r.Kills), killed(r.Kills))
	fmt.Fprintf(&b, "\n## Flood\n\nThe flooder published %d valid-signed asks (%s of them of %s at 0.10 under a profile claiming 8 GPUs it does not serve; the rest of made-up models); the most any node's book held at the end: %d (cap %d per supplier). An honest node's mean CPU: %.2f%% of a core in the calm phase, %.2f%% in the flood.\n",
		r.FloodSent, "half", floodModel, r.FloodHeld, maxAsksPerSupplier, r.NodeCPU[PhaseCalm], r.NodeCPU[PhaseFlood])
	l := r.Ledger
	fmt.Fprintf(&b, "\n## Ledgers (read from every node's store after the run)\n\n")
	fmt.Fprintf(&b, "- leases: %d, %d with both sides read;\n- receipts acknowledged (kept by renters): %d, all kept by their suppliers: %v;\n", l.Leases, l.Paired, l.Receipts, len(l.Lost) == 0)
	fmt.Fprintf(&b, "- receipts signed but never acknowledged (the attempt was lost first): %d;\n- GPU-seconds metered: %.0f;\n", l.SupplierOnly, l.MeteredGPUSecs)
	fmt.Fprintf(&b, "- ledgers that did not verify: %d; GPUs metered for two leases at once: %d; job processes left running: %d.\n", len(l.Invalid), len(l.DoubleBooked), len(r.Orphans))
	bySkew := map[string][2]int{}
	for _, j := range r.Jobs {
		for _, a := range j.View.Attempts {
			k := "honest clock"
			if !r.Honest[a.Supplier] {
				k = "skewed clock"
			}
			c := bySkew[k]
			c[0]++
			if a.Outcome == job.StateSucceeded {
				c[1]++
			}
			bySkew[k] = c
		}
	}
	fmt.Fprintf(&b, "\n## Skew\n\nJob attempts on suppliers with an honest clock: %d (%d succeeded); with a skewed one: %d (%d succeeded).\n",
		bySkew["honest clock"][0], bySkew["honest clock"][1], bySkew["skewed clock"][0], bySkew["skewed clock"][1])
	return b.String()
}

// trim shortens an error for a list of them.
func trim(e string) string {
	if len(e) > 240 {
		return e[:240] + "…"
	}
	return e
}

func killed(ks []Kill) string {
	var s []string
	for _, k := range ks {
		s = append(s, fmt.Sprint(k.Node))
	}
	return strings.Join(s, ", ")
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func ms(d time.Duration) string {
	if d == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000)
}
