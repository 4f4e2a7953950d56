package node

import (
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/verify"
)

// filterModels makes the filter parser check model slugs against the
// device-profile table.
func filterModels() market.FilterOption { return market.WithKnownModels(verify.Slugs()) }

// ParseFilter parses a filter with model slugs checked against the
// device-profile table.
func ParseFilter(s string) (market.Filter, error) { return market.ParseFilter(s, filterModels()) }

// Offers lists the offers f accepts among the profiles this node knows,
// priced from its order book and scored by its reputation book
// (market.MatchOffers).
func (n *Node) Offers(f market.Filter) ([]market.Offer, error) {
	ps, err := n.KnownProfiles()
	if err != nil {
		return nil, err
	}
	in := market.OfferInputs{Asks: n.market.book.Asks(""), TFLOPS: verify.TFLOPS}
	if n.verify.rep != nil {
		in.Score = n.verify.rep.Standing
	}
	return market.MatchOffers(ps, f, in), nil
}
