package runtime

import (
	"slices"
	"testing"
)

// TestOutputEnv: OUTPUT_DIR is the output folder as the job sees it, its
// work dir where the runtime puts it; the renter cannot set it, and a
// folder outside the work dir (or none) exports nothing.
func TestOutputEnv(t *testing.T) {
	s := Spec{JobID: "ab", Attempt: 1, WorkDir: "/d/work", OutputDir: "/d/work/.output", Env: []string{"OUTPUT_DIR=/evil"}}
	if env := containerEnv("docker", GPUModeToolkit, s); !slices.Contains(env, "OUTPUT_DIR=/work/.output") || slices.Contains(env, "OUTPUT_DIR=/evil") {
		t.Errorf("container env %q: want OUTPUT_DIR=/work/.output", env)
	}
	if got := outputEnv("/real/work", s); len(got) != 1 || got[0] != [2]string{"OUTPUT_DIR", "/real/work/.output"} {
		t.Errorf("process env: %q", got)
	}
	for _, out := range []string{"", "/d/other", "/d/work/../x"} {
		s.OutputDir = out
		if got := outputEnv("/work", s); got != nil {
			t.Errorf("output dir %q: exported %q", out, got)
		}
	}
}
