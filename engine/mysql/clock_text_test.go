package mysql

import (
	"testing"
	"time"
)

// TestClockText: parseClock agrees with time.Parse of the DATETIME(6)
// layout, and refuses text in any other form.
func TestClockText(t *testing.T) {
	const layout = "2006-01-02 15:04:05.000000"
	for _, at := range []time.Time{
		time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 12, 1, 22, 57, 19, 123456789, time.UTC),
		time.Date(2028, 2, 29, 23, 59, 59, 999999000, time.UTC),
		time.Date(2096, 7, 4, 9, 5, 3, 7000, time.FixedZone("x", 3600)),
	} {
		want := at.UTC().Format(layout)
		back, err := parseClock(want)
		ref, _ := time.ParseInLocation(layout, want, time.UTC)
		if err != nil || !back.Equal(ref) {
			t.Errorf("parseClock(%q) = %v, %v; want %v", want, back, err, ref)
		}
	}
	for _, bad := range []string{"", "0", "2026-12-01 22:57:19", "2026-12-01 22:57:19.12345",
		"2026-12-01T22:57:19.123456", "2026-13-01 22:57:19.123456", "2026-02-30 22:57:19.123456",
		"2026-12-01 24:57:19.123456", "2026-12-01 22:57:1x.123456", "1764628631.123456"} {
		if _, err := parseClock(bad); err == nil {
			t.Errorf("parseClock(%q) took it", bad)
		}
	}
}
