package kit

import "time"

// ClockGuard is how long after the answer that carried a lease's token an
// engine whose tokens are the server's clock in 8µs ticks (engine/mysql
// and engine/postgres without holder records) waits before it frees the
// lease's lock by closing a connection (their releases wait on the server
// for its clock instead): a tick, the microsecond the server's reading may
// have been truncated by, and one more. The server read its clock before
// it sent the answer, so a lock freed that much later in this process's
// time is freed in a later tick of the server's clock, as long as that
// clock runs at the rate of this process's and does not step back; the
// next grant of the key, which reads the clock once it holds the lock,
// then reads a later tick.
const ClockGuard = 10 * time.Microsecond

// WaitPast returns once d has passed since at. The last millisecond it
// spins instead of sleeping: a sleep of microseconds lasts far longer than
// asked on most systems, and the guard it serves (ClockGuard) is that
// short.
func WaitPast(at time.Time, d time.Duration) {
	for {
		left := d - time.Since(at)
		switch {
		case left <= 0:
			return
		case left > time.Millisecond:
			time.Sleep(left - time.Millisecond)
		}
	}
}

// FreeAt returns when this process may free a lock whose grant read the
// server's clock as r (exact to the microsecond, read once the lock was
// held) and whose answer it had received by answered: a microsecond after
// the server's clock has left r's tick, as this process reckons it. The
// server read r before it sent the answer, so its clock, if it runs at
// this process's rate and does not step back, has reached TickEnd of r's
// tick by answered plus what was left of the tick at r; the next grant of
// the lock, which reads the clock once it holds it, then reads a later
// tick. That is at most a tick, and a lock held for longer than that waits
// for nothing. (A reading before TickEpoch, whose token is 1 whatever the
// wait, waits a tick at most.)
func FreeAt(answered, r time.Time) time.Time {
	left := min(TickEnd(Ticks(r)).Sub(r), Tick)
	return answered.Add(left + time.Microsecond)
}

// TickEpoch is when the SQL engines' clock tokens count from,
// 2025-01-01T00:00:00Z: a token is the 8µs ticks since then (Ticks).
var TickEpoch = time.Unix(1735689600, 0)

// Tick is the length of one tick of a clock token.
const Tick = 8 * time.Microsecond

// Ticks returns t in whole ticks since TickEpoch, at least 1: the token an
// engine gives for a server clock reading of t. t's microseconds are
// exact, so Ticks agrees with the same count made on the server from the
// same reading (engine/postgres's clockTicks), and it never decreases as t
// grows.
func Ticks(t time.Time) uint64 {
	us := t.UnixMicro() - TickEpoch.UnixMicro()
	return uint64(max(1, us/int64(Tick/time.Microsecond)))
}

// TickEnd returns when the tick of token ends: a clock that reads TickEnd
// or later reads a later tick (Ticks(TickEnd(n)) is n+1).
func TickEnd(token uint64) time.Time {
	return TickEpoch.Add(time.Duration(token+1) * Tick)
}
