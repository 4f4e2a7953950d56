package settle

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/store"
)

const killDirEnv = "GPUMESH_SETTLE_KILL_DIR"

// killTerms are the terms of the lease the killed child meters and pays:
// the same in every child, from fixed keys and IDs. Intervals are 1 s of
// the lease's clock, which the loop advances itself.
func killTerms(t testing.TB) (Terms, node, node) {
	sup, ren := nodeFrom(t, seededReader(1)), nodeFrom(t, seededReader(2))
	terms := testTerms(sup, ren)
	terms.LeaseID = market.ID(sha256.Sum256([]byte("kill lease")))
	h := sha256.Sum256([]byte("kill job"))
	terms.JobID = h[:JobIDBytes]
	terms.Interval = time.Second
	return terms, sup, ren
}

// TestHelperProcessMeterPayer is the child of TestKillDurability. It opens
// a Meter and a Payer on two Badger stores under one directory, sends the
// receipts the meter holds unpaid again (as after a reattach; printing
// "SIGNED <seq> <hash>" for each, since a kill may have come between Issue
// and its line), then loops:
// Issue, printing "SIGNED <seq> <hash>" once it returned; Payer.Accept,
// printing "ACK <seq>" once it returned (the renter's durable point);
// Meter.Accept, printing "PAID <seq>". It runs until it is killed.
func TestHelperProcessMeterPayer(t *testing.T) {
	dir := os.Getenv(killDirEnv)
	if dir == "" {
		t.Skip("helper process for TestKillDurability")
	}
	fail := func(format string, args ...any) {
		fmt.Printf("ERROR "+format+"\n", args...)
		os.Exit(2)
	}
	terms, sup, ren := killTerms(t)
	ss, err := store.OpenBadger(filepath.Join(dir, "supplier"), store.WithLogger(quietLog(t)))
	if err != nil {
		fail("open: %v", err)
	}
	rs, err := store.OpenBadger(filepath.Join(dir, "renter"), store.WithLogger(quietLog(t)))
	if err != nil {
		fail("open: %v", err)
	}
	sled, _ := OpenLedger(ss)
	rled, _ := OpenLedger(rs)
	m, err := NewMeter(sled, sup.key, terms)
	if err != nil {
		fail("meter: %v", err)
	}
	p, err := NewPayer(rled, ren.key, terms)
	if err != nil {
		fail("payer: %v", err)
	}
	fmt.Println("READY")
	pay := func(r *Receipt) {
		v, err := p.Accept(r.Raw, 1, r.End())
		if err != nil {
			fail("payer accept seq %d: %v", r.Seq, err)
		}
		fmt.Printf("ACK %d\n", r.Seq)
		if _, err := m.Accept(v, r.End()); err != nil {
			fail("meter accept seq %d: %v", r.Seq, err)
		}
		fmt.Printf("PAID %d\n", r.Seq)
	}
	for _, r := range m.Unacked() {
		fmt.Printf("SIGNED %d %x\n", r.Seq, r.Hash)
		pay(r)
	}
	deadline := time.Now().Add(20 * time.Second) // never outlive a lost parent
	for time.Now().Before(deadline) {
		start := terms.Start
		if last := m.Last(); last != nil {
			start = last.End()
		}
		end := start.Add(time.Second)
		r, err := m.Issue(1, start, end, 1000*int64(terms.GPUs), Usage{Measured: true, UtilPermille: 500}, nil, false, StateRunning)
		if err != nil {
			fail("issue: %v", err)
		}
		fmt.Printf("SIGNED %d %x\n", r.Seq, r.Hash)
		pay(r)
	}
	os.Exit(3)
}

// TestKillDurability kills the child with SIGKILL at a random moment, 50
// times (8 with -short) on one directory. After each kill it reopens both
// ledgers and checks that every receipt the child printed as signed is
// kept with that hash (no seq was ever signed twice), every acknowledged
// seq has its receipt and voucher at the renter, every paid seq is
// covered by the supplier's best voucher, and Verify finds both ledgers
// valid.
func TestKillDurability(t *testing.T) {
	rounds := 50
	if testing.Short() {
		rounds = 8 // each round starts a child: ~0.4 s
	}
	dir := t.TempDir()
	terms, _, _ := killTerms(t)
	rng := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 1))
	signed := map[uint64]string{}
	var acked, paid uint64
	var midSign, midPay int // kills between Issue and Payer.Accept, between the two Accepts
	for round := range rounds {
		out := runKilledChild(t, dir, time.Duration(rng.IntN(100))*time.Millisecond)
		var top uint64
		for seq := range out.signed {
			top = max(top, seq)
		}
		if top > out.acked {
			midSign++
		}
		if out.acked > out.paid {
			midPay++
		}
		for seq, h := range out.signed {
			if old, ok := signed[seq]; ok && old != h {
				t.Fatalf("round %d: seq %d signed as %s and as %s", round, seq, old[:12], h[:12])
			}
			signed[seq] = h
		}
		acked, paid = max(acked, out.acked), max(paid, out.paid)

		ss, rs := openBadger(t, filepath.Join(dir, "supplier")), openBadger(t, filepath.Join(dir, "renter"))
		sled, rled := openLedger(t, ss), openLedger(t, rs)
		for seq, h := range signed {
			raw, err := ss.Get(ksReceipts, seqKey(terms.LeaseID, seq))
			if err != nil {
				t.Fatalf("round %d: signed seq %d not kept by the supplier: %v", round, seq, err)
			}
			if got := sha256.Sum256(raw); hex.EncodeToString(got[:]) != h {
				t.Fatalf("round %d: seq %d kept as %x, signed as %s", round, seq, got[:6], h[:12])
			}
		}
		for seq := uint64(1); seq <= acked; seq++ {
			raw, err := rs.Get(ksReceipts, seqKey(terms.LeaseID, seq))
			if err != nil {
				t.Fatalf("round %d: acknowledged seq %d not kept by the renter: %v", round, seq, err)
			}
			if h := sha256.Sum256(raw); hex.EncodeToString(h[:]) != signed[seq] {
				t.Fatalf("round %d: renter keeps seq %d as %x", round, seq, h[:6])
			}
			if _, err := rs.Get(ksAcks, seqKey(terms.LeaseID, seq)); err != nil {
				t.Fatalf("round %d: voucher of acknowledged seq %d: %v", round, seq, err)
			}
		}
		for _, c := range []struct {
			led  *Ledger
			upto uint64
		}{{rled, acked}, {sled, paid}} {
			rep, err := c.led.Verify(terms.LeaseID, terms.End)
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Valid {
				t.Fatalf("round %d: %s ledger not valid: %q", round, rep.Role, rep.Problems)
			}
			want := market.AmountMicros(terms.PriceMicros, int64(c.upto)*1000*int64(terms.GPUs))
			if rep.PaidMicros < want {
				t.Fatalf("round %d: %s ledger's best voucher pays %d, seq %d needs %d", round, rep.Role, rep.PaidMicros, c.upto, want)
			}
		}
		if err := ss.Close(); err != nil {
			t.Fatal(err)
		}
		if err := rs.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d kills (%d after Issue before Payer.Accept returned, %d between Payer.Accept and Meter.Accept): %d receipts signed, %d acknowledged, %d paid",
		rounds, midSign, midPay, len(signed), acked, paid)
	if acked == 0 {
		t.Fatalf("no receipt acknowledged in %d rounds", rounds)
	}
}

// childOutput is what one child printed before it was killed.
type childOutput struct {
	signed      map[uint64]string
	acked, paid uint64
}

// runKilledChild runs the helper on dir, kills it with SIGKILL after it
// was ready for delay and returns what it printed.
func runKilledChild(t *testing.T, dir string, delay time.Duration) childOutput {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcessMeterPayer$", "-test.count=1")
	cmd.Env = append(os.Environ(), killDirEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	kill := func() {
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Errorf("kill child: %v", err)
		}
	}
	out := childOutput{signed: map[uint64]string{}}
	var other []string
	var stop <-chan time.Time // starts at READY
read:
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				break read // the child is gone; every line it printed is read
			}
			word, rest, _ := strings.Cut(line, " ")
			seqStr, hash, _ := strings.Cut(rest, " ")
			seq, _ := strconv.ParseUint(seqStr, 10, 64)
			switch word {
			case "READY":
				stop = time.After(delay)
			case "SIGNED":
				out.signed[seq] = hash
			case "ACK":
				out.acked = max(out.acked, seq)
			case "PAID":
				out.paid = max(out.paid, seq)
			default:
				other = append(other, line)
			}
		case <-stop:
			kill()
			stop = nil
		case <-ctx.Done():
			kill()
			t.Fatalf("child did not finish: %v; output %q", ctx.Err(), other)
		}
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, not SIGKILL; output %q", err, other)
	}
	return out
}
