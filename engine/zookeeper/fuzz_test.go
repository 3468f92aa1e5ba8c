package zookeeper_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
)

// FuzzDecodeKey: DecodeKey, given any znode name (one found under the
// base path, say), never panics and either returns the key whose escaped
// form is exactly that name, or refuses it with an error wrapping
// engine.ErrInvalidKey that quotes the name and says what is wrong. So no
// two names decode to the same key, and names EncodeKey never writes
// ("%61", "%2f", ".", "a/b", raw control characters) are refused.
// FuzzEncode (keys_test.go) checks the other direction: every valid key
// escapes to a valid znode name and back.
func FuzzDecodeKey(f *testing.F) {
	for _, seed := range []string{
		"a", "", "%2E", "%2E%2E", ".", "..", "%2e", "%61", "%2F", "%2f", "a/b", "%25", "%", "%2", "%zz",
		"%FF", "%ED%A0%80", "%F0%9F%94%92", "🔒", "\x00", "%00", "\ue000", "%EE%80%80", "订单",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, name string) {
		key, err := zookeeper.DecodeKey(name)
		if err == nil {
			if again := zookeeper.EncodeKey(key); again != name {
				t.Fatalf("DecodeKey(%q) = %q, which escapes to %q: two names for one key", name, key, again)
			}
			return
		}
		if !errors.Is(err, engine.ErrInvalidKey) {
			t.Fatalf("DecodeKey(%q) = %v: want ErrInvalidKey", name, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, "znode name") {
			t.Fatalf("DecodeKey(%q) = %q: the message does not say what was refused", name, msg)
		}
	})
}
