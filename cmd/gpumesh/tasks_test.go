package main

import (
	"testing"

	"github.com/gpumesh/gpumesh/node/job"
)

// TestTaskProgress: a group's progress reads done/running/failed of N,
// with a bar of done (#) and failed (x) tasks on a terminal.
func TestTaskProgress(t *testing.T) {
	v := job.View{TaskCount: 20, Done: 10, Running: 4, Failed: 1, Pending: 5}
	if got, want := taskProgress(v, false), "10/4/1 of 20"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
	if got, want := taskProgress(v, true), "[##########x.........] 10/4/1 of 20"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
	all := job.View{TaskCount: 3, Done: 3}
	if got, want := taskProgress(all, true), "[####################] 3/0/0 of 3"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}
