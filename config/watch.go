package config

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watchDebounce is how long Watch waits after the last change in a burst
// before it reloads: editors write a file in several steps.
var watchDebounce = 100 * time.Millisecond

// Watch reloads the configuration file at path whenever it changes and
// calls onChange with the result of Load: the new, validated Config and a
// nil error, or a nil Config and the error (wrapping ErrInvalid, or the
// read error if the file is gone). Whether to keep the old configuration in
// force on error is the caller's choice. Watch does not call onChange for
// the file as it is when Watch starts.
//
// Watch follows the file's directory, not the file, so it sees an editor
// or a deployment tool replacing the file by renaming a new one over it,
// and it merges a burst of changes into one reload. onChange runs on
// Watch's goroutine, one call at a time.
//
// Watch blocks until ctx ends, then returns nil, having stopped everything
// it started. It returns an error sooner only if the directory cannot be
// watched or the watcher fails.
func Watch(ctx context.Context, path string, onChange func(*Config, error)) error {
	if _, err := formatOf(path); err != nil {
		return err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("config: watch %s: %w", path, err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("config: watch %s: %w", path, err)
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(abs)); err != nil {
		return fmt.Errorf("config: watch %s: %w", path, err)
	}

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return fmt.Errorf("config: watch %s: watcher closed", path)
			}
			if filepath.Clean(ev.Name) != abs || ev.Op == fsnotify.Chmod {
				continue
			}
			timer.Reset(watchDebounce)
		case err, ok := <-w.Errors:
			if !ok {
				return fmt.Errorf("config: watch %s: watcher closed", path)
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				timer.Reset(watchDebounce) // events were dropped: reload to be sure
				continue
			}
			return fmt.Errorf("config: watch %s: %w", path, err)
		case <-timer.C:
			cfg, err := Load(abs)
			if ctx.Err() != nil {
				return nil
			}
			onChange(cfg, err)
		}
	}
}
