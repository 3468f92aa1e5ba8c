package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/engine"
)

var _ engine.Lister = (*Engine)(nil)

// List bounds: each SCAN asks for scanCount keys, and one server is
// scanned in at most maxScanRounds calls (then More is set).
const (
	scanCount     = 1000
	maxScanRounds = 100000
)

// scanner is a client of one Redis server (single or Sentinel).
type scanner interface {
	Scan(ctx context.Context, cursor uint64, match string, count int64) *goredis.ScanCmd
}

// masterClient is a Redis Cluster client.
type masterClient interface {
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, c *goredis.Client) error) error
}

// List returns the keys held under prefix; see engine.Lister. It finds
// candidates with SCAN (never KEYS) over the names of holders (:w for a
// writer, :r for readers) under the engine's prefix, COUNT scanCount per
// call, on every master of a Cluster; it stops once limit+1 candidates are
// found and sets More. Each candidate's holders are then read with the
// script of Holders, so an expired lease is not listed, and an exclusive
// holder's Expires with PTTL (one more round trip; a reader's is not
// read). A key holding '}'
// is stored under its SHA-256 (see tagOf) and cannot be named back: it is
// listed only for engine.AllKeys, under its tag "{h:<hex>}". Waiters is
// -1: the engine does not count them. The client must have Scan (a
// *goredis.Client) or ForEachMaster (a *goredis.ClusterClient); others get
// an error wrapping errors.ErrUnsupported. It returns engine.ErrClosed
// after Close.
func (e *Engine) List(ctx context.Context, prefix string, limit int) (engine.Inventory, error) {
	prefix, limit, err := engine.CheckList(prefix, limit, e.Limits().MaxKeyLen)
	if err != nil {
		return engine.Inventory{}, err
	}
	if e.frame.Closed() {
		return engine.Inventory{}, engine.ErrClosed
	}
	col := &collector{max: limit + 1, tags: make(map[string]struct{})}
	match := globEscape(e.opts.prefix) + "{*}:[wr]"
	if prefix != "" {
		match = globEscape(e.opts.prefix) + "{k:" + globEscape(prefix) + "*}:[wr]"
	}
	if err := e.scanAll(ctx, match, col); err != nil {
		return engine.Inventory{}, e.opError(ctx, "list", prefix, err)
	}
	keys := make([]engine.HeldKey, 0, len(col.tags))
	for tag := range col.tags {
		name := tag
		if strings.HasPrefix(tag, "{k:") {
			name = tag[3 : len(tag)-1]
		}
		k := e.keysOfTag(tag)
		hs, err := e.holdersAt(ctx, name, k)
		if err != nil {
			return engine.Inventory{}, err
		}
		listed := engine.Listed(hs)
		if len(hs) == 1 && hs[0].Mode == engine.Exclusive {
			if listed[0].Expires, err = e.expiresAt(ctx, k.w); err != nil {
				return engine.Inventory{}, e.opError(ctx, "list", name, err)
			}
		}
		keys = append(keys, engine.HeldKey{Key: name, Holders: listed, Waiters: -1})
	}
	return engine.Collect(keys, prefix, limit, col.more), nil
}

// expiresAt returns when the writer key w expires, by its PTTL (the
// server's count, added to this clock); zero when it has no expiry or is
// gone.
func (e *Engine) expiresAt(ctx context.Context, w string) (time.Time, error) {
	rctx, cancel := e.roundTrip(ctx)
	defer cancel()
	pipe := e.c.Pipeline()
	ttl := pipe.PTTL(rctx, w)
	if _, err := pipe.Exec(rctx); err != nil {
		return time.Time{}, err
	}
	if ttl.Val() <= 0 {
		return time.Time{}, nil
	}
	return time.Now().Add(ttl.Val()), nil
}

// scanAll scans every server the client reaches for keys matching match.
func (e *Engine) scanAll(ctx context.Context, match string, col *collector) error {
	switch c := e.c.(type) {
	case masterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error {
			return e.scanOne(ctx, m, match, col)
		})
	case scanner:
		return e.scanOne(ctx, c, match, col)
	}
	return fmt.Errorf("redis: the client %T has neither Scan nor ForEachMaster: %w", e.c, errors.ErrUnsupported)
}

// scanOne runs SCAN on one server until its cursor returns to 0, col is
// full, or maxScanRounds calls have been made.
func (e *Engine) scanOne(ctx context.Context, c scanner, match string, col *collector) error {
	var cursor uint64
	for range maxScanRounds {
		rctx, cancel := e.roundTrip(ctx)
		names, next, err := c.Scan(rctx, cursor, match, scanCount).Result()
		cancel()
		if err != nil {
			return err
		}
		if col.add(e.opts.prefix, names) || next == 0 {
			return nil
		}
		cursor = next
	}
	col.mu.Lock()
	col.more = true
	col.mu.Unlock()
	return nil
}

// collector gathers the hash tags of the keys SCAN finds, from several
// masters at once.
type collector struct {
	mu   sync.Mutex
	max  int
	tags map[string]struct{}
	more bool
}

// add records the tags of the Redis keys names (prefix + tag + ":w" or
// ":r") and reports whether the collector is full.
func (col *collector) add(prefix string, names []string) bool {
	col.mu.Lock()
	defer col.mu.Unlock()
	for _, n := range names {
		tag := strings.TrimPrefix(n, prefix)
		tag = tag[:len(tag)-2]
		if _, seen := col.tags[tag]; seen {
			continue
		}
		if len(col.tags) >= col.max {
			col.more = true
			return true
		}
		col.tags[tag] = struct{}{}
	}
	return col.more
}

// globEscape escapes the characters SCAN MATCH treats specially.
func globEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\^-`) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if slices.Contains([]rune(`*?[]\^-`), r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
