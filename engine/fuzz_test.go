package engine

import (
	"errors"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzCheckKey: CheckKey never panics, and accepts a key exactly when it is
// non-empty, within the limit, valid UTF-8 and free of control characters;
// a refusal always wraps ErrInvalidKey.
func FuzzCheckKey(f *testing.F) {
	for _, seed := range []string{"a", "", "order:42", "订单/42", "a\x00b", "\xff", "a\nb", "{x}", "..", "/"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := CheckKey(key, MaxKeyLen)
		want := key != "" && len(key) <= MaxKeyLen && utf8.ValidString(key)
		for _, r := range key {
			if unicode.IsControl(r) {
				want = false
			}
		}
		if want != (err == nil) {
			t.Fatalf("CheckKey(%q) = %v, want accepted=%v", key, err, want)
		}
		if err != nil && !errors.Is(err, ErrInvalidKey) {
			t.Fatalf("CheckKey(%q) = %v, not ErrInvalidKey", key, err)
		}
	})
}
