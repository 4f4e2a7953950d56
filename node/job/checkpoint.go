package job

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// ErrCheckpointTooLarge is returned when a checkpoint folder does not fit
// in MaxCheckpointSize.
var ErrCheckpointTooLarge = errors.New("checkpoint too large")

// Checkpoints are tar archives of the job's CHECKPOINT_DIR: regular files
// and folders only, sorted by path, with zero times and owners, so that the
// same content always gives the same archive and hash.

// PackCheckpoint archives dir. It returns nil, zero hash for an empty dir.
func PackCheckpoint(dir string) ([]byte, [32]byte, error) {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir && (d.IsDir() || d.Type().IsRegular()) {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return nil, [32]byte{}, fmt.Errorf("checkpoint: walk %s: %w", dir, err)
	}
	if len(paths) == 0 {
		return nil, [32]byte{}, nil
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return nil, [32]byte{}, fmt.Errorf("checkpoint: %w", err)
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: int64(fi.Mode().Perm()), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if fi.IsDir() {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
			if err := tw.WriteHeader(h); err != nil {
				return nil, [32]byte{}, fmt.Errorf("checkpoint: %w", err)
			}
			continue
		}
		h.Typeflag, h.Size = tar.TypeReg, fi.Size()
		if buf.Len()+int(h.Size) > MaxCheckpointSize {
			return nil, [32]byte{}, fmt.Errorf("%w: %s holds more than %d bytes", ErrCheckpointTooLarge, dir, MaxCheckpointSize)
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, [32]byte{}, fmt.Errorf("checkpoint: %w", err)
		}
		f, err := os.Open(p)
		if err != nil {
			return nil, [32]byte{}, fmt.Errorf("checkpoint: %w", err)
		}
		// A file that grows while being read is cut at its size above;
		// the job writes checkpoints by rename to avoid torn ones.
		_, err = io.Copy(tw, io.LimitReader(f, h.Size))
		f.Close()
		if err != nil {
			return nil, [32]byte{}, fmt.Errorf("checkpoint: read %s: %w", rel, err)
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

// UnpackCheckpoint extracts an archive made by PackCheckpoint into dir,
// after checking it against want. Only regular files and folders with
// clean relative names are accepted.
func UnpackCheckpoint(archive []byte, want [32]byte, dir string) error {
	if len(archive) > MaxCheckpointSize {
		return fmt.Errorf("%w: %d bytes", ErrCheckpointTooLarge, len(archive))
	}
	if sha256.Sum256(archive) != want {
		return fmt.Errorf("checkpoint: archive does not match its hash")
	}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("checkpoint: read archive: %w", err)
		}
		name := filepath.Clean(filepath.FromSlash(h.Name))
		if !localPath(filepath.ToSlash(name)) {
			return fmt.Errorf("checkpoint: entry %q escapes the folder", h.Name)
		}
		dst := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return fmt.Errorf("checkpoint: %w", err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return fmt.Errorf("checkpoint: %w", err)
			}
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode&0o777)|0o600)
			if err != nil {
				return fmt.Errorf("checkpoint: %w", err)
			}
			_, err = io.Copy(f, io.LimitReader(tr, h.Size))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("checkpoint: write %s: %w", name, err)
			}
		default:
			return fmt.Errorf("checkpoint: entry %q is not a file or folder", h.Name)
		}
	}
}

// fingerprint summarises a folder cheaply (names, sizes, mtimes), so the
// archive is rebuilt only when something changed.
func fingerprint(dir string) [32]byte {
	h := sha256.New()
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			fmt.Fprintf(h, "%s\x00%d\x00%d\x00", p, fi.Size(), fi.ModTime().UnixNano())
		}
		return nil
	})
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
