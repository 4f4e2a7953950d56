package job

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// The node reads and writes folders that a job controls (its working and
// checkpoint folders) while the job may be renaming things in them. A path
// resolved by name can then walk through a symlink the job planted, out to
// the node's key. So every path below such a folder is resolved here one
// component at a time from a descriptor, each component opened with
// O_NOFOLLOW: no symlink is ever followed, and ".." never appears (names
// are checked by localPath before they get here, or come from the
// directory itself).

// errEntryChanged says an entry was not (any more) what it was listed as: a
// symlink, a special file, or gone. Packing skips such entries.
var errEntryChanged = errors.New("entry changed while it was read")

// openDirNoFollow opens the folder at path, refusing a symlink in its last
// component. The folders above it are the caller's to trust.
func openDirNoFollow(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open folder", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// openDirAt opens the folder name (one component) in dir without
// following a symlink.
func openDirAt(dir *os.File, name string) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open folder", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// walkDirs opens the folder rel (slash-separated, local) below root one
// component at a time, never following a symlink. With perm != 0 missing
// folders are made with that mode.
func walkDirs(root *os.File, rel string, perm uint32) (*os.File, error) {
	cur, err := openDirAt(root, ".")
	if err != nil {
		return nil, err
	}
	if rel == "" || rel == "." {
		return cur, nil
	}
	for _, name := range strings.Split(rel, "/") {
		if perm != 0 {
			if err := unix.Mkdirat(int(cur.Fd()), name, perm); err != nil && !errors.Is(err, unix.EEXIST) {
				cur.Close()
				return nil, &os.PathError{Op: "make folder", Path: rel, Err: err}
			}
		}
		next, err := openDirAt(cur, name)
		cur.Close()
		if err != nil {
			return nil, &os.PathError{Op: "open folder", Path: rel, Err: pathErrno(err)}
		}
		cur = next
	}
	return cur, nil
}

// mkdirAllBeneath makes the folder rel below root, and the folders above
// it, as needed; a symlink on the way is an error (ELOOP), never followed.
func mkdirAllBeneath(root *os.File, rel string, perm uint32) (*os.File, error) {
	return walkDirs(root, rel, perm)
}

// createBeneath creates the regular file rel below root, making the
// folders above it as needed (mode dirPerm). Anything already at rel, a
// symlink included, is an error: nothing is overwritten or followed.
func createBeneath(root *os.File, rel string, mode, dirPerm uint32) (*os.File, error) {
	parent, base := splitRel(rel)
	d, err := walkDirs(root, parent, dirPerm)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	fd, err := unix.Openat(int(d.Fd()), base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return nil, &os.PathError{Op: "create", Path: rel, Err: err}
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// writeBeneath writes data to the new regular file rel below root.
func writeBeneath(root *os.File, rel string, data []byte, mode, dirPerm uint32) error {
	f, err := createBeneath(root, rel, mode, dirPerm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// openFileBeneath opens the regular file rel below root for reading. It
// fails with errEntryChanged when any component is a symlink, a folder on
// the way is not one, or the file is anything but a regular file: a fifo
// or a device is never read (O_NONBLOCK keeps the open of a fifo from
// waiting for a writer, O_NOCTTY keeps a terminal from becoming ours, and
// the descriptor's own type is checked before a byte is read).
func openFileBeneath(root *os.File, rel string) (*os.File, unix.Stat_t, error) {
	var st unix.Stat_t
	parent, base := splitRel(rel)
	d, err := walkDirs(root, parent, 0)
	if err != nil {
		return nil, st, changedOr(err)
	}
	defer d.Close()
	fd, err := unix.Openat(int(d.Fd()), base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, st, changedOr(&os.PathError{Op: "open", Path: rel, Err: err})
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, st, &os.PathError{Op: "stat", Path: rel, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, st, fmt.Errorf("%s: %w", rel, errEntryChanged)
	}
	return os.NewFile(uintptr(fd), rel), st, nil
}

// changedOr maps the errors of a path that a job changed under us (a
// symlink where a folder or file was, a file where a folder was, gone) to
// errEntryChanged.
func changedOr(err error) error {
	for _, e := range []error{unix.ELOOP, unix.ENOTDIR, unix.ENOENT, unix.ENXIO, unix.EMLINK} {
		if errors.Is(err, e) {
			return fmt.Errorf("%w: %w", errEntryChanged, err)
		}
	}
	return err
}

// pathErrno unwraps a PathError to its errno, so a caller's PathError
// names the whole path once.
func pathErrno(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// splitRel splits a slash-separated relative path into its folder ("" for
// none) and last name.
func splitRel(rel string) (string, string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return "", rel
	}
	return rel[:i], rel[i+1:]
}
