package engine

import (
	"errors"
	"testing"
	"time"
)

// TestCheckRequestLimit checks the rules of Request.Limit: only on a Shared
// request, within MaxLimit, and only on an engine that says it counts.
func TestCheckRequestLimit(t *testing.T) {
	counted := Common
	counted.Counted = true
	exclusive := Common
	exclusive.ExclusiveOnly = true
	for _, tc := range []struct {
		name string
		req  Request
		lim  Limits
		ok   bool
	}{
		{"counted shared", Request{Key: "k", Mode: Shared, Limit: 3, TTL: time.Second}, counted, true},
		{"uncounted engine", Request{Key: "k", Mode: Shared, Limit: 3, TTL: time.Second}, Common, false},
		{"no limit on an uncounted engine", Request{Key: "k", Mode: Shared, TTL: time.Second}, Common, true},
		{"exclusive with a limit", Request{Key: "k", Mode: Exclusive, Limit: 1, TTL: time.Second}, counted, false},
		{"negative", Request{Key: "k", Mode: Shared, Limit: -1, TTL: time.Second}, counted, false},
		{"above MaxLimit", Request{Key: "k", Mode: Shared, Limit: MaxLimit + 1, TTL: time.Second}, counted, false},
		{"MaxLimit", Request{Key: "k", Mode: Shared, Limit: MaxLimit, TTL: time.Second}, counted, true},
		{"shared on an exclusive-only engine", Request{Key: "k", Mode: Shared, TTL: time.Second}, exclusive, false},
		{"counted on an exclusive-only engine", Request{Key: "k", Mode: Shared, Limit: 2, TTL: time.Second}, exclusive, false},
		{"exclusive on an exclusive-only engine", Request{Key: "k", Mode: Exclusive, TTL: time.Second}, exclusive, true},
	} {
		err := CheckRequest(tc.req, tc.lim)
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: %v, want nil", tc.name, err)
		case !tc.ok && !errors.Is(err, ErrInvalidRequest):
			t.Errorf("%s: %v, want ErrInvalidRequest", tc.name, err)
		}
	}
}
