package kit

import "time"

// ClockGuard is how long after the answer that carried a lease's token an
// engine whose tokens are the server's clock in 8µs ticks (engine/mysql
// and engine/postgres without holder records) waits before it frees the
// lease's lock from this process (engine/mysql's releases, both engines'
// closed connections; engine/postgres's releases wait on the server): a
// tick, the microsecond the server's reading may have been
// truncated by, and one more. The server read its clock before it sent the
// answer, so a lock freed that much later in this process's time is freed
// in a later tick of the server's clock, as long as that clock runs at the
// rate of this process's and does not step back; the next grant of the
// key, which reads the clock once it holds the lock, then reads a later
// tick.
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
