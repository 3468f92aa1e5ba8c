package engine

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

// FuzzCheckKey: CheckKey never panics, and accepts a key exactly when it is
// non-empty, within the limit, valid UTF-8 and free of control characters.
// A refusal wraps ErrInvalidKey (and neither ErrInvalidRequest nor
// ErrInvalidTTL), names the first rule the key breaks, and stays short
// however long the key. CheckRequest gives the same verdict on the key.
// Keys are stored as given: there is no encoding at this level, so an
// accepted key is simply never changed. The memory engine's Validate is
// CheckRequest with Common, so this target covers its key handling too.
func FuzzCheckKey(f *testing.F) {
	for _, seed := range []string{"a", "", "order:42", "订单/42", "a\x00b", "\xff", "a\nb", "{x}", "..", "/"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := CheckKey(key, MaxKeyLen)
		// The first broken rule, in the order CheckKey documents them, and
		// the words its message must hold.
		var want string
		switch {
		case key == "":
			want = "empty key"
		case len(key) > MaxKeyLen:
			want = "key is " + strconv.Itoa(len(key)) + " bytes, the limit is " + strconv.Itoa(MaxKeyLen)
		case !utf8.ValidString(key):
			want = "not valid UTF-8"
		default:
			for i, r := range key {
				if unicode.IsControl(r) {
					want = "control character at byte " + strconv.Itoa(i)
					break
				}
			}
		}
		switch {
		case want == "" && err != nil:
			t.Fatalf("CheckKey(%q) = %v, want nil", key, err)
		case want != "" && err == nil:
			t.Fatalf("CheckKey(%q) = nil, want an error about %q", key, want)
		case err == nil:
			if reqErr := CheckRequest(Request{Key: key, Mode: Exclusive, TTL: MinTTL}, Common); reqErr != nil {
				t.Fatalf("CheckRequest refuses the valid key %q: %v", key, reqErr)
			}
			return
		}
		if !errors.Is(err, ErrInvalidKey) || errors.Is(err, ErrInvalidRequest) || errors.Is(err, ErrInvalidTTL) {
			t.Fatalf("CheckKey(%q) = %v: want ErrInvalidKey alone", key, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, want) {
			t.Fatalf("CheckKey(%q) = %q: the message does not say %q", key, msg, want)
		}
		// The key is quoted, shortened to 64 bytes: a refusal of a long
		// key does not flood logs.
		if len(msg) > 400 {
			t.Fatalf("CheckKey(%q): a %d-byte message", key, len(msg))
		}
		reqErr := CheckRequest(Request{Key: key, Mode: Shared, TTL: time.Second}, Common)
		if reqErr == nil || reqErr.Error() != msg {
			t.Fatalf("CheckRequest(%q) = %v, want CheckKey's %q", key, reqErr, msg)
		}
	})
}
