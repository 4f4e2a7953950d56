package challenge

import (
	"context"
	"encoding/hex"
	"fmt"
	"testing"
)

// TestProtocolVector computes the test vector of docs/PROTOCOL.md §19.9
// (challenge protocol v2) and compares it with the figures printed there.
// A change here is a change of the protocol.
func TestProtocolVector(t *testing.T) {
	ctx := context.Background()
	var seed [32]byte
	for i := range seed {
		seed[i] = byte(i)
	}
	a, b := Derive(seed, 8)
	pr := NewCPUProver(CPUOptions{Workers: 1})
	roots, err := pr.Commit(ctx, [][32]byte{seed}, Params{N: 8, T: 2, K: 2})
	if err != nil {
		t.Fatal(err)
	}
	res, _ := pr.result(0)
	open, err := pr.Open(ctx, 0, []int{0, 7})
	if err != nil {
		t.Fatal(err)
	}
	r := DrawVector(seed, 8)
	s, _ := pr.Sweep(ctx, 0, r)
	rows, _ := DrawRows(seed, 8, 2)

	// The memory proof: 2 buffers of 256 bytes, 64-byte windows, 2
	// rounds, from the same seed as mem_seed and σ_0.
	mp := MemParams{Buffers: 2, BufferBytes: 256, WindowBytes: 64, Rounds: 2, Checks: 1}
	buf := make([]byte, 64)
	FillMemBuffer(buf, seed, 0)
	offs, rhos := make([]int, 2), make([]uint64, 2)
	memOffsets(offs, seed, 0, mp)
	memRhos(rhos, seed, 0)
	full := make([]byte, mp.BufferBytes)
	FillMemBuffer(full, seed, 0)
	fold := MemFold(full[offs[0]:offs[0]+mp.WindowBytes], rhos[0])
	if want := foldBig(full[offs[0]:offs[0]+mp.WindowBytes], rhos[0]); fold != want {
		t.Errorf("F_{0,0} = %d, the definition gives %d", fold, want)
	}
	m, err := NewMemProver(ctx, seed, mp, 1)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := m.Respond(ctx, seed)
	if err != nil {
		t.Fatal(err)
	}

	got := []struct{ name, value string }{
		{"A[0]", hex.EncodeToString(a.Row(0))},
		{"A[1]", hex.EncodeToString(a.Row(1))},
		{"B[0]", hex.EncodeToString(b.Row(0))},
		{"X_T[0]", hex.EncodeToString(res.x.Row(0))},
		{"X_T[7]", hex.EncodeToString(res.x.Row(7))},
		{"root", hex.EncodeToString(roots[0][:])},
		{"proof of row 0", fmt.Sprintf("%d hashes, the first %x", len(open[0].Proof), open[0].Proof[0])},
		{"proof of row 7", fmt.Sprintf("%d hashes, the first %x", len(open[1].Proof), open[1].Proof[0])},
		{"DrawVector(seed, 8)[0..1]", fmt.Sprintf("%d, %d", r[0], r[1])},
		{"s_0 with that r", fmt.Sprint(s[0])},
		{"DrawRows(seed, 8, 2)", fmt.Sprint(rows)},
		{"buffer 0[0..63]", hex.EncodeToString(buf)},
		{"off_{0,0}, off_{0,1}", fmt.Sprintf("%d, %d", offs[0], offs[1])},
		{"ρ_{0,0}, ρ_{0,1}", fmt.Sprintf("%d, %d", rhos[0], rhos[1])},
		{"F_{0,0}", fmt.Sprint(fold)},
		{"d_{0,0}, d_{0,1}", fmt.Sprintf("%016x, %016x", mem.Digests[0][0], mem.Digests[0][1])},
		{"d_{1,0}, d_{1,1}", fmt.Sprintf("%016x, %016x", mem.Digests[1][0], mem.Digests[1][1])},
	}
	for _, g := range got {
		if want := protocolVector[g.name]; g.value != want {
			t.Errorf("%-26s %s, PROTOCOL §19.9 says %s", g.name, g.value, want)
		}
	}
	if t.Failed() || testing.Verbose() {
		for _, g := range got {
			t.Logf("%-26s %s", g.name, g.value)
		}
	}
}

// protocolVector is docs/PROTOCOL.md §19.9.
var protocolVector = map[string]string{
	"A[0]":                      "cda79d90ffc56d07",
	"A[1]":                      "0d8cb2796c4034cc",
	"B[0]":                      "87cefd7a3b65c011",
	"X_T[0]":                    "5562f539e6414845",
	"X_T[7]":                    "43a3d136de5131bf",
	"root":                      "ce821d604635f93791a2f13c11ffd6d05eba26b61fbc4b86426d41b61b4db02f",
	"proof of row 0":            "3 hashes, the first b9feca22d93b8ac2f0ef9315563f88b88141f09f598fb97ca53b2cd1eb8e62c3",
	"proof of row 7":            "3 hashes, the first 05ff87e2ed5f559feea4fb7f980de8c9ff759959f3925d582e710e54477fcf02",
	"DrawVector(seed, 8)[0..1]": "1322548185227282256, 1914434834942742219",
	"s_0 with that r":           "2110889476927910648",
	"DrawRows(seed, 8, 2)":      "[0 3]",
	"buffer 0[0..63]":           "11b84504a06ddf13ed34895d05f88cbc2b44bf2ca961bbc1417a4ebfe99f2e7199602421bd1fd7bbdd07fe11f5f72da25f55036cc9247e1a31f4027316875829",
	"off_{0,0}, off_{0,1}":      "128, 64",
	"ρ_{0,0}, ρ_{0,1}":          "1188206032978790190, 1422364243422944313",
	"F_{0,0}":                   "1449504605143264038",
	"d_{0,0}, d_{0,1}":          "e84e08766317c2b6, 37a31c143a78dae2",
	"d_{1,0}, d_{1,1}":          "d89eb00aca02ea84, 051d61838620b4ea",
}
