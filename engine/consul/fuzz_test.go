package consul

import (
	"errors"
	"strings"
	"testing"

	"github.com/cerberus-go/cerberus/engine"
)

// FuzzEncodeKey: Validate refuses exactly the keys engine.CheckKey refuses
// (wrapping engine.ErrInvalidKey). Every key it accepts encodes to one KV
// path segment of [A-Za-z0-9_-] only (no '/', '.' or ".." for HTTP path
// cleaning to rewrite), at most three bytes per key byte, and decodes back
// to itself byte for byte. EncodeKey itself is total: it never panics, and
// round-trips any byte string, valid key or not.
func FuzzEncodeKey(f *testing.F) {
	for _, seed := range []string{"a", "order:42", "a/../.", "订单:42 a%2F/b\\*?.. ", "_41", "-", "/"} {
		f.Add(seed)
	}
	e := &Engine{}
	f.Fuzz(func(t *testing.T, key string) {
		valid := engine.CheckKey(key, engine.MaxKeyLen) == nil
		err := e.Validate(engine.Request{Key: key, Mode: engine.Exclusive, TTL: engine.MinTTL})
		if valid != (err == nil) || err != nil && !errors.Is(err, engine.ErrInvalidKey) {
			t.Fatalf("Validate(%q) = %v, want CheckKey's verdict (valid=%v), wrapping ErrInvalidKey", key, err, valid)
		}
		enc := EncodeKey(key)
		if strings.Trim(enc, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
			t.Fatalf("EncodeKey(%q) = %q has characters outside [A-Za-z0-9_-]", key, enc)
		}
		if len(enc) > 3*len(key) || key != "" && enc == "" {
			t.Fatalf("EncodeKey(%q) = %q: wrong length", key, enc)
		}
		dec, err := DecodeKey(enc)
		if err != nil || dec != key {
			t.Fatalf("DecodeKey(EncodeKey(%q)) = %q, %v", key, dec, err)
		}
	})
}

// FuzzDecodeKey: DecodeKey, given any string (a KV segment found on the
// server, say), never panics and either returns the key whose encoding is
// exactly that string, or refuses it with an error wrapping
// engine.ErrInvalidKey that says what is wrong. So two different segments
// never decode to the same key.
func FuzzDecodeKey(f *testing.F) {
	for _, seed := range []string{"a", "a_2F_2Eb", "_61", "_2f", "_2", "_", "a.b", "a/b", "_E8_AE_A2", "_zz", ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, enc string) {
		key, err := DecodeKey(enc)
		if err == nil {
			if again := EncodeKey(key); again != enc {
				t.Fatalf("DecodeKey(%q) = %q, which encodes to %q: two segments for one key", enc, key, again)
			}
			return
		}
		if !errors.Is(err, engine.ErrInvalidKey) {
			t.Fatalf("DecodeKey(%q) = %v: want ErrInvalidKey", enc, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, "byte ") || !strings.Contains(msg, "consul:") {
			t.Fatalf("DecodeKey(%q) = %q: the message does not point at the bad byte", enc, msg)
		}
	})
}
