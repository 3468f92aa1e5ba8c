package engine_test

import (
	"errors"
	"testing"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/memory"
)

// TestListerOfLooksThroughWrappers: ListerOf finds the memory engine's
// Lister under two wrappers and reports nil for an engine without one.
func TestListerOfLooksThroughWrappers(t *testing.T) {
	m := memory.New()
	defer m.Close()
	if engine.ListerOf(wrapped{wrapped{m}}) != engine.Lister(m) {
		t.Error("ListerOf did not find the memory engine under two wrappers")
	}
	if l := engine.ListerOf(bare{m}); l != nil {
		t.Errorf("ListerOf(engine without Unwrap or List) = %v; want nil", l)
	}
}

// TestCheckList: the prefix and limit List is given are normalised or
// refused.
func TestCheckList(t *testing.T) {
	for _, c := range []struct {
		prefix    string
		limit     int
		wantP     string
		wantLimit int
		bad       bool
	}{
		{"a/", 0, "a/", engine.DefaultListLimit, false},
		{engine.AllKeys, 5, "", 5, false},
		{"a/", engine.MaxListLimit, "a/", engine.MaxListLimit, false},
		{"", 0, "", 0, true},
		{"a", -1, "", 0, true},
		{"a", engine.MaxListLimit + 1, "", 0, true},
		{"a\x00", 0, "", 0, true},
	} {
		p, n, err := engine.CheckList(c.prefix, c.limit, engine.MaxKeyLen)
		if c.bad != errors.Is(err, engine.ErrInvalidRequest) || p != c.wantP || n != c.wantLimit {
			t.Errorf("CheckList(%q, %d) = %q, %d, %v", c.prefix, c.limit, p, n, err)
		}
	}
}

// TestPrefixEnd: the end of a prefix range is the prefix with its last
// rune below utf8.MaxRune raised by one, past the surrogates, and there is
// none when every rune is utf8.MaxRune.
func TestPrefixEnd(t *testing.T) {
	for _, c := range []struct {
		prefix, end string
		ok          bool
	}{{"a/", "a0", true}, {"ab", "ac", true}, {"\u00bf", "\u00c0", true},
		{"a\ud7ff", "a\ue000", true}, {"a\U0010FFFF\U0010FFFF", "b", true}, {"\U0010FFFF", "", false}} {
		if end, ok := engine.PrefixEnd(c.prefix); end != c.end || ok != c.ok {
			t.Errorf("PrefixEnd(%q) = %q, %v; want %q, %v", c.prefix, end, ok, c.end, c.ok)
		}
	}
}
