package kit

import (
	"testing"
	"time"
)

// TestWaitPast: WaitPast returns no sooner than d after at, for an at now,
// in the past (it returns at once) and ahead (it waits for it too).
func TestWaitPast(t *testing.T) {
	for _, c := range []struct {
		name string
		at   time.Duration // from now
		d    time.Duration
	}{
		{"now, the guard", 0, ClockGuard},
		{"now, 5ms", 0, 5 * time.Millisecond},
		{"past", -time.Second, 5 * time.Millisecond},
		{"ahead", 3 * time.Millisecond, 2 * time.Millisecond},
	} {
		at := time.Now().Add(c.at)
		WaitPast(at, c.d)
		if since := time.Since(at); since < c.d {
			t.Errorf("%s: returned %v after at, before %v", c.name, since, c.d)
		}
	}
}
