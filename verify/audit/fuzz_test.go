package audit

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/verify/pb"
)

// FuzzChallengeRequest feeds arbitrary bytes to what a prover does with a
// request before any work: decode it and check it against its own GPUs
// and profile. Nothing may panic, and nothing but the exact sizes and GPU
// set of its profile may be accepted.
func FuzzChallengeRequest(f *testing.F) {
	good, _ := proto.Marshal(&pb.ChallengeRequest{Model: "t4", GpuUuids: []string{"GPU-sim-a", "GPU-sim-b"},
		Seeds: [][]byte{make([]byte, 32), make([]byte, 32)}, N: 256, T: 128, K: 66, Simulated: true, Scale: 128})
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{0x12, 0x02, 't', '4', 0x28, 0xff, 0xff, 0x03})
	p := &Prover{cfg: ProverConfig{GPUs: twoT4, Scale: 128}}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req pb.ChallengeRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		sz, err := p.expect(&req)
		if err != nil {
			return
		}
		if params := sz.params; params.N != 256 || int(req.N) != params.N || len(req.Seeds) != 2 || req.Model != "t4" {
			t.Fatalf("accepted a request for other work: %+v", &req)
		}
	})
}

// FuzzProverAnswers decodes arbitrary bytes as a prover's openings and
// memory digests, as a challenger does; nothing may panic.
func FuzzProverAnswers(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x04, 0x0a, 0x02, 0x08, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		var o pb.OpenResponse
		if proto.Unmarshal(b, &o) == nil {
			for _, g := range o.Gpus {
				if os, err := decodeOpenings(g); err == nil {
					for _, x := range os {
						if len(x.Proof) > 16 {
							t.Fatal("over-long proof accepted")
						}
					}
				}
			}
		}
		var m pb.MemResponse
		if proto.Unmarshal(b, &m) == nil {
			for _, g := range m.Gpus {
				_ = decodeMem(g)
			}
		}
	})
}
