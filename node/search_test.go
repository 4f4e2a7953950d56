package node

import (
	"testing"

	"github.com/gpumesh/gpumesh/market"
)

func mustFilter(t *testing.T, s string) market.Filter {
	t.Helper()
	f, err := ParseFilter(s)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestParseFilterChecksModelSlugs(t *testing.T) {
	if _, err := ParseFilter("model=h100"); err == nil {
		t.Fatal("unknown model slug accepted")
	}
	if _, err := ParseFilter("model=h100-sxm|rtx4090 vram>=24"); err != nil {
		t.Fatal(err)
	}
}
