package market

import (
	"cmp"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/store"
)

// Errors of the capacity ledger.
var (
	// ErrInsufficientCapacity is returned, wrapped, when a reservation
	// asks for more GPUs of a model than are free.
	ErrInsufficientCapacity = errors.New("not enough free GPUs")
	// ErrNoReservation is returned, wrapped, for a lease with no
	// reservation: unknown, released, or lapsed.
	ErrNoReservation = errors.New("no such reservation")
)

// Reservation states.
const (
	ReservationPending   = "pending"   // granted, awaiting the renter's confirmation
	ReservationConfirmed = "confirmed" // held until the lease ends
)

// ksReservations holds the ledger's reservations: key = lease ID (32
// bytes), value = a reservationRecord in JSON, stored with a TTL that ends
// at the reservation's Until.
var ksReservations = store.MustKeyspace("reservations")

// Reservation is capacity held for one lease: specific GPUs of one model,
// pending until the renter confirms and then confirmed until the lease
// ends. It lapses, freeing its GPUs, at Until.
type Reservation struct {
	LeaseID ID
	Model   string
	GPUs    []string // UUIDs
	State   string   // ReservationPending or ReservationConfirmed
	Until   time.Time
}

// reservationRecord is a Reservation as stored.
type reservationRecord struct {
	LeaseID string   `json:"lease_id"` // hex
	Model   string   `json:"model"`
	GPUs    []string `json:"gpus"`
	State   string   `json:"state"`
	UntilMs int64    `json:"until_ms"`
}

// Capacity is one model's GPUs at a supplier. The JSON names are a public
// contract.
type Capacity struct {
	Model    string `json:"model"`
	Total    int    `json:"total"`
	Reserved int    `json:"reserved"`
	Free     int    `json:"free"`
}

// Ledger is a supplier's capacity ledger: which of its GPUs are reserved
// for which lease. One mutex serialises every check-and-reserve, so
// capacity is never double-booked whatever the concurrency, and every
// change is written to the store before the call returns, so a crash
// never loses a granted reservation and a restarted supplier keeps its
// leases' capacity.
//
// A reservation lapses at its Until: pending ones when the renter fails
// to confirm in time, confirmed ones when the lease ends. There is no
// background loop: every call first drops lapsed reservations, and the
// store forgets them by TTL as well.
type Ledger struct {
	s   store.Store
	now func() time.Time

	mu     sync.Mutex
	gpus   map[string][]string     // model → GPU UUIDs, in inventory order
	res    map[ID]*Reservation     // live reservations by lease
	holder map[string]*Reservation // GPU UUID → the reservation holding it
}

// OpenLedger returns the ledger of the GPUs in gpus (model → UUIDs) kept
// in s, reading the time from now (time.Now when nil). It loads the
// reservations already in s, so a restarted supplier keeps them and their
// GPUs; those past their Until are dropped. A GPU UUID listed twice is an
// error.
func OpenLedger(s store.Store, gpus map[string][]string, now func() time.Time) (*Ledger, error) {
	if now == nil {
		now = time.Now
	}
	l := &Ledger{
		s:      s,
		now:    now,
		gpus:   make(map[string][]string, len(gpus)),
		res:    make(map[ID]*Reservation),
		holder: make(map[string]*Reservation),
	}
	seen := make(map[string]string)
	for model, uuids := range gpus {
		if model == "" {
			return nil, errors.New("ledger: GPU inventory has an empty model name")
		}
		for _, u := range uuids {
			if other, dup := seen[u]; dup {
				return nil, fmt.Errorf("ledger: GPU %s is listed under both %s and %s", u, other, model)
			}
			seen[u] = model
		}
		l.gpus[model] = slices.Clone(uuids)
	}
	if err := l.load(); err != nil {
		return nil, err
	}
	return l, nil
}

// load reads the stored reservations into l.
func (l *Ledger) load() error {
	now := l.now()
	var lapsed []ID
	err := l.s.Iterate(ksReservations, nil, func(key, value []byte) error {
		r, err := decodeReservation(key, value)
		if err != nil {
			return err
		}
		if !now.Before(r.Until) {
			lapsed = append(lapsed, r.LeaseID)
			return nil
		}
		for _, g := range r.GPUs {
			if other, taken := l.holder[g]; taken {
				return fmt.Errorf("ledger: stored reservations %s and %s both hold GPU %s", other.LeaseID, r.LeaseID, g)
			}
			l.holder[g] = r
		}
		l.res[r.LeaseID] = r
		return nil
	})
	if err != nil {
		return fmt.Errorf("ledger: load reservations: %w", err)
	}
	for _, id := range lapsed {
		// The store forgets them by TTL anyway; deleting is housekeeping.
		_ = l.s.Delete(ksReservations, id[:])
	}
	return nil
}

// decodeReservation decodes a stored reservation and checks it against
// its key.
func decodeReservation(key, value []byte) (*Reservation, error) {
	var rec reservationRecord
	if err := json.Unmarshal(value, &rec); err != nil {
		return nil, fmt.Errorf("reservation %x: decode: %w", key, err)
	}
	id, err := ParseID(rec.LeaseID)
	if err != nil || string(id[:]) != string(key) {
		return nil, fmt.Errorf("reservation %x: lease ID %q does not match its key", key, rec.LeaseID)
	}
	if rec.State != ReservationPending && rec.State != ReservationConfirmed {
		return nil, fmt.Errorf("reservation %x: unknown state %q", key, rec.State)
	}
	return &Reservation{
		LeaseID: id,
		Model:   rec.Model,
		GPUs:    rec.GPUs,
		State:   rec.State,
		Until:   time.UnixMilli(rec.UntilMs),
	}, nil
}

// save writes r to the store with a TTL ending at r.Until.
func (l *Ledger) save(r *Reservation, now time.Time) error {
	ttl := r.Until.Sub(now)
	if ttl <= 0 {
		return fmt.Errorf("reservation for lease %s: until %s is not in the future", r.LeaseID.Short(), r.Until.Format(time.RFC3339))
	}
	value, err := json.Marshal(reservationRecord{
		LeaseID: hex.EncodeToString(r.LeaseID[:]),
		Model:   r.Model,
		GPUs:    r.GPUs,
		State:   r.State,
		UntilMs: r.Until.UnixMilli(),
	})
	if err != nil {
		return fmt.Errorf("reservation for lease %s: encode: %w", r.LeaseID.Short(), err)
	}
	if err := l.s.PutTTL(ksReservations, r.LeaseID[:], value, ttl); err != nil {
		return fmt.Errorf("reservation for lease %s: save: %w", r.LeaseID.Short(), err)
	}
	return nil
}

// expire drops the reservations that have lapsed at now, freeing their
// GPUs; the caller holds l.mu.
func (l *Ledger) expire(now time.Time) {
	for id, r := range l.res {
		if now.Before(r.Until) {
			continue
		}
		l.drop(r)
		// The store forgets it by TTL anyway; deleting is housekeeping,
		// and a failure leaves nothing held.
		_ = l.s.Delete(ksReservations, id[:])
	}
}

// drop removes r from memory; the caller holds l.mu.
func (l *Ledger) drop(r *Reservation) {
	delete(l.res, r.LeaseID)
	for _, g := range r.GPUs {
		if l.holder[g] == r {
			delete(l.holder, g)
		}
	}
}

// freeGPUs lists the free GPUs of model in inventory order; the caller
// holds l.mu.
func (l *Ledger) freeGPUs(model string) []string {
	var free []string
	for _, g := range l.gpus[model] {
		if _, held := l.holder[g]; !held {
			free = append(free, g)
		}
	}
	return free
}

// Reserve holds count free GPUs of model for the lease leaseID, pending
// until until (kept to the millisecond). It picks specific GPUs and writes the reservation to the
// store before returning it. Reserving again for a lease that already has
// a live reservation returns that reservation unchanged (an error if the
// model or count differ). When too few GPUs are free it fails with
// ErrInsufficientCapacity.
func (l *Ledger) Reserve(leaseID ID, model string, count int, until time.Time) (Reservation, error) {
	if count <= 0 {
		return Reservation{}, fmt.Errorf("lease %s: reserve %d GPUs of %s: count must be positive", leaseID.Short(), count, model)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.expire(now)
	if r, ok := l.res[leaseID]; ok {
		if r.Model != model || len(r.GPUs) != count {
			return Reservation{}, fmt.Errorf("lease %s: reserve %d GPUs of %s: already holds %d of %s",
				leaseID.Short(), count, model, len(r.GPUs), r.Model)
		}
		return r.clone(), nil
	}
	until = wholeMillis(until)
	if !now.Before(until) {
		return Reservation{}, fmt.Errorf("lease %s: reserve GPUs of %s: until %s is not in the future",
			leaseID.Short(), model, until.Format(time.RFC3339))
	}
	free := l.freeGPUs(model)
	if len(free) < count {
		return Reservation{}, fmt.Errorf("lease %s: model %s: want %d, free %d: %w",
			leaseID.Short(), model, count, len(free), ErrInsufficientCapacity)
	}
	r := &Reservation{
		LeaseID: leaseID,
		Model:   model,
		GPUs:    slices.Clone(free[:count]),
		State:   ReservationPending,
		Until:   until,
	}
	if err := l.save(r, now); err != nil {
		return Reservation{}, err
	}
	l.res[leaseID] = r
	for _, g := range r.GPUs {
		l.holder[g] = r
	}
	return r.clone(), nil
}

// Confirm turns the lease's pending reservation into a confirmed one that
// holds until end, writing it to the store before returning. Confirming a
// confirmed reservation again moves its end. It fails with
// ErrNoReservation when the reservation has lapsed or never existed.
func (l *Ledger) Confirm(leaseID ID, end time.Time) (Reservation, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.expire(now)
	r, ok := l.res[leaseID]
	if !ok {
		return Reservation{}, fmt.Errorf("lease %s: confirm: %w", leaseID.Short(), ErrNoReservation)
	}
	next := *r
	next.State, next.Until = ReservationConfirmed, wholeMillis(end)
	if err := l.save(&next, now); err != nil {
		return Reservation{}, fmt.Errorf("lease %s: confirm: %w", leaseID.Short(), err)
	}
	*r = next
	return r.clone(), nil
}

// Release frees the lease's reservation, deleting it from the store. It
// fails with ErrNoReservation when there is none (unknown, released
// already, or lapsed).
func (l *Ledger) Release(leaseID ID) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire(l.now())
	r, ok := l.res[leaseID]
	if !ok {
		return fmt.Errorf("lease %s: release: %w", leaseID.Short(), ErrNoReservation)
	}
	// Delete first: should it fail, the GPUs stay held, never double-booked.
	if err := l.s.Delete(ksReservations, leaseID[:]); err != nil {
		return fmt.Errorf("lease %s: release: %w", leaseID.Short(), err)
	}
	l.drop(r)
	return nil
}

// NextExpiry is when the next reservation (pending or confirmed) lapses
// and frees its GPUs; zero when none is held. The supplier wakes then to
// advertise the freed capacity at once.
func (l *Ledger) NextExpiry() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var next time.Time
	for _, r := range l.res {
		if next.IsZero() || r.Until.Before(next) {
			next = r.Until
		}
	}
	return next
}

// Holds reports whether the lease has a live reservation.
func (l *Ledger) Holds(leaseID ID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire(l.now())
	_, ok := l.res[leaseID]
	return ok
}

// Free returns the number of free GPUs of model (0 for a model the
// supplier does not have).
func (l *Ledger) Free(model string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire(l.now())
	return len(l.freeGPUs(model))
}

// total is the number of GPUs of model, free or not. The inventory does
// not change once the ledger is open, so it needs no lock.
func (l *Ledger) total(model string) int { return len(l.gpus[model]) }

// Capacity returns each model's total, reserved and free GPUs, sorted by
// model.
func (l *Ledger) Capacity() []Capacity {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire(l.now())
	out := make([]Capacity, 0, len(l.gpus))
	for model, uuids := range l.gpus {
		free := len(l.freeGPUs(model))
		out = append(out, Capacity{Model: model, Total: len(uuids), Reserved: len(uuids) - free, Free: free})
	}
	slices.SortFunc(out, func(a, b Capacity) int { return cmp.Compare(a.Model, b.Model) })
	return out
}

// Reservations returns the live reservations, soonest to lapse first.
func (l *Ledger) Reservations() []Reservation {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire(l.now())
	out := make([]Reservation, 0, len(l.res))
	for _, r := range l.res {
		out = append(out, r.clone())
	}
	slices.SortFunc(out, func(a, b Reservation) int {
		if c := a.Until.Compare(b.Until); c != 0 {
			return c
		}
		return compareIDs(a.LeaseID, b.LeaseID)
	})
	return out
}

// wholeMillis is t truncated to the milliseconds the store keeps, so a
// reservation reads the same before and after a restart.
func wholeMillis(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()) }

// clone returns a copy of r that shares no memory with it.
func (r *Reservation) clone() Reservation {
	c := *r
	c.GPUs = slices.Clone(r.GPUs)
	return c
}
