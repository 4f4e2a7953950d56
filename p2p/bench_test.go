package p2p

import (
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/p2p/pb"
)

// BenchmarkRawEd25519Verify is the baseline for record validation: one
// Ed25519 signature check of a message the size of a heartbeat.
func BenchmarkRawEd25519Verify(b *testing.B) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	msg := make([]byte, 200)
	sig := ed25519.Sign(priv, msg)
	b.ReportAllocs()
	for b.Loop() {
		if !ed25519.Verify(pub, msg, sig) {
			b.Fatal("verify failed")
		}
	}
}

// BenchmarkHeartbeatValidate is the full heartbeat validation path: size,
// envelope signature, decode, field checks and the replay table.
func BenchmarkHeartbeatValidate(b *testing.B) {
	key := newKey(b)
	now := time.Now()
	v := NewHeartbeatValidator(func() time.Time { return now }, quietLogger())
	msgs := make([][]byte, 1024)
	for i := range msgs {
		msgs[i], _ = SealHeartbeat(&pb.Heartbeat{Seq: uint64(i + 1), TimeMs: now.UnixMilli(), GpusTotal: 8, GpusFree: 4, Software: "gpumesh/0.1.0", Region: "eu-west"}, key)
	}
	id := mustID(b, key)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i%len(msgs) == 0 {
			v = NewHeartbeatValidator(func() time.Time { return now }, quietLogger())
		}
		if _, err := v.Check(id, msgs[i%len(msgs)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkProfileValidate validates an 8-GPU supplier profile as the DHT
// does on every put and get.
func BenchmarkProfileValidate(b *testing.B) {
	key := newKey(b)
	now := time.Now()
	var gpus []*pb.GPU
	for i := range 8 {
		gpus = append(gpus, testGPU("h100-sxm", "GPU-"+string(rune('a'+i))))
	}
	data, err := SealProfile(testProfile(1, now, time.Hour, gpus...), key)
	if err != nil {
		b.Fatal(err)
	}
	v := ProfileValidator{Now: func() time.Time { return now }}
	k := ProfileKey(mustID(b, key))
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Validate(k, data); err != nil {
			b.Fatal(err)
		}
	}
}
