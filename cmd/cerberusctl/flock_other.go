//go:build !unix

package main

import (
	"errors"
	"os"
)

func withFlock(string, bool, func(*os.File) error) error {
	return errors.New("-procs needs a Unix system (flock)")
}
