package job

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// ErrCheckpointTooLarge is returned when a checkpoint folder does not fit
// in MaxCheckpointSize.
var ErrCheckpointTooLarge = errors.New("checkpoint too large")

// Checkpoints are tar archives of the job's CHECKPOINT_DIR: regular files
// and folders only, sorted by path, with zero times and owners, so that the
// same content always gives the same archive and hash.
//
// The folder belongs to a running job, which may rename, swap (renameat2
// RENAME_EXCHANGE) and replace anything in it while the node reads it. So
// the node never resolves a path in it by name: it lists each folder
// through its descriptor, lstat's each entry relative to that descriptor,
// and opens every component with O_NOFOLLOW (see beneath.go). What is
// packed:
//
//   - folders and regular files, with their permission bits (no setuid,
//     setgid or sticky bit);
//   - never a symlink, whether to a file or a folder: it is skipped, not
//     followed and not stored as a link;
//   - never a fifo, socket or device node: skipped, never opened for
//     reading (opening a fifo would wait for a writer; a device could be
//     anything);
//   - an entry that changes kind between the listing and its read (a
//     folder swapped for a symlink, a file for a fifo) is skipped, and a
//     file is read from the descriptor that was opened and checked, at most
//     its size at that moment (the job writes checkpoints by rename to
//     avoid torn ones).
//
// Folders nest at most maxCheckpointDepth deep, and listing stops as soon
// as the entries alone could not fit in MaxCheckpointSize, so a job cannot
// make the node walk an unbounded tree.

// maxCheckpointDepth bounds how deep folders nest in a checkpoint: the walk
// holds one descriptor per level.
const maxCheckpointDepth = 64

// tarBlock is the size of a tar header, and the unit file data is padded
// to: every entry costs at least one.
const tarBlock = 512

// cpEntry is one folder or regular file of a checkpoint folder.
type cpEntry struct {
	rel   string // slash-separated, relative to the checkpoint folder
	dir   bool
	perm  uint32
	size  int64
	mtime int64 // ns; for the fingerprint only, archives carry zero times
}

// PackCheckpoint archives dir. It returns nil, zero hash for an empty dir.
// dir itself must not be a symlink; the folders above it are trusted.
func PackCheckpoint(dir string) ([]byte, [32]byte, error) {
	d, err := openDirNoFollow(dir)
	if err != nil {
		return nil, [32]byte{}, fmt.Errorf("checkpoint: %w", err)
	}
	defer d.Close()
	entries, err := listCheckpoint(d)
	if err != nil {
		return nil, [32]byte{}, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	return packCheckpoint(d, entries)
}

// listCheckpoint lists the folder open at root, sorted by path.
func listCheckpoint(root *os.File) ([]cpEntry, error) {
	var (
		out    []cpEntry
		budget = int64(MaxCheckpointSize - 2*tarBlock) // the archive's end marker
	)
	var walk func(d *os.File, prefix string, depth int) error
	walk = func(d *os.File, prefix string, depth int) error {
		for {
			names, err := d.Readdirnames(256)
			if len(names) == 0 {
				if err == nil || errors.Is(err, io.EOF) {
					return nil
				}
				return fmt.Errorf("list %q: %w", prefix, err)
			}
			for _, name := range names {
				e, ok, err := statEntry(d, prefix, name)
				if err != nil {
					return err
				}
				if !ok {
					continue
				}
				budget -= tarBlock + (e.size+tarBlock-1)/tarBlock*tarBlock
				if budget < 0 {
					return fmt.Errorf("%w: more than %d bytes", ErrCheckpointTooLarge, MaxCheckpointSize)
				}
				if e.dir {
					if depth+1 > maxCheckpointDepth {
						return fmt.Errorf("%w: folders nest deeper than %d", ErrCheckpointTooLarge, maxCheckpointDepth)
					}
					sub, err := openDirAt(d, name)
					if err != nil {
						if errors.Is(changedOr(err), errEntryChanged) {
							continue // swapped for a symlink or a file since the lstat
						}
						return err
					}
					err = walk(sub, e.rel+"/", depth+1)
					sub.Close()
					if err != nil {
						return err
					}
				}
				out = append(out, e)
			}
		}
	}
	// A descriptor of its own: a directory's read offset is shared by
	// every copy of one open, and root is listed again at every receipt.
	d, err := openDirAt(root, ".")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	if err := walk(d, "", 0); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rel < out[j].rel })
	return out, nil
}

// statEntry lstat's name in d: ok is false for anything but a folder or a
// regular file, and for an entry gone since the listing.
func statEntry(d *os.File, prefix, name string) (cpEntry, bool, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(int(d.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return cpEntry{}, false, nil
		}
		return cpEntry{}, false, fmt.Errorf("stat %q: %w", prefix+name, err)
	}
	e := cpEntry{rel: prefix + name, perm: uint32(st.Mode) & 0o777, mtime: st.Mtim.Nano()}
	switch uint32(st.Mode) & unix.S_IFMT {
	case unix.S_IFDIR:
		e.dir = true
	case unix.S_IFREG:
		e.size = st.Size
	default:
		return cpEntry{}, false, nil // symlink, fifo, socket, device
	}
	return e, true, nil
}

// packCheckpoint archives the listed entries of the folder open at root.
func packCheckpoint(root *os.File, entries []cpEntry) ([]byte, [32]byte, error) {
	if len(entries) == 0 {
		return nil, [32]byte{}, nil
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		if err := packEntry(tw, &buf, root, e); err != nil {
			return nil, [32]byte{}, fmt.Errorf("checkpoint: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, [32]byte{}, fmt.Errorf("checkpoint: %w", err)
	}
	if buf.Len() > MaxCheckpointSize {
		return nil, [32]byte{}, fmt.Errorf("%w: %d bytes", ErrCheckpointTooLarge, buf.Len())
	}
	return buf.Bytes(), sha256.Sum256(buf.Bytes()), nil
}

// packEntry adds one entry; a file that is no longer a regular file (or
// is gone) is left out.
func packEntry(tw *tar.Writer, buf *bytes.Buffer, root *os.File, e cpEntry) error {
	h := &tar.Header{Name: e.rel, Mode: int64(e.perm), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
	if e.dir {
		h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		return tw.WriteHeader(h)
	}
	f, st, err := openFileBeneath(root, e.rel)
	if errors.Is(err, errEntryChanged) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	h.Typeflag, h.Size, h.Mode = tar.TypeReg, st.Size, int64(uint32(st.Mode)&0o777)
	if int64(buf.Len())+tarBlock+h.Size > MaxCheckpointSize {
		return fmt.Errorf("%w: more than %d bytes", ErrCheckpointTooLarge, MaxCheckpointSize)
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	// A file that grows while it is read is cut at its size above; one
	// that shrinks fails this archive (the next receipt tries again).
	if _, err := io.CopyN(tw, f, h.Size); err != nil {
		return fmt.Errorf("read %s: %w", e.rel, err)
	}
	return nil
}

// UnpackCheckpoint extracts an archive made by PackCheckpoint into dir,
// after checking it against want. Only regular files and folders with
// clean relative names are accepted. dir is made if missing; it must not
// be a symlink, and nothing already in it is overwritten or followed: an
// entry that meets a symlink, or anything already at its name, is an
// error.
func UnpackCheckpoint(archive []byte, want [32]byte, dir string) error {
	if err := checkArchive(archive, want); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	d, err := openDirNoFollow(dir)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer d.Close()
	return unpackCheckpoint(archive, d)
}

func checkArchive(archive []byte, want [32]byte) error {
	if len(archive) > MaxCheckpointSize {
		return fmt.Errorf("%w: %d bytes", ErrCheckpointTooLarge, len(archive))
	}
	if sha256.Sum256(archive) != want {
		return fmt.Errorf("checkpoint: archive does not match its hash")
	}
	return nil
}

// unpackCheckpoint extracts a checked archive into the folder open at root.
func unpackCheckpoint(archive []byte, root *os.File) error {
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("checkpoint: read archive: %w", err)
		}
		name := path.Clean(h.Name)
		if !localPath(name) {
			return fmt.Errorf("checkpoint: entry %q escapes the folder", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			d, err := mkdirAllBeneath(root, name, 0o755)
			if err != nil {
				return fmt.Errorf("checkpoint: %w", err)
			}
			d.Close()
		case tar.TypeReg:
			if err := unpackFile(tr, root, name, h); err != nil {
				return fmt.Errorf("checkpoint: write %s: %w", name, err)
			}
		default:
			return fmt.Errorf("checkpoint: entry %q is not a file or folder", h.Name)
		}
	}
}

func unpackFile(tr *tar.Reader, root *os.File, name string, h *tar.Header) error {
	f, err := createBeneath(root, name, uint32(h.Mode&0o777)|0o600, 0o755)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, io.LimitReader(tr, h.Size))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// fingerprint summarises a listing cheaply (names, kinds, modes, sizes,
// mtimes), so the archive is rebuilt only when something changed.
func fingerprint(entries []cpEntry) [32]byte {
	h := sha256.New()
	for _, e := range entries {
		fmt.Fprintf(h, "%s\x00%t\x00%o\x00%d\x00%d\x00", e.rel, e.dir, e.perm, e.size, e.mtime)
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// writeFileSync writes b to path atomically and durably.
func writeFileSync(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
