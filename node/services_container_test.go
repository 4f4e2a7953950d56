//go:build linux

package node

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/node/runtime/runtimetest"
)

// TestServiceInContainer: a renter runs an HTTP server in a docker or
// podman container that declares port 8000; the supplier gives the
// container a job network of its own (not the engine's), so it accepts
// the service, and requests reach the server through the renter's local
// address, a tunnel and the container's namespace.
func TestServiceInContainer(t *testing.T) {
	for _, engine := range []string{"docker", "podman"} {
		t.Run(engine, func(t *testing.T) {
			image := runtimetest.Engine(t, engine) // before the namespace: skips without one
			if !inOwnNetns(t) {
				return
			}
			jn := startJobNet(t, 3*time.Second, func(c *Config) {
				c.JobNetwork, c.Runtimes = true, []string{"process", engine}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			v, err := jn.renter.Jobs().Submit(ctx, echoService(t, func(r *job.Request) {
				r.Spec.Runtime, r.Spec.Image = engine, image
				r.Spec.Argv = []string{"httpd", "-f", "-p", "8000", "-h", "/work"}
				r.Spec.Files = []*pb.File{{Path: "index.html", Data: []byte("hello from a " + engine + " container\n")}}
			}))
			if err != nil {
				t.Fatalf("submit: %v", err)
			}
			t.Cleanup(func() {
				if t.Failed() {
					j, err := jn.renter.Jobs().Job(v.JobID)
					t.Logf("job: %+v %v", j, err)
					var logs strings.Builder
					lctx, lcancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer lcancel()
					_, _ = jn.renter.Jobs().Logs(lctx, v.JobID, 0, false, &logs)
					t.Logf("job logs:\n%s", logs.String())
				}
			})
			client := &http.Client{Timeout: 10 * time.Second}
			var got string
			eventually(t, 60*time.Second, "the container's server to answer through the forward", func() bool {
				resp, err := client.Get("http://" + v.Publish[0].Listen + "/")
				if err != nil {
					return false
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				got = string(b)
				return resp.StatusCode == http.StatusOK
			})
			if !strings.Contains(got, "hello from a "+engine+" container") {
				t.Fatalf("the forward answered %q", got)
			}
		})
	}
}
