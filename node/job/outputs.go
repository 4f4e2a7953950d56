package job

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/p2p"
)

// A job's outputs: every attempt gets $OUTPUT_DIR, a folder of its own
// below its working dir (work/.output on the supplier). When an attempt
// succeeds, the supplier packs that folder with the checkpoint archive
// code (regular files and folders only, no symlink followed, at most
// MaxOutputSize and the job's disk limit), announces it (an Outputs
// frame before the final receipt, and again on every attach), and serves
// it on CheckpointProtocol (CheckpointRequest.outputs) until the attempt
// is settled (then for OutputKeep more) or OutputRetention passes. The
// renter's node pulls it on the final receipt of a succeeded attempt,
// before it states the attempt, checks it against the announcement and
// unpacks it into DATA/outputs/<job id>, through a fresh folder
// renamed into place once whole: exactly once, and nothing at all when
// the archive is refused.

// outputRel is the output folder below the attempt's working dir.
const outputRel = ".output"

// Output limits and retention.
const (
	// MaxOutputSize bounds an outputs archive (the checkpoint bound).
	MaxOutputSize = MaxCheckpointSize
	// OutputRetention is how long a supplier keeps an unsettled attempt's
	// outputs for its renter.
	OutputRetention = time.Hour
	// OutputKeep is how long a supplier keeps outputs after settlement.
	OutputKeep = time.Minute
)

// packOutputs archives the succeeded attempt's output folder, before its
// final receipt. A folder that cannot be packed (too large, unreadable)
// is logged and left out: the attempt still succeeded.
func (r *run) packOutputs() {
	work, err := openDirNoFollow(filepath.Join(r.dir, "work"))
	if err != nil {
		r.logger.Warn("outputs not packed", "err", err)
		return
	}
	defer work.Close()
	out, err := openDirAt(work, outputRel)
	if err != nil {
		r.logger.Warn("outputs not packed", "err", err)
		return
	}
	defer out.Close()
	entries, err := listCheckpoint(out)
	var archive []byte
	var hash [32]byte
	if err == nil {
		archive, hash, err = packCheckpoint(out, entries)
	}
	if err == nil && r.disk > 0 && int64(len(archive)) > r.disk {
		err = fmt.Errorf("%w: %d bytes, over the job's disk limit %d", ErrCheckpointTooLarge, len(archive), r.disk)
	}
	if err != nil {
		r.logger.Warn("outputs not packed", "err", err)
		return
	}
	if len(archive) == 0 {
		return
	}
	r.mu.Lock()
	r.outArchive, r.outHash = archive, hash
	sess := r.sess
	r.mu.Unlock()
	r.logger.Info("outputs packed", "bytes", len(archive))
	if sess != nil {
		sess.send(r.outputsFrame())
	}
	r.dropOutputs(OutputRetention)
}

// outputsFrame announces the attempt's outputs; nil when it has none.
func (r *run) outputsFrame() *pb.ServerFrame {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.outArchive) == 0 {
		return nil
	}
	return &pb.ServerFrame{Body: &pb.ServerFrame_Outputs{Outputs: &pb.Outputs{
		Attempt: r.attempt, Hash: r.outHash[:], Size: uint64(len(r.outArchive)),
	}}}
}

// outputs is the archive the attempt announced, if any.
func (r *run) outputs() ([]byte, [32]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outArchive, r.outHash
}

// dropOutputs forgets the outputs archive after d.
func (r *run) dropOutputs(d time.Duration) {
	time.AfterFunc(d, func() {
		r.mu.Lock()
		r.outArchive = nil
		r.mu.Unlock()
	})
}

// outputsDir is where a job's outputs are kept on the renter's node: a
// task's in its group's folder.
func (c *Controller) outputsDir(r *jobRecord) string {
	if r.TaskOf != "" {
		return filepath.Join(c.cfg.DataDir, "outputs", r.TaskOf, strconv.Itoa(r.Task))
	}
	return filepath.Join(c.cfg.DataDir, "outputs", r.ID)
}

// takeOutputs pulls the announced outputs of a succeeded attempt and
// unpacks them into the job's outputs folder, unless it holds them
// already. A refused archive leaves nothing behind.
func (c *Controller) takeOutputs(ctx context.Context, js *jobState, ac *attemptCtx, ann *pb.Outputs) error {
	js.mu.Lock()
	dst := c.outputsDir(&js.rec)
	js.mu.Unlock()
	if _, err := os.Lstat(dst); err == nil {
		return nil // taken already: exactly once
	}
	if ann.Attempt != ac.attempt || len(ann.Hash) != 32 || ann.Size == 0 || ann.Size > MaxOutputSize {
		return fmt.Errorf("outputs announcement: attempt %d, %d-byte hash, size %d", ann.Attempt, len(ann.Hash), ann.Size)
	}
	archive, err := c.fetchArchive(ctx, ac, &pb.CheckpointRequest{LeaseId: ac.lease.ID[:], Attempt: ac.attempt, Outputs: true}, MaxOutputSize)
	if err != nil {
		return fmt.Errorf("%w: %w", errOutputsUnfetched, err)
	}
	var want [32]byte
	copy(want[:], ann.Hash)
	if uint64(len(archive)) != ann.Size || sha256.Sum256(archive) != want {
		return errors.New("outputs archive does not match its announcement")
	}
	if err := unpackFresh(archive, want, dst); err != nil {
		return err
	}
	js.mu.Lock()
	js.rec.Outputs = hex.EncodeToString(ann.Hash)
	err = c.save(js)
	js.mu.Unlock()
	c.log.Info("outputs taken", "job", js.rec.ID[:8], "attempt", ac.attempt, "bytes", len(archive))
	return err
}

// errOutputsUnfetched: the supplier of a succeeded attempt could not be
// asked for its outputs (it died, say, right after its final receipt).
var errOutputsUnfetched = errors.New("outputs could not be fetched")

// takeOutputsOrNote takes the outputs, or logs and records why not. It
// reports whether they could not even be fetched: then the attempt's
// work is lost to the renter, whatever the supplier billed, and it is
// run again elsewhere (the caller ends the attempt interrupted), where a
// refused archive is the supplier's fault and stays refused.
func (c *Controller) takeOutputsOrNote(ctx context.Context, js *jobState, ac *attemptCtx, ann *pb.Outputs) (unfetched bool) {
	err := c.takeOutputs(ctx, js, ac, ann)
	if err == nil {
		return false
	}
	if errors.Is(err, errOutputsUnfetched) {
		c.log.Warn("outputs of a succeeded attempt could not be fetched; it runs again", "job", js.rec.ID[:8], "attempt", ac.attempt, "err", err)
		return true
	}
	c.log.Warn("outputs not taken", "job", js.rec.ID[:8], "attempt", ac.attempt, "err", err)
	js.mu.Lock()
	js.rec.OutputsRefused = err.Error()
	_ = c.save(js)
	js.mu.Unlock()
	return false
}

// unpackFresh unpacks a checked archive into dst, which must not exist,
// through a fresh sibling folder renamed into place once whole; on any
// error nothing is left behind.
func unpackFresh(archive []byte, want [32]byte, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fmt.Errorf("outputs: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dst), ".outputs-")
	if err != nil {
		return fmt.Errorf("outputs: %w", err)
	}
	if err := UnpackCheckpoint(archive, want, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("outputs refused: %w", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("outputs: %w", err)
	}
	return nil
}

// fetchArchive asks the attempt's supplier for an archive on
// CheckpointProtocol and reads it, at most max bytes, checked against
// the answer's header.
func (c *Controller) fetchArchive(ctx context.Context, ac *attemptCtx, req *pb.CheckpointRequest, max int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st, err := c.cfg.Net.NewStream(ctx, ac.lease.Supplier, CheckpointProtocol)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(time.Minute))
	if err := p2p.WriteMsg(st, req); err != nil {
		return nil, err
	}
	var h pb.CheckpointHeader
	if err := p2p.ReadMsg(st, 1024, &h); err != nil {
		return nil, err
	}
	switch {
	case h.Refused != "":
		return nil, &refusal{h.Refused}
	case h.Unchanged:
		return nil, nil
	case h.Size > uint64(max) || len(h.Hash) != 32:
		return nil, fmt.Errorf("archive header: size %d, hash %d bytes", h.Size, len(h.Hash))
	}
	archive, err := p2p.ReadRaw(st, max)
	if err != nil {
		return nil, err
	}
	if sum := sha256.Sum256(archive); string(sum[:]) != string(h.Hash) || uint64(len(archive)) != h.Size {
		return nil, errors.New("archive does not match its header")
	}
	return archive, nil
}
