package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/settle"
	"github.com/gpumesh/gpumesh/node"
)

const maxAsksPerSupplier = market.MaxAsksPerSupplier

// side is what one node's ledger keeps of one lease.
type side struct {
	node     int
	report   settle.Report
	receipts []*settle.Receipt
	nonce    uint64 // the best voucher's
	gpus     []string
}

// audit reads every node's store (every node has stopped) and fills
// r.rec.Ledger. Ledgers are verified as of a minute after now, so that a
// receipt of a supplier whose clock runs 30 s ahead is not "in the
// future" merely because the audit came quickly.
func (r *run) audit(now time.Time) error {
	asOf := now.Add(time.Minute)
	leases := map[market.ID]map[market.Role]*side{}
	for i, nd := range r.st.Nodes {
		if err := readLedger(i, nd.DataDir, asOf, leases); err != nil {
			return fmt.Errorf("chaos: node %d: %w", i, err)
		}
	}
	a := &r.rec.Ledger
	a.Leases = len(leases)
	ids := make([]market.ID, 0, len(leases))
	for id := range leases {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(x, y market.ID) int { return strings.Compare(x.String(), y.String()) })
	bySupplier := map[int][]*side{}
	for _, id := range ids {
		sides := leases[id]
		for role, s := range sides {
			if !s.report.Valid {
				a.Invalid = append(a.Invalid, fmt.Sprintf("lease %s at node %d (%s): %s", id.Short(), s.node, role, strings.Join(s.report.Problems, "; ")))
			}
		}
		sup, ren := sides[market.RoleSupplier], sides[market.RoleRenter]
		if sup != nil {
			bySupplier[sup.node] = append(bySupplier[sup.node], sup)
			if n := len(sup.receipts); n > 0 {
				a.MeteredGPUSecs += float64(sup.receipts[n-1].CumGpuMs) / 1000
			}
		}
		if ren == nil {
			continue // a light client's lease: its renter kept no ledger
		}
		a.Receipts += len(ren.receipts)
		if sup == nil {
			if len(ren.receipts) > 0 {
				a.Lost = append(a.Lost, fmt.Sprintf("lease %s: renter node %d keeps %d receipts; its supplier's ledger has no such lease", id.Short(), ren.node, len(ren.receipts)))
			}
			continue
		}
		a.Paired++
		a.Lost = append(a.Lost, compare(id, ren, sup)...)
		a.SupplierOnly += max(0, len(sup.receipts)-len(ren.receipts))
	}
	for n, sides := range bySupplier {
		a.DoubleBooked = append(a.DoubleBooked, overlaps(n, sides)...)
	}
	return nil
}

// readLedger adds what the ledger in dataDir keeps to leases.
func readLedger(i int, dataDir string, now time.Time, leases map[market.ID]map[market.Role]*side) error {
	st, err := node.OpenStore(dataDir)
	if err != nil {
		return err
	}
	defer st.Close()
	led, err := settle.OpenLedger(st)
	if err != nil {
		return err
	}
	ids, err := led.Leases()
	if err != nil {
		return err
	}
	for _, id := range ids {
		rep, err := led.Verify(id, now)
		if err != nil {
			return fmt.Errorf("verify lease %s: %w", id.Short(), err)
		}
		rs, err := led.Receipts(id)
		if err != nil {
			return fmt.Errorf("receipts of lease %s: %w", id.Short(), err)
		}
		nonce, _, err := led.Paid(id)
		if err != nil {
			return fmt.Errorf("vouchers of lease %s: %w", id.Short(), err)
		}
		s := &side{node: i, report: rep, receipts: rs, nonce: nonce}
		if l, err := market.GetLease(st, id, now); err == nil {
			s.gpus = l.GpuUuids
		}
		if leases[id] == nil {
			leases[id] = map[market.Role]*side{}
		}
		if prev := leases[id][rep.Role]; prev != nil {
			return fmt.Errorf("lease %s kept as %s by nodes %d and %d", id.Short(), rep.Role, prev.node, i)
		}
		leases[id][rep.Role] = s
	}
	return nil
}

// compare lists what one side acknowledged and the other lacks: a receipt
// the renter paid for (it keeps only those) that the supplier does not
// keep byte for byte, or a voucher the supplier keeps beyond the renter's
// best.
func compare(id market.ID, ren, sup *side) []string {
	var lost []string
	bySeq := make(map[uint64]*settle.Receipt, len(sup.receipts))
	for _, rc := range sup.receipts {
		bySeq[rc.Seq] = rc
	}
	for _, rc := range ren.receipts {
		got, ok := bySeq[rc.Seq]
		switch {
		case !ok:
			lost = append(lost, fmt.Sprintf("lease %s: receipt %d, acknowledged by renter node %d, is not kept by supplier node %d", id.Short(), rc.Seq, ren.node, sup.node))
		case got.Hash != rc.Hash:
			lost = append(lost, fmt.Sprintf("lease %s: receipt %d differs between renter node %d and supplier node %d", id.Short(), rc.Seq, ren.node, sup.node))
		}
	}
	if sup.nonce > ren.nonce {
		lost = append(lost, fmt.Sprintf("lease %s: supplier node %d keeps voucher %d, renter node %d only up to %d", id.Short(), sup.node, sup.nonce, ren.node, ren.nonce))
	}
	return lost
}

// overlaps lists the GPUs of supplier node n that receipts of two leases
// meter over intervals that overlap by more than settle.MaxOverlap.
func overlaps(n int, sides []*side) []string {
	type span struct {
		start, end int64
		lease      market.ID
		seq        uint64
	}
	perGPU := map[string][]span{}
	for _, s := range sides {
		for _, rc := range s.receipts {
			if rc.GpuMs == 0 {
				continue // paused: nothing ran
			}
			for _, g := range s.gpus {
				perGPU[g] = append(perGPU[g], span{rc.StartMs, rc.EndMs, rc.LeaseID, rc.Seq})
			}
		}
	}
	var out []string
	slack := settle.MaxOverlap.Milliseconds()
	for g, spans := range perGPU {
		slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.start, b.start) })
		for i := 1; i < len(spans); i++ {
			for j := range i {
				a, b := spans[j], spans[i]
				if a.lease != b.lease && a.end-b.start > slack {
					out = append(out, fmt.Sprintf("supplier node %d, %s: lease %s receipt %d and lease %s receipt %d overlap by %d ms", n, g, a.lease.Short(), a.seq, b.lease.Short(), b.seq, a.end-b.start))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}
