package main

import "testing"

func TestParseRingcheck(t *testing.T) {
	out := "attempt 1 rank 0 of 3 on rank0 (100.64.0.1, gm0) starts at step 0\nstep 1 all-reduce ok (ab)\n" +
		`ringcheck {"ranks": 3, "bytes": 8388608, "steps": 6, "attempt": 1, "started_at_step": 0, "busbw_MBps": 412.5, "rtt_ms": 0.061}` + "\n"
	r, err := parseRingcheck([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if r.BusBW != 412.5 || r.RTTms != 0.061 || r.Steps != 6 {
		t.Errorf("parsed %+v", r)
	}
	for name, bad := range map[string]string{
		"no result":    "step 1 all-reduce ok (ab)\n",
		"not JSON":     "ringcheck {busbw\n",
		"no bandwidth": `ringcheck {"busbw_MBps": 0, "rtt_ms": 1}` + "\n",
	} {
		if _, err := parseRingcheck([]byte(bad)); err == nil {
			t.Errorf("%s: parsed %q", name, bad)
		}
	}
}
