package verify

import "testing"

func TestTFLOPS(t *testing.T) {
	for _, tt := range []struct {
		slug string
		want int
	}{
		{"h100-sxm", 989}, // BF16, rounded down
		{"a10", 125},
		{"t4", 8}, // no BF16 tensor cores: FP32
		{"no-such-gpu", 0},
	} {
		if got := TFLOPS(tt.slug); got != tt.want {
			t.Errorf("TFLOPS(%q) = %d, want %d", tt.slug, got, tt.want)
		}
	}
}
