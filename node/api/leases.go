package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/verify/reputation"
)

// RentRequest is the body of POST /api/v1/leases: what the node rents,
// in the words of `gpumesh rent`. The lease binds no job: jobs start on
// it with `gpumesh run --lease` (JobRequest.Lease) until it ends or is
// released.
type RentRequest struct {
	Filter         string   `json:"filter"`
	Count          int      `json:"count"`
	Hours          float64  `json:"hours"`
	MaxPrice       string   `json:"max_price"` // per GPU-hour, e.g. "2.50"
	MinRep         *float64 `json:"min_rep"`   // default reputation.DefaultFloor
	AllowUnproven  bool     `json:"allow_unproven"`
	AllowSimulated bool     `json:"allow_simulated"`
	Wait           string   `json:"wait"` // how long to collect quotes, e.g. "2s"; "" 2s
}

// ToRequest checks a RentRequest and turns it into the market's form.
func (r RentRequest) ToRequest() (market.RentRequest, error) {
	f, err := market.ParseFilter(r.Filter)
	if err != nil {
		return market.RentRequest{}, err
	}
	if r.Hours == 0 {
		r.Hours = 1
	}
	terms, err := market.ParseRentTerms(r.Count, r.Hours, r.MaxPrice)
	if err != nil {
		return market.RentRequest{}, err
	}
	req := market.RentRequest{Filter: f, Count: terms.Count, Duration: terms.Duration, MaxPrice: terms.MaxPrice,
		MinReputation: reputation.DefaultFloor, AllowUnproven: r.AllowUnproven, AllowSimulated: r.AllowSimulated, Wait: 2 * time.Second}
	if r.MinRep != nil {
		req.MinReputation = *r.MinRep
	}
	if r.Wait != "" {
		if req.Wait, err = time.ParseDuration(r.Wait); err != nil || req.Wait <= 0 || req.Wait > time.Minute {
			return market.RentRequest{}, errors.New("wait " + r.Wait + ": want a duration up to 1m, e.g. 2s")
		}
	}
	return req, nil
}

// ErrNoLease is what a backend returns, wrapped, for a lease ID it does
// not hold as renter; the handler answers 404.
var ErrNoLease = errors.New("no such lease")

func (s *server) rent(w http.ResponseWriter, r *http.Request) {
	var rr RentRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&rr); err != nil {
		http.Error(w, "rent request: "+err.Error(), http.StatusBadRequest)
		return
	}
	req, err := rr.ToRequest()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	l, err := s.b.Rent(r.Context(), req)
	var nm *market.NoMatch
	if errors.As(err, &nm) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_ = json.NewEncoder(w).Encode(ConflictBody{"no lease made", nm.Reasons})
		return
	}
	if err != nil {
		fail(w, err, http.StatusBadGateway)
		return
	}
	writeJSON(w, l)
}

func (s *server) releaseLease(w http.ResponseWriter, r *http.Request) {
	l, err := s.b.ReleaseLease(r.Context(), r.PathValue("id"))
	var refused *market.ReleaseRefused
	switch {
	case errors.Is(err, ErrNoLease):
		fail(w, err, http.StatusNotFound)
	case errors.As(err, &refused):
		fail(w, err, http.StatusConflict)
	case err != nil:
		fail(w, err, http.StatusBadGateway)
	default:
		writeJSON(w, l)
	}
}

// Rent has the node rent GPUs with no job bound to them; when no
// supplier matches, the error is (for errors.As) a *market.NoMatch.
func (c *Client) Rent(ctx context.Context, rr RentRequest) (LeaseView, error) {
	var v LeaseView
	return v, c.call(ctx, SlowTimeout, http.MethodPost, PathLeases, nil, rr, &v)
}

// ReleaseLease has the node release the lease it rented whose ID starts
// with id; the answer is the lease, released.
func (c *Client) ReleaseLease(ctx context.Context, id string) (LeaseView, error) {
	var v LeaseView
	return v, c.call(ctx, SlowTimeout, http.MethodPost, jobPath(PathLeaseRelease, id), nil, nil, &v)
}
