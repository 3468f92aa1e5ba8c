package mysql

import (
	"errors"
	"time"
)

// The server's clock as the session strategy without holder records reads
// it: DATETIME(6) text, "2006-01-02 15:04:05.000000", in UTC (clockNow).
// time.Parse of that layout cost a tenth of the engine's own work in an
// uncontended lock and release, so parseClock reads exactly that form, and
// nothing else.

// clockLen is the length of the text of a clock reading.
const clockLen = len("2006-01-02 15:04:05.000000")

// errClockText is parseClock's error for text not in the form.
var errClockText = errors.New("not a DATETIME(6) reading")

// parseClock reads s, a DATETIME(6) in UTC with its six fraction digits.
func parseClock(s string) (time.Time, error) {
	if len(s) != clockLen || s[4] != '-' || s[7] != '-' || s[10] != ' ' || s[13] != ':' || s[16] != ':' ||
		s[19] != '.' {
		return time.Time{}, errClockText
	}
	num := func(from, to int) int {
		n := 0
		for i := from; i < to; i++ {
			c := s[i]
			if c < '0' || c > '9' {
				return -1
			}
			n = n*10 + int(c-'0')
		}
		return n
	}
	y, mo, d, h, mi, sec, us := num(0, 4), num(5, 7), num(8, 10), num(11, 13), num(14, 16), num(17, 19), num(20, 26)
	if y < 0 || mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 || sec < 0 ||
		sec > 59 || us < 0 {
		return time.Time{}, errClockText
	}
	t := time.Date(y, time.Month(mo), d, h, mi, sec, us*1000, time.UTC)
	if t.Day() != d {
		return time.Time{}, errClockText // a day the month does not have
	}
	return t, nil
}
