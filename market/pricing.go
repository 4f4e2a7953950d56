package market

import (
	"fmt"
	"math"
	"strings"

	"github.com/gpumesh/gpumesh/money"
)

// PricingMode is a supplier's pricing strategy.
type PricingMode string

// The pricing modes; see Pricer for their rules.
const (
	Fixed   PricingMode = "fixed"
	Auction PricingMode = "auction"
	Dynamic PricingMode = "dynamic"
)

// ParsePricingMode parses "fixed", "auction" or "dynamic" (any case).
func ParsePricingMode(s string) (PricingMode, error) {
	switch m := PricingMode(strings.ToLower(strings.TrimSpace(s))); m {
	case Fixed, Auction, Dynamic:
		return m, nil
	}
	return "", fmt.Errorf("pricing mode %q: want fixed, auction or dynamic", s)
}

// ParseModelPrice parses a "MODEL=PRICE" pair such as "h100-sxm=2.10",
// as in a supplier's price list.
func ParseModelPrice(s string) (model string, price money.Micros, err error) {
	model, amount, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok || model == "" || amount == "" {
		return "", 0, fmt.Errorf("model price %q: want MODEL=PRICE, e.g. h100-sxm=2.10", s)
	}
	if err := checkWord("model", model); err != nil {
		return "", 0, fmt.Errorf("model price %q: %w", s, err)
	}
	price, err = money.ParseMicros(amount)
	if err != nil {
		return "", 0, fmt.Errorf("model price %q: %w", s, err)
	}
	return model, price, nil
}

// Decline reasons of Pricer.Quote.
const (
	declinePrice   = string(DeclinePrice)    // even the lowest acceptable price is above the bid's maximum
	declineNoPrice = string(DeclineMismatch) // no list price for the model: not for sale
)

// PriceInput is what Pricer.Quote prices: one bid against one of the
// supplier's models. Prices are micro-units per GPU-hour.
type PriceInput struct {
	Model       string
	Count       int
	DurationS   uint32
	MaxPrice    int64   // the bid's maximum; 0 or less means none
	Utilization float64 // the supplier's reserved/total GPUs of the model, 0..1
	Competing   []int64 // live ask prices of other suppliers for the model
	Index       int64   // recent clearing price (median of trade prints), 0 if none
}

// Pricer prices a supplier's GPUs. List is the price per GPU-hour of each
// model it sells; Floor the lowest it will go, 50% of the
// list price for a model without one (and never above the list price).
//
// The modes:
//
//   - fixed: the list price. A bid whose maximum is below it is declined.
//   - auction (a reverse auction: suppliers compete on quotes for each
//     bid): 1% below the cheapest competing ask, kept within [floor, list];
//     the list price when nobody competes. A bid's budget pulls the price
//     down: when the price is above the bid's maximum but the floor is
//     not, the quote is the maximum. Only a maximum below the floor is
//     declined.
//   - dynamic: base × (0.8 + 0.6 × utilization), where base is the list
//     price, or the mean of the list price and the index (the recent
//     clearing price) when there is one, kept within [floor, 2 × list];
//     then, as with fixed, a bid whose maximum is below it is declined.
//
// Prices are whole micro-units; floats are used only inside the
// computation and rounded to the nearest micro-unit.
type Pricer struct {
	Mode  PricingMode
	List  map[string]money.Micros
	Floor map[string]money.Micros
}

// floor returns the lowest price the pricer takes for a model listed at
// list.
func (p Pricer) floor(model string, list int64) int64 {
	f := int64(p.Floor[model])
	if f <= 0 {
		f = list / 2
	}
	return min(f, list)
}

// AskPrice returns the price to advertise in an ask for model, given the
// supplier's utilization of the model (0..1) and the price index (0 if
// none). It is false when the model has no list price. Auction and fixed
// asks advertise the list price; dynamic asks the dynamic price.
func (p Pricer) AskPrice(model string, utilization float64, index int64) (int64, bool) {
	list := int64(p.List[model])
	if list <= 0 {
		return 0, false
	}
	if p.Mode == Dynamic {
		return dynamicPrice(list, p.floor(model, list), utilization, index), true
	}
	return list, true
}

// Quote prices a bid for one of the supplier's models, following the
// mode's rules (see Pricer). decline is "" for an offer at price. It is
// "price" when even the lowest price the supplier would take is above the
// bid's maximum; price is then that lowest price, for the renter's
// explanation. It is "mismatch" when the model has no list price.
func (p Pricer) Quote(in PriceInput) (price int64, decline string) {
	list := int64(p.List[in.Model])
	if list <= 0 {
		return 0, declineNoPrice
	}
	floor := p.floor(in.Model, list)
	switch p.Mode {
	case Auction:
		price = list
		if c, ok := cheapest(in.Competing); ok {
			price = min(max(roundMicros(float64(c)*0.99), floor), list)
		}
		if in.MaxPrice > 0 && price > in.MaxPrice {
			if in.MaxPrice < floor {
				return floor, declinePrice
			}
			price = in.MaxPrice
		}
		return price, ""
	case Dynamic:
		price = dynamicPrice(list, floor, in.Utilization, in.Index)
	default:
		price = list
	}
	if in.MaxPrice > 0 && price > in.MaxPrice {
		return price, declinePrice
	}
	return price, ""
}

// cheapest returns the lowest positive price in prices.
func cheapest(prices []int64) (int64, bool) {
	var low int64
	found := false
	for _, c := range prices {
		if c > 0 && (!found || c < low) {
			low, found = c, true
		}
	}
	return low, found
}

// dynamicPrice is base × (0.8 + 0.6 × utilization) kept within [floor,
// 2 × list], where base is list or, with an index, (list + index) / 2.
func dynamicPrice(list, floor int64, utilization float64, index int64) int64 {
	u := utilization
	if math.IsNaN(u) || u < 0 {
		u = 0
	}
	u = min(u, 1)
	base := float64(list)
	if index > 0 {
		base = (float64(list) + float64(index)) / 2
	}
	ceiling := list
	if list <= math.MaxInt64/2 {
		ceiling = 2 * list
	}
	return min(max(roundMicros(base*(0.8+0.6*u)), floor), ceiling)
}

// roundMicros rounds f to the nearest whole micro-unit, saturating at the
// int64 range.
func roundMicros(f float64) int64 {
	r := math.Round(f)
	if r >= math.MaxInt64 {
		return math.MaxInt64
	}
	if r <= math.MinInt64 {
		return math.MinInt64
	}
	return int64(r)
}
