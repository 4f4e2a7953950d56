package netlab

import (
	"encoding/json"
	"errors"
	"net/netip"
	"testing"
	"time"
)

func TestParseIPv4(t *testing.T) {
	hdr := func(b0 byte, total int, n int) []byte {
		p := make([]byte, n)
		if n > 0 {
			p[0] = b0
		}
		if n > 3 {
			p[2], p[3] = byte(total>>8), byte(total)
		}
		if n >= 20 {
			copy(p[12:], []byte{11, 1, 0, 1, 11, 2, 0, 3})
		}
		return p
	}
	for _, tc := range []struct {
		name string
		p    []byte
		err  error
	}{
		{"ok", hdr(0x45, 28, 28), nil},
		{"ok with options", hdr(0x46, 24, 24), nil},
		{"trailing bytes", hdr(0x45, 20, 30), nil},
		{"empty", nil, errShort},
		{"short", hdr(0x45, 19, 19), errShort},
		{"ipv6", hdr(0x60, 20, 40), errNotIPv4},
		{"ihl too small", hdr(0x44, 20, 20), errBadIHL},
		{"ihl past end", hdr(0x4f, 60, 40), errBadIHL},
		{"total past end", hdr(0x45, 100, 40), errBadTotal},
		{"total below header", hdr(0x45, 10, 40), errBadTotal},
	} {
		src, dst, err := parseIPv4(tc.p)
		if !errors.Is(err, tc.err) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.err)
			continue
		}
		if err == nil && (src != netip.MustParseAddr("11.1.0.1") || dst != netip.MustParseAddr("11.2.0.3")) {
			t.Errorf("%s: src %s dst %s", tc.name, src, dst)
		}
	}
}

func FuzzParseIPv4(f *testing.F) {
	f.Add([]byte{0x45, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 11, 1, 0, 1, 11, 2, 0, 1})
	f.Add([]byte{0x60})
	f.Fuzz(func(t *testing.T, p []byte) {
		src, dst, err := parseIPv4(p)
		if err != nil {
			return
		}
		if len(p) < 20 || p[0]>>4 != 4 || !src.Is4() || !dst.Is4() {
			t.Fatalf("accepted %x", p)
		}
		if total := int(p[2])<<8 | int(p[3]); total > len(p) || total < int(p[0]&0xf)*4 {
			t.Fatalf("accepted total %d of %d bytes", total, len(p))
		}
	})
}

func TestSpecValidate(t *testing.T) {
	good := Spec{Hosts: []Host{{"a", "eu-west", Public}, {"b", "us-east", Cone}}}
	if err := good.WithDefaults().Validate(); err != nil {
		t.Fatalf("good spec: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Spec)
		err  error
	}{
		{"prefix with hyphen", func(s *Spec) { s.Prefix = "gm-lab" }, ErrBadPrefix},
		{"prefix too long", func(s *Spec) { s.Prefix = "abcdefghijklm" }, ErrBadPrefix},
		{"no hosts", func(s *Spec) { s.Hosts = nil }, ErrBadHost},
		{"host name too long", func(s *Spec) { s.Hosts[0].Name = "abcdefghijklmnop" }, ErrBadHost},
		{"host name upper case", func(s *Spec) { s.Hosts[0].Name = "A" }, ErrBadHost},
		{"host ending in -nat", func(s *Spec) { s.Hosts[0].Name = "a-nat" }, ErrBadHost},
		{"host twice", func(s *Spec) { s.Hosts[1].Name = "a" }, ErrBadHost},
		{"bad kind", func(s *Spec) { s.Hosts[0].Kind = 7 }, ErrBadHost},
		{"bad region", func(s *Spec) { s.Regions = []string{"EU"} }, ErrBadRegion},
		{"region twice", func(s *Spec) { s.Regions = []string{"eu-west", "eu-west"} }, ErrBadRegion},
		{"link to unknown region", func(s *Spec) { s.Links = []LinkSpec{{"eu-west", "mars", Link{}}} }, ErrBadLink},
		{"negative delay", func(s *Spec) { s.Links = []LinkSpec{{"eu-west", "us-east", Link{Delay: -1}}} }, ErrBadLink},
		{"loss above 1", func(s *Spec) { s.Links = []LinkSpec{{"eu-west", "us-east", Link{Loss: 1.5}}} }, ErrBadLink},
	} {
		s := good
		s.Hosts = append([]Host(nil), good.Hosts...)
		tc.edit(&s)
		s = s.WithDefaults()
		if err := s.Validate(); !errors.Is(err, tc.err) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.err)
		}
	}
	var many Spec
	for i := range 255 {
		many.Hosts = append(many.Hosts, Host{Name: "h" + string(rune('a'+i%26)) + itoa(i), Region: "eu-west"})
	}
	if _, err := many.Layout(); !errors.Is(err, ErrTooMany) {
		t.Errorf("255 hosts in a region: %v, want ErrTooMany", err)
	}
}

func itoa(i int) string {
	return string([]byte{byte('0' + i/100), byte('0' + i/10%10), byte('0' + i%10)})
}

func TestLayout(t *testing.T) {
	s := Spec{Prefix: "t", Hosts: []Host{
		{"p0", "eu-west", Public}, {"c0", "us-east", Cone}, {"s0", "eu-west", Symmetric}, {"p1", "us-east", Public},
	}}
	nodes, err := s.Layout()
	if err != nil {
		t.Fatal(err)
	}
	want := []Node{
		{Host: s.Hosts[0], NS: "t-p0", Public: netip.MustParseAddr("11.1.0.1")},
		{Host: s.Hosts[1], NS: "t-c0", Router: "t-c0-nat", Public: netip.MustParseAddr("11.2.0.1"), Private: netip.MustParseAddr("10.1.0.2"), Gateway: netip.MustParseAddr("10.1.0.1")},
		{Host: s.Hosts[2], NS: "t-s0", Router: "t-s0-nat", Public: netip.MustParseAddr("11.1.0.2"), Private: netip.MustParseAddr("10.2.0.2"), Gateway: netip.MustParseAddr("10.2.0.1")},
		{Host: s.Hosts[3], NS: "t-p1", Public: netip.MustParseAddr("11.2.0.2")},
	}
	for i := range want {
		if nodes[i] != want[i] {
			t.Errorf("node %d: got %+v, want %+v", i, nodes[i], want[i])
		}
	}
	// A spec survives JSON (the testnet saves it for its WAN process).
	b, err := json.Marshal(s.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	var back Spec
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	nodes2, err := back.Layout()
	if err != nil || len(nodes2) != len(nodes) || nodes2[2] != nodes[2] {
		t.Errorf("after JSON: %v %+v", err, nodes2)
	}
	if err := json.Unmarshal([]byte(`{"kind":"nat"}`), &Host{}); err == nil {
		t.Errorf("unknown kind decoded")
	}
}

func TestDefaultLink(t *testing.T) {
	for _, tc := range []struct {
		a, b  string
		delay time.Duration
		loss  float64
	}{
		{"eu-west", "eu-west", time.Millisecond, 0},
		{"eu-west", "us-east", 40 * time.Millisecond, 0.005},
		{"us-east", "eu-west", 40 * time.Millisecond, 0.005},
		{"ap-south", "us-east", 120 * time.Millisecond, 0.005},
		{"eu-west", "ap-south", 120 * time.Millisecond, 0.005},
	} {
		l := DefaultLink(tc.a, tc.b)
		if l.Delay != tc.delay || l.Loss != tc.loss || l.Jitter != tc.delay/10 {
			t.Errorf("%s-%s: %+v", tc.a, tc.b, l)
		}
	}
	s := Spec{Links: []LinkSpec{{"us-east", "eu-west", Link{Delay: time.Second}}}}
	if l := s.linkOf("eu-west", "us-east"); l.Delay != time.Second {
		t.Errorf("override not applied both ways: %+v", l)
	}
}
