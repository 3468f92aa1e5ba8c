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

// TestTicks: Ticks counts whole 8µs ticks since TickEpoch (1 at least), and
// TickEnd is the first instant of the next tick.
func TestTicks(t *testing.T) {
	for _, c := range []struct {
		at   time.Time
		want uint64
	}{
		{TickEpoch, 1},
		{TickEpoch.Add(-time.Hour), 1},
		{TickEpoch.Add(15 * time.Microsecond), 1},
		{TickEpoch.Add(16 * time.Microsecond), 2},
		{TickEpoch.Add(16*time.Microsecond + 999*time.Nanosecond), 2},
		{time.Date(2026, 12, 1, 0, 0, 0, 8000, time.UTC), uint64((time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixMicro()-1735689600000000)/8) + 1},
	} {
		if got := Ticks(c.at); got != c.want {
			t.Errorf("Ticks(%v) = %d, want %d", c.at, got, c.want)
		}
	}
	for _, n := range []uint64{1, 2, 7_500_000_000_000} {
		end := TickEnd(n)
		if got := Ticks(end); got != n+1 {
			t.Errorf("Ticks(TickEnd(%d)) = %d, want %d", n, got, n+1)
		}
		if got := Ticks(end.Add(-time.Microsecond)); got != n {
			t.Errorf("Ticks(TickEnd(%d) - 1µs) = %d, want %d", n, got, n)
		}
	}
}

// TestFreeAt: a lock may be freed a microsecond after what was left of its
// reading's tick has passed since the answer, a tick at most.
func TestFreeAt(t *testing.T) {
	answered := time.Now()
	for _, c := range []struct {
		r    time.Time
		want time.Duration
	}{
		{TickEpoch.Add(16 * time.Microsecond), 9 * time.Microsecond}, // a tick's first microsecond
		{TickEpoch.Add(23 * time.Microsecond), 2 * time.Microsecond}, // its last
		{TickEpoch.Add(20*time.Microsecond + 500*time.Nanosecond), 4500 * time.Nanosecond},
		{time.Date(2026, 12, 2, 1, 30, 0, 5000, time.UTC), 4 * time.Microsecond},
		{TickEpoch.Add(-time.Hour), 9 * time.Microsecond},
	} {
		if got := FreeAt(answered, c.r).Sub(answered); got != c.want {
			t.Errorf("FreeAt(answered, %v) = answered + %v, want + %v", c.r, got, c.want)
		}
		if Ticks(c.r) > 1 && Ticks(c.r.Add(FreeAt(answered, c.r).Sub(answered))) <= Ticks(c.r) {
			t.Errorf("the clock %v after %v still reads its tick", FreeAt(answered, c.r).Sub(answered), c.r)
		}
	}
}
