package engine

import (
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
