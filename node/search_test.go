package node

import (
	"testing"

	"github.com/gpumesh/gpumesh/market"
)

func mustFilter(t *testing.T, s string) market.Filter {
	t.Helper()
	f, err := market.ParseFilter(s)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
