package consul

import (
	"strings"
	"testing"
)

func TestEncodeKey(t *testing.T) {
	keys := []string{"a", "order:42", "a/../.", "订单:42 a%2F/b\\*?.. ", "x/", "/", "..", "_5F", "A-z_09", strings.Repeat("é", 256)}
	seen := map[string]string{}
	for _, k := range keys {
		enc := EncodeKey(k)
		if strings.ContainsAny(enc, "/.%?#\\ ") {
			t.Errorf("EncodeKey(%q) = %q has a path-unsafe byte", k, enc)
		}
		if prev, dup := seen[enc]; dup {
			t.Errorf("EncodeKey(%q) = EncodeKey(%q) = %q", k, prev, enc)
		}
		seen[enc] = k
		back, err := DecodeKey(enc)
		if err != nil || back != k {
			t.Errorf("DecodeKey(EncodeKey(%q)) = %q, %v", k, back, err)
		}
	}
	if got := EncodeKey("a/.b"); got != "a_2F_2Eb" {
		t.Errorf(`EncodeKey("a/.b") = %q, want "a_2F_2Eb"`, got)
	}
	for _, bad := range []string{"a.b", "_2", "_zz", "a/b"} {
		if _, err := DecodeKey(bad); err == nil {
			t.Errorf("DecodeKey(%q): want an error", bad)
		}
	}
}

func TestCheckPrefix(t *testing.T) {
	for _, p := range []string{"cerberus/locks", "a", "my_app.v2/locks-1"} {
		if err := checkPrefix(p); err != nil {
			t.Errorf("checkPrefix(%q): %v", p, err)
		}
	}
	for _, p := range []string{"", "/a", "a/", "a//b", "a/../b", ".", "a b", "a?b", "a%2Fb"} {
		if err := checkPrefix(p); err == nil {
			t.Errorf("checkPrefix(%q): want an error", p)
		}
	}
}
