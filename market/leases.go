package market

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/store"
)

// ksLeases holds the leases both sides make: key = lease ID (32 bytes),
// value = a LeaseRecord in JSON.
var ksLeases = store.MustKeyspace("leases")

// LeaseState is where a kept lease stands. Its words are stored and shown
// (JSON, the CLI) as they are.
type LeaseState string

// Lease states.
const (
	// LeasePending: the supplier countersigned; the renter has not
	// confirmed yet. A pending lease past its ConfirmBy reads as lapsed.
	LeasePending LeaseState = "pending"
	// LeaseConfirmed: both sides hold the lease; its GPUs are reserved.
	LeaseConfirmed LeaseState = "confirmed"
	// LeaseLapsed: never confirmed.
	LeaseLapsed LeaseState = "lapsed"
	// LeaseReleased: the supplier released it before its end (its
	// record's Reason says why).
	LeaseReleased LeaseState = "released"
)

func (s LeaseState) String() string { return string(s) }

// Role is the part a party plays in a lease. Its words are stored and
// shown (JSON, the CLI) as they are.
type Role string

// Roles in a lease.
const (
	RoleSupplier Role = "supplier" // it leases its GPUs out and meters the lease
	RoleRenter   Role = "renter"   // it leases GPUs and pays for the lease
)

func (r Role) String() string { return string(r) }

// LeaseRecord is how both sides keep a lease: the countersigned envelope
// and where it stands.
type LeaseRecord struct {
	Envelope []byte     `json:"envelope"`
	State    LeaseState `json:"state"`
	Role     Role       `json:"role"`
	Saved    time.Time  `json:"saved"`
	// A supplier's confirmed lease is released at ClaimBy unless a job
	// started on it (Claimed); Reason says why a lease was released.
	ClaimBy time.Time `json:"claim_by,omitzero"`
	Claimed time.Time `json:"claimed,omitzero"`
	// Idle: a lease that binds no job spec whose last job ended; held for
	// the next job until ClaimBy (LeaseBook.Release).
	Idle   bool   `json:"idle,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// StoredLease is a lease as kept in a store, validated again on reading.
type StoredLease struct {
	*Lease
	State  LeaseState
	Role   Role
	Reason string // why it was released, if it was
}

func saveLease(s store.Store, id ID, raw []byte, state LeaseState, role Role, now time.Time) error {
	return putLeaseRecord(s, id, LeaseRecord{Envelope: raw, State: state, Role: role, Saved: now.UTC()})
}

func putLeaseRecord(s store.Store, id ID, rec LeaseRecord) error {
	b, err := (store.JSONCodec[LeaseRecord]{}).Marshal(rec)
	if err != nil {
		return fmt.Errorf("lease %s: encode: %w", id.Short(), err)
	}
	return s.Put(ksLeases, id[:], b)
}

// getLeaseRecord reads the stored record of lease id.
func getLeaseRecord(s store.Store, id ID) (LeaseRecord, error) {
	b, err := s.Get(ksLeases, id[:])
	if err != nil {
		return LeaseRecord{}, fmt.Errorf("lease %s: %w", id.Short(), err)
	}
	rec, err := (store.JSONCodec[LeaseRecord]{}).Unmarshal(b)
	if err != nil {
		return LeaseRecord{}, fmt.Errorf("lease %s: decode: %w", id.Short(), err)
	}
	return rec, nil
}

// stored validates rec's lease again and says where it stands at now.
func (rec LeaseRecord) stored(now time.Time) (StoredLease, error) {
	l, err := OpenLease(rec.Envelope, now)
	if err != nil {
		return StoredLease{}, err
	}
	state := rec.State
	if state == LeasePending && !now.Before(time.UnixMilli(l.ConfirmByMs)) {
		state = LeaseLapsed // never confirmed (e.g. the supplier stopped first)
	}
	return StoredLease{Lease: l, State: state, Role: rec.Role, Reason: rec.Reason}, nil
}

// Leases lists the leases kept in s, newest first. Records that no longer
// validate are skipped.
func Leases(s store.Store, now time.Time) ([]StoredLease, error) {
	var out []StoredLease
	codec := store.JSONCodec[LeaseRecord]{}
	err := s.Iterate(ksLeases, nil, func(_, v []byte) error {
		rec, err := codec.Unmarshal(v)
		if err != nil {
			return nil
		}
		if sl, err := rec.stored(now); err == nil {
			out = append(out, sl)
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].StartMs > out[j].StartMs })
	return out, err
}

// GetLease returns the lease with this ID kept in s, validated again, or
// an error wrapping store.ErrNotFound.
func GetLease(s store.Store, id ID, now time.Time) (StoredLease, error) {
	rec, err := getLeaseRecord(s, id)
	if err != nil {
		return StoredLease{}, err
	}
	return rec.stored(now)
}

// ErrAmbiguous is wrapped by FindLease for a prefix that more than one
// lease's ID starts with.
var ErrAmbiguous = errors.New("more than one lease starts with it")

// FindLease returns the lease kept in s in role whose ID (hex) starts
// with prefix, validated again as of now. It fails wrapping
// store.ErrNotFound when none does, ErrAmbiguous when several do.
func FindLease(s store.Store, prefix string, role Role, now time.Time) (StoredLease, error) {
	prefix = strings.ToLower(strings.TrimSpace(prefix))
	ls, err := Leases(s, now)
	if err != nil {
		return StoredLease{}, err
	}
	var found []StoredLease
	for _, l := range ls {
		if l.Role == role && prefix != "" && strings.HasPrefix(l.ID.String(), prefix) {
			found = append(found, l)
		}
	}
	switch len(found) {
	case 0:
		return StoredLease{}, fmt.Errorf("lease %s: none of this %s's: %w", prefix, role, store.ErrNotFound)
	case 1:
		return found[0], nil
	}
	return StoredLease{}, fmt.Errorf("lease %s: %w (%d do); give more of its ID", prefix, ErrAmbiguous, len(found))
}

// KeepLease stores lease l, as role, in state: how a party keeps a lease
// it made (a renter's Rent does so itself).
func KeepLease(s store.Store, l *Lease, state LeaseState, role Role, now time.Time) error {
	return saveLease(s, l.ID, l.Raw, state, role, now)
}
