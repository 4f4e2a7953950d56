package market

import (
	"reflect"
	"strings"
	"testing"
)

func FuzzParseFilter(f *testing.F) {
	seeds := []string{
		"",
		"model=h100-sxm|a100-80gb count>=8 cc>=9.0 price<=2.10 verified=true",
		"region=EU-West rep>=0.95 uptime>99.5 tflops>500 free>0 simulated!=yes",
		"vram>=80\tcc<10\nprice<0.000001",
		"VRAM>=80",
		"model=a||b",
		"vram>>80",
		"model<h100",
		"price<=2.1234567",
		"count>-1",
		"cc>=9.x",
		"verified=maybe",
		"gpu=h100",
		"=80",
		"vram",
		"vram>=40|80",
		"rep>1.5",
		"price<=9223372036854.775807",
		"model=h\xff",
		"region=ſ",
		strings.Repeat("count>=1 ", MaxFilterTerms+1),
	}
	for _, s := range seeds {
		f.Add(s)
	}
	offer := sampleOffers()["h100"]
	f.Fuzz(func(t *testing.T, s string) {
		flt, err := ParseFilter(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("ParseFilter(%q): empty error message", s)
			}
			return
		}
		flt.Match(offer)
		flt.Match(Offer{})
		flt.Models()
		canon := flt.String()
		again, err := ParseFilter(canon)
		if err != nil {
			t.Fatalf("ParseFilter(%q) ok, but its String %q fails: %v", s, canon, err)
		}
		if !reflect.DeepEqual(again, flt) {
			t.Fatalf("ParseFilter(%q) = %#v; re-parsed String %q = %#v", s, flt, canon, again)
		}
		if got := again.String(); got != canon {
			t.Fatalf("String not stable: %q then %q", canon, got)
		}
	})
}
