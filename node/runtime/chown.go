package runtime

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// chownTree hands dir and everything below it to u. dir itself must not
// be a symlink; the folders above it are the caller's to trust.
//
// The walk goes through descriptors, never through paths: each folder is
// opened with O_NOFOLLOW from its parent's descriptor, listed and
// fchown'd through its own, and every other entry is changed with
// fchownat(AT_SYMLINK_NOFOLLOW). So a symlink is changed itself and never
// followed, and a folder swapped for a symlink during the walk (by a
// process of the job's user that can reach it) cannot lead a root node to
// hand a file outside dir, such as /etc/passwd, to the job's user.
func chownTree(dir string, u jobUser) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("chown %s to %d:%d: %w", dir, u.uid, u.gid, err)
	}
	d := os.NewFile(uintptr(fd), dir)
	defer d.Close()
	return chownDir(d, dir, u)
}

// chownDir changes the open folder d (at path, for errors) and what is in
// it.
func chownDir(d *os.File, path string, u jobUser) error {
	fail := func(p string, err error) error {
		return fmt.Errorf("chown %s to %d:%d: %w", p, u.uid, u.gid, err)
	}
	fd := int(d.Fd())
	if err := unix.Fchown(fd, u.uid, u.gid); err != nil {
		return fail(path, err)
	}
	for {
		names, err := d.Readdirnames(256)
		if len(names) == 0 {
			if err == nil || errors.Is(err, io.EOF) {
				return nil
			}
			return fail(path, err)
		}
		for _, name := range names {
			p := path + "/" + name
			sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err == nil {
				sd := os.NewFile(uintptr(sub), p)
				err = chownDir(sd, p, u)
				sd.Close()
				if err != nil {
					return err
				}
				continue
			}
			// Not a folder (ENOTDIR), a symlink (ELOOP), gone (ENOENT), or
			// a folder we may not read: change the entry itself.
			if err := unix.Fchownat(fd, name, u.uid, u.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil && !errors.Is(err, unix.ENOENT) {
				return fail(p, err)
			}
		}
	}
}
