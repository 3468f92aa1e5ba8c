package enginetest

import (
	"strings"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// TestRetry: Retry.Cycles passes over an engine whose tokens increase and
// returns the last one, fails when a token is not above the one before,
// and Retry.Grant gives up at once on an error that is not
// ErrUnavailable (a closed engine).
func TestRetry(t *testing.T) {
	r := Retry{Within: 5 * time.Second, Attempt: time.Second, Pause: time.Millisecond}
	e, err := memoryFactory()()
	if err != nil {
		t.Fatal(err)
	}
	req := engine.Request{Key: "retry", TTL: time.Minute}
	last := r.Cycles(t, e, req, 6, 0)
	if last == 0 {
		t.Fatal("Cycles returned no token")
	}
	rec := &recorder{name: "stale"}
	if got := r.Cycles(rec, e, req, 3, last+100); got != last+100 || !rec.Failed() ||
		!strings.Contains(strings.Join(rec.msgs, "\n"), "tokens must strictly increase") {
		t.Fatalf("Cycles after a higher token = %d, failed %v, %q; want %d and a failure", got, rec.Failed(),
			rec.msgs, last+100)
	}
	_ = e.Close()
	rec = &recorder{name: "closed"}
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); r.Grant(rec, e, req) }() // Fatalf ends the goroutine
	<-done
	if !rec.Failed() || time.Since(start) > r.Within/2 {
		t.Fatalf("Grant on a closed engine: failed %v after %v; want a failure at once", rec.Failed(), time.Since(start))
	}
}
