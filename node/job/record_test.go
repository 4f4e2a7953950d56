package job

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/money"
	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/store"
)

// keptRecord is a job record as nodes have stored it since before states
// and amounts were typed.
const keptRecord = `{"id":"ab","spec":null,"filter":"model=h100-sxm vram\u003e=80","count":2,"duration_ms":3600000,` +
	`"max_price":2500000,"min_rep":0.5,"interval_ms":10000,"credit":100000,"state":"recovering","exit_code":0,"message":"",` +
	`"attempts":[{"attempt":1,"lease":null,"supplier":"s","started":true,"outcome":"lost","settled":false,"fenced":true,"at":"0001-01-01T00:00:00Z"}],` +
	`"checkpoint_at":"0001-01-01T00:00:00Z","failovers":1,"restarts":0,"created":"0001-01-01T00:00:00Z","updated":"0001-01-01T00:00:00Z"}`

// TestKeptRecordDecodes checks that a record stored before the typed
// vocabulary still decodes to the same state, outcome and amounts, and
// is written back in the same form.
func TestKeptRecordDecodes(t *testing.T) {
	codec := store.JSONCodec[jobRecord]{}
	rec, err := codec.Unmarshal([]byte(keptRecord))
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != StateRecovering || rec.Attempts[0].Outcome != StateLost || rec.MaxPrice != 2_500_000 || rec.Credit != money.Unit/10 {
		t.Fatalf("decoded state %q, outcome %q, max price %d, credit %d", rec.State, rec.Attempts[0].Outcome, rec.MaxPrice, rec.Credit)
	}
	f, err := market.ParseFilter(rec.Filter, market.AnyModel())
	if err != nil {
		t.Fatal(err)
	}
	req := rec.rentRequest(f, &Spec{})
	if req.Count != 2 || req.Duration != time.Hour || req.MaxPrice != 2_500_000 || req.Terms.CreditLimit != 100_000 || req.Terms.ReceiptInterval != 10*time.Second || req.Filter.String() != rec.Filter {
		t.Fatalf("rent request of the kept record: %+v", req)
	}
	again, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"state":"recovering"`, `"outcome":"lost"`, `"max_price":2500000`, `"credit":100000`} {
		if !strings.Contains(string(again), field) {
			t.Errorf("the record is written back without %s: %s", field, again)
		}
	}
}

// TestNewRecordKeepsTheRequest checks that a submitted request's filter,
// terms and amounts survive into its record and back into a rent request.
func TestNewRecordKeepsTheRequest(t *testing.T) {
	f, err := market.ParseFilter("model=h100-sxm region=eu")
	if err != nil {
		t.Fatal(err)
	}
	req := Request{
		Filter: f, RentTerms: market.RentTerms{Count: 4, Duration: 90 * time.Minute, MaxPrice: 3 * money.Unit},
		MinReputation: 0.7, AllowUnproven: true, ReceiptInterval: 5 * time.Second, CreditLimit: money.Unit,
	}
	rec := newRecord(req, &Spec{JobSpec: &pb.JobSpec{JobId: []byte{0xab}}}, "", 0, time.Unix(0, 0))
	if rec.State != StateRenting || rec.ID != "ab" || rec.Filter != f.String() {
		t.Fatalf("a new record: state %q, id %q, filter %q", rec.State, rec.ID, rec.Filter)
	}
	got := rec.rentRequest(f, &Spec{})
	if got.Filter.String() != f.String() || got.Count != 4 || got.Duration != 90*time.Minute || got.MaxPrice != 3*money.Unit ||
		got.MinReputation != 0.7 || !got.AllowUnproven || got.AllowSimulated || got.Terms.ReceiptInterval != 5*time.Second || got.Terms.CreditLimit != money.Unit {
		t.Fatalf("rent request %+v from request %+v", got, req)
	}
}
