package failover

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// listTimeout bounds each engine's listing for the Handler.
const listTimeout = 5 * time.Second

// errBadList is a GET whose ?prefix or ?limit the Handler cannot list.
var errBadList = errors.New("cerberus: bad lock listing request")

// listQuery is a GET's ?prefix=P[&limit=N]; prefix "" when the request
// asks for no listing.
type listQuery struct {
	prefix string
	limit  int
}

// parseListQuery reads ?prefix and ?limit and checks them as
// cerberusctl locks does, before any I/O: an empty prefix is refused (AllKeys,
// "*", lists every key), and so are a limit outside 1..MaxListLimit (empty
// is DefaultListLimit) and a prefix that is not a valid key.
func parseListQuery(v url.Values, maxKeyLen int) (listQuery, error) {
	q := listQuery{prefix: v.Get("prefix"), limit: engine.DefaultListLimit}
	_, hasPrefix := v["prefix"]
	_, hasLimit := v["limit"]
	if !hasPrefix && !hasLimit {
		return q, nil
	}
	if q.prefix == "" {
		return listQuery{}, fmt.Errorf("%w: give a prefix (?prefix=orders/), or %s to list every key",
			errBadList, engine.AllKeys)
	}
	if s := v.Get("limit"); s != "" { // an empty limit (the page's form left blank) is the default
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > engine.MaxListLimit {
			return listQuery{}, fmt.Errorf("%w: limit %q is not a number from 1 to %d",
				errBadList, s, engine.MaxListLimit)
		}
		q.limit = n
	}
	if _, _, err := engine.CheckList(q.prefix, q.limit, maxKeyLen); err != nil {
		return listQuery{}, fmt.Errorf("%w: prefix %q: %w", errBadList, q.prefix, err)
	}
	return q, nil
}

// locksDoc is the lock inventory the Handler shows for ?prefix: what each
// engine lists, the active one and the others alike (as cerberusctl locks
// does), so that during a switch the keys still held on the engine being
// left show too.
type locksDoc struct {
	Prefix  string        `json:"prefix"`
	Limit   int           `json:"limit"`
	Engines []EngineLocks `json:"engines"`
}

// EngineLocks is what one engine listed, or why it could not, in the
// JSON form the Handler and cerberusctl locks give. Tokens are the
// engine's own; a Manager's leases carry its epoch above them (bit 48 and
// up).
type EngineLocks struct {
	Name  string      `json:"name"`
	Error string      `json:"error,omitempty"`
	More  bool        `json:"more"`
	Keys  []LockedKey `json:"keys"`
}

// LockedKey is one held key; Waiters is -1 when the engine cannot count
// them.
type LockedKey struct {
	Key     string       `json:"key"`
	Waiters int          `json:"waiters"`
	Holders []LockHolder `json:"holders"`
}

// LockHolder is one holder of a LockedKey; the times are absent when the
// engine does not know them.
type LockHolder struct {
	Mode    string     `json:"mode"`
	Token   uint64     `json:"token"`
	Value   string     `json:"value"`
	Granted *time.Time `json:"granted,omitempty"`
	Expires *time.Time `json:"expires,omitempty"`
}

// listLocks lists q on every engine at once, each within listTimeout.
func (m *Manager) listLocks(ctx context.Context, q listQuery) *locksDoc {
	doc := &locksDoc{Prefix: q.prefix, Limit: q.limit, Engines: make([]EngineLocks, len(m.engines))}
	var wg sync.WaitGroup
	for i, ne := range m.engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			doc.Engines[i] = ListEngine(ctx, ne, q.prefix, q.limit, listTimeout)
		}()
	}
	wg.Wait()
	return doc
}

// ListEngine lists the keys held under prefix on one engine (at most
// limit, within timeout), through engine.ListerOf: the Error of the
// result says why it could not, such as an engine without a Lister.
func ListEngine(ctx context.Context, ne NamedEngine, prefix string, limit int, timeout time.Duration) EngineLocks {
	out := EngineLocks{Name: ne.Name, Keys: []LockedKey{}}
	ls := engine.ListerOf(ne.Engine)
	if ls == nil {
		out.Error = "this engine cannot list held keys"
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	inv, err := ls.List(ctx, prefix, limit)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	out.More = inv.More
	for _, k := range inv.Keys {
		lk := LockedKey{Key: k.Key, Waiters: k.Waiters, Holders: []LockHolder{}}
		for _, h := range k.Holders {
			lh := LockHolder{Mode: h.Mode.String(), Token: h.Token, Value: h.Value}
			if !h.Granted.IsZero() {
				lh.Granted = &h.Granted
			}
			if !h.Expires.IsZero() {
				lh.Expires = &h.Expires
			}
			lk.Holders = append(lk.Holders, lh)
		}
		out.Keys = append(out.Keys, lk)
	}
	return out
}
