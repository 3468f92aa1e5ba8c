package kit

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestBackground(t *testing.T) {
	var b Background
	release := make(chan struct{})
	ran := make(chan struct{})
	returned := make(chan struct{})
	go func() {
		b.Run(func() { <-release; close(ran) })
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second): // a hang guard, not a speed limit
		t.Fatal("Run waited for its clean-up")
	}
	waited := make(chan struct{})
	go func() { b.Wait(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("Wait returned while a clean-up was still running")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-waited
	select {
	case <-ran:
	default:
		t.Fatal("Wait returned before the clean-up finished")
	}
	done := false
	b.Run(func() { done = true }) // after Wait: on the caller's goroutine
	if !done {
		t.Fatal("a Run after Wait did not run at once")
	}
}

// TestBackgroundRunUpTo: RunUpTo returns once a quick clean-up has
// finished, and returns without a slow one, which goes on in the
// background until Wait.
func TestBackgroundRunUpTo(t *testing.T) {
	var b Background
	var quick atomic.Bool
	b.RunUpTo(time.Hour, func() { quick.Store(true) })
	if !quick.Load() {
		t.Fatal("RunUpTo returned before a quick clean-up finished")
	}
	release := make(chan struct{})
	var slow atomic.Bool
	returned := make(chan struct{})
	go func() {
		b.RunUpTo(time.Millisecond, func() { <-release; slow.Store(true) })
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second): // a hang guard, not a speed limit
		t.Fatal("RunUpTo waited past its bound for a blocked clean-up")
	}
	if slow.Load() {
		t.Fatal("the blocked clean-up finished before it was released")
	}
	close(release)
	b.Wait()
	if !slow.Load() {
		t.Fatal("Wait returned before the slow clean-up finished")
	}
}
