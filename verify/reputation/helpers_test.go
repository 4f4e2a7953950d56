package reputation

import (
	"crypto/rand"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/verify/pb"
)

// testNow is a fixed clock, so records sealed by tests and fuzz seeds stay
// valid whenever they run.
var testNow = time.UnixMilli(1_800_000_000_000)

// node is a test identity.
type node struct {
	key crypto.PrivKey
	id  peer.ID
}

func newNode(t testing.TB) node {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return node{k, id}
}

func newNodes(t testing.TB, n int) []node {
	t.Helper()
	ns := make([]node, n)
	for i := range ns {
		ns[i] = newNode(t)
	}
	return ns
}

// clock is an injectable clock tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: testNow} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// challengeMsg is a valid challenge verdict about subject at created.
func challengeMsg(subject peer.ID, passed bool, created time.Time) *pb.Attestation {
	m := &pb.Attestation{
		CreatedMs:        created.UnixMilli(),
		Subject:          []byte(subject),
		Kind:             KindChallenge,
		Passed:           passed,
		Gpus:             2,
		Model:            "h100-sxm",
		MeasuredMilliOps: 900_000,
		ExpectedMilliOps: 1_000_000,
		RowsChecked:      64,
		DurationMs:       1500,
		ChallengeId:      make([]byte, ChallengeIDBytes),
	}
	if !passed {
		m.Reason = "slow: 2.1x the claimed model's time"
	}
	_, _ = rand.Read(m.ChallengeId)
	return m
}

// seal signs m with by's key and fails the test on error.
func seal(t testing.TB, m *pb.Attestation, by node) []byte {
	t.Helper()
	raw, err := SealAttestation(m, by.key)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// attest returns a sealed, opened attestation of by about subject.
func attest(t testing.TB, by node, subject peer.ID, kind string, passed bool, created time.Time, uuids ...string) *Attestation {
	t.Helper()
	m := challengeMsg(subject, passed, created)
	m.Kind, m.GpuUuids = kind, uuids
	a, err := OpenAttestation(seal(t, m, by), created)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
