package consul

import (
	"strings"
	"testing"

	"github.com/cerberus-go/cerberus/engine"
)

// FuzzEncodeKey: every valid key encodes to a KV segment of [A-Za-z0-9_-]
// only (no '/', '.' or ".." for HTTP path cleaning to rewrite) and decodes
// back to itself.
func FuzzEncodeKey(f *testing.F) {
	for _, seed := range []string{"a", "order:42", "a/../.", "订单:42 a%2F/b\\*?.. ", "_41", "-", "/"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if engine.CheckKey(key, engine.MaxKeyLen) != nil {
			return
		}
		enc := EncodeKey(key)
		if strings.Trim(enc, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
			t.Fatalf("EncodeKey(%q) = %q has characters outside [A-Za-z0-9_-]", key, enc)
		}
		dec, err := DecodeKey(enc)
		if err != nil || dec != key {
			t.Fatalf("DecodeKey(EncodeKey(%q)) = %q, %v", key, dec, err)
		}
	})
}
