package zookeeper_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/zookeeper"
)

// znodeNameOK mirrors the server's path check for one component: no '/',
// not "." or "..", and none of the UTF-16 code units it refuses.
func znodeNameOK(name string) bool {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") || !utf8.ValidString(name) {
		return false
	}
	for _, r := range name {
		switch {
		case r <= 0x1F, r >= 0x7F && r <= 0x9F, r >= 0xD800 && r <= 0xF8FF, r >= 0xFFF0:
			return false
		}
	}
	return true
}

func TestEncodeRoundTrip(t *testing.T) {
	keys := []string{
		"a", "order:42", "a/../.", ".", "..", "...", "/", "a/", "//x//",
		"订单:42 a%2F/b\\*?.. ", "%", "%25", "%2F", "100%", "emoji 🔒 lock",
		"\ue000private", "\ufff0\uffff", "zookeeper", "\u00a0nbsp",
		strings.Repeat("x", engine.MaxKeyLen), strings.Repeat("/", engine.MaxKeyLen),
		strings.Repeat("🔒", engine.MaxKeyLen/4),
	}
	for _, key := range keys {
		name := zookeeper.EncodeKey(key)
		if !znodeNameOK(name) {
			t.Errorf("EncodeKey(%q) = %q, not a valid znode name", key, name)
		}
		back, err := zookeeper.DecodeKey(name)
		if err != nil || back != key {
			t.Errorf("DecodeKey(EncodeKey(%q)) = %q, %v", key, back, err)
		}
	}
	if got := zookeeper.EncodeKey("plain:key-1"); got != "plain:key-1" {
		t.Errorf("a plain key was changed: %q", got)
	}
	// Distinct keys never share a name.
	if zookeeper.EncodeKey("a/b") == zookeeper.EncodeKey("a%2Fb") {
		t.Errorf(`"a/b" and "a%%2Fb" escape to the same name`)
	}
}

func FuzzEncode(f *testing.F) {
	for _, s := range []string{"a", "a/../.", "%zz", "..", "订单/🔒"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if engine.CheckKey(key, engine.MaxKeyLen) != nil {
			return
		}
		name := zookeeper.EncodeKey(key)
		if !znodeNameOK(name) {
			t.Fatalf("EncodeKey(%q) = %q, not a valid znode name", key, name)
		}
		if back, err := zookeeper.DecodeKey(name); err != nil || back != key {
			t.Fatalf("round trip of %q: %q, %v", key, back, err)
		}
	})
}

func TestDecodeRejects(t *testing.T) {
	for _, name := range []string{"%", "%2", "%zz", "%FF"} {
		if _, err := zookeeper.DecodeKey(name); !errors.Is(err, engine.ErrInvalidKey) {
			t.Errorf("DecodeKey(%q): want ErrInvalidKey, got %v", name, err)
		}
	}
}
