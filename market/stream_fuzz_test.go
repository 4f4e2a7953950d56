package market

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/market/pb"
)

// FuzzBookResponse feeds arbitrary bytes to what QueryBook does with an
// order-book reply: decode it, then check every ask. Nothing may panic,
// and nothing invalid may come out.
func FuzzBookResponse(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x03, 0x01, 0x02, 0x03})
	good, _ := proto.Marshal(&pb.BookResponse{Asks: [][]byte{[]byte("not an ask")}})
	f.Add(good)
	now := time.UnixMilli(1_800_000_000_000)
	f.Fuzz(func(t *testing.T, b []byte) {
		var resp pb.BookResponse
		if proto.Unmarshal(b, &resp) != nil {
			return
		}
		for _, raw := range resp.Asks {
			a, err := OpenAsk(raw, now)
			if err == nil && (a.Count == 0 || a.PriceMicros <= 0) {
				t.Fatalf("accepted an invalid ask: %+v", a.Ask)
			}
		}
	})
}

// FuzzLeaseResponse does the same for the supplier's answer on the lease
// stream, and the request frames a supplier decodes.
func FuzzLeaseResponse(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x12, 0x04, 'b', 'u', 's', 'y'})
	now := time.UnixMilli(1_800_000_000_000)
	f.Fuzz(func(t *testing.T, b []byte) {
		var resp pb.LeaseResponse
		if proto.Unmarshal(b, &resp) == nil && len(resp.Lease) > 0 {
			if l, err := OpenLease(resp.Lease, now); err == nil && l.Proposal == nil {
				t.Fatal("lease accepted without its proposal")
			}
		}
		var req pb.BookRequest
		_ = proto.Unmarshal(b, &req)
		var c pb.LeaseConfirm
		_ = proto.Unmarshal(b, &c)
		_, _ = OpenProposal(b, now)
	})
}

// FuzzLeaseConfirm: whatever a renter sends as its LeaseConfirm, the
// supplier's reading of it never panics, confirms only a message whose
// lease_id alone names the lease, and releases only one whose release_id
// alone does: nothing else, an older renter's empty message included,
// confirms or releases by mistake.
func FuzzLeaseConfirm(f *testing.F) {
	id := ID{7, 7, 7}
	for _, m := range []*pb.LeaseConfirm{{}, {LeaseId: id[:]}, {ReleaseId: id[:]}, {LeaseId: id[:], ReleaseId: id[:]}, {ReleaseId: []byte{7}}} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c pb.LeaseConfirm
		if proto.Unmarshal(b, &c) != nil {
			return
		}
		got := confirmWord(&c, id)
		switch {
		case got == wordConfirm && (len(c.ReleaseId) != 0 || !bytes.Equal(c.LeaseId, id[:])):
			t.Fatalf("confirmed by %x / %x", c.LeaseId, c.ReleaseId)
		case got == wordRelease && (len(c.LeaseId) != 0 || !bytes.Equal(c.ReleaseId, id[:])):
			t.Fatalf("released by %x / %x", c.LeaseId, c.ReleaseId)
		case got == wordLapse && (len(c.LeaseId) == 0) != (len(c.ReleaseId) == 0) && (bytes.Equal(c.LeaseId, id[:]) || bytes.Equal(c.ReleaseId, id[:])):
			t.Fatalf("a lone field naming the lease lapsed: %x / %x", c.LeaseId, c.ReleaseId)
		}
	})
}
