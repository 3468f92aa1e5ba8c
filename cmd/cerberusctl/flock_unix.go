//go:build unix

package main

import (
	"os"
	"syscall"
)

// withFlock runs fn on the file at path while holding an flock on it.
func withFlock(path string, exclusive bool, fn func(*os.File) error) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		return err
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return fn(f)
}
