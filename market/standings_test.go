package market

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
)

// fixedStandings rates every supplier alike.
type fixedStandings struct {
	rep    float64
	proven bool
}

func (s fixedStandings) Standing(peer.ID) (float64, bool, *float64) { return s.rep, false, nil }
func (s fixedStandings) Proven(peer.ID) bool                        { return s.proven }

func TestScreenBy(t *testing.T) {
	book := fixedStandings{rep: 0.9, proven: true}
	var req RentRequest
	req.ScreenBy(book)
	if req.Score == nil || req.Proven == nil {
		t.Fatal("ScreenBy left the request without a Score or Proven")
	}
	if rep, _, _ := req.Score("p"); rep != 0.9 || !req.Proven("p") {
		t.Fatalf("screened by the book: rep %v, proven %v; want 0.9, true", rep, req.Proven("p"))
	}

	own := RentRequest{
		Score:  func(peer.ID) (float64, bool, *float64) { return 0.1, true, nil },
		Proven: func(peer.ID) bool { return false },
	}
	own.ScreenBy(book)
	if rep, verified, _ := own.Score("p"); rep != 0.1 || !verified || own.Proven("p") {
		t.Fatalf("a request's own screen was replaced: rep %v, verified %v, proven %v", rep, verified, own.Proven("p"))
	}
}
