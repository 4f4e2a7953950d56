package cuda

import (
	"errors"
	"fmt"
	"testing"
)

func TestError(t *testing.T) {
	tests := []struct {
		err  *Error
		text string
		oom  bool
	}{
		{&Error{Call: "cuMemAlloc_v2", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY", Desc: "out of memory"},
			"cuda: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory", true},
		{&Error{Call: "cuLaunchKernel", Code: 719, Name: "CUDA_ERROR_LAUNCH_FAILED"},
			"cuda: cuLaunchKernel: CUDA_ERROR_LAUNCH_FAILED (719)", false},
		{&Error{Call: "cuInit", Code: 12345}, "cuda: cuInit: unknown CUresult (12345)", false},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.text {
			t.Errorf("Error() = %q, want %q", got, tt.text)
		}
		wrapped := fmt.Errorf("device 0: %w", tt.err)
		if got := errors.Is(wrapped, ErrOutOfMemory); got != tt.oom {
			t.Errorf("errors.Is(%v, ErrOutOfMemory) = %v, want %v", tt.err, got, tt.oom)
		}
	}
}

func TestVersionAndUUID(t *testing.T) {
	for v, want := range map[int]string{11040: "11.4", 12080: "12.8", 13000: "13.0"} {
		if got := versionString(v); got != want {
			t.Errorf("versionString(%d) = %q, want %q", v, got, want)
		}
	}
	b := []byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	if got, want := formatUUID(b), "GPU-deadbeef-0102-0304-0506-0708090a0b0c"; got != want {
		t.Errorf("formatUUID = %q, want %q", got, want)
	}
	if got := formatUUID(b[:8]); got != "" {
		t.Errorf("formatUUID of 8 bytes = %q", got)
	}
}
