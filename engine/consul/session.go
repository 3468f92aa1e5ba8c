package consul

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/cerberus-go/cerberus/engine"
)

// session is the engine's Consul session: every lease of the engine is
// backed by it. A goroutine renews it every TTL/2 and, in between, watches
// it with a blocking query, so that an invalidation from outside (destroy,
// failed health check) ends the leases at once. If no renewal succeeds for
// a whole TTL the session counts as lost too: Consul may already have
// invalidated it.
type session struct {
	e  *Engine
	id string

	mu      sync.Mutex
	lost    bool
	leases  map[*lease]struct{}
	orphans map[*lease]struct{} // releases to retry: keys this session may still hold for ended leases

	stop     chan struct{}
	stopOnce sync.Once
}

// session returns the engine's session, creating it if there is none.
func (e *Engine) session(ctx context.Context) (*session, error) {
	if s, err := e.currentSession(); s != nil || err != nil {
		return s, err
	}
	select {
	case e.sessLock <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-e.sessLock }()
	if s, err := e.currentSession(); s != nil || err != nil {
		return s, err
	}
	id, err := e.createSession(ctx)
	if err != nil {
		return nil, e.opErr(ctx, "session", "", err)
	}
	s := &session{e: e, id: id, leases: make(map[*lease]struct{}), orphans: make(map[*lease]struct{}),
		stop: make(chan struct{})}
	e.mu.Lock()
	if e.frame.ClosedLocked() {
		e.mu.Unlock()
		dctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		_, _ = e.client.Session().Destroy(id, e.write(dctx))
		return nil, engine.ErrClosed
	}
	e.sess = s
	e.wg.Add(1)
	go s.run()
	e.mu.Unlock()
	return s, nil
}

func (e *Engine) currentSession() (*session, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.frame.ClosedLocked() {
		return nil, engine.ErrClosed
	}
	return e.sess, nil
}

// createSession creates the session through the raw API, so that a zero
// lock-delay is sent as "0ms" rather than left to Consul's 15s default.
func (e *Engine) createSession(ctx context.Context) (string, error) {
	body := map[string]any{
		"Name":      e.cfg.sessionName,
		"TTL":       fmt.Sprintf("%ds", int64(e.cfg.sessionTTL/time.Second)),
		"LockDelay": fmt.Sprintf("%dms", e.cfg.lockDelay.Milliseconds()),
		"Behavior":  api.SessionBehaviorDelete,
	}
	if e.cfg.checksSet {
		body["NodeChecks"] = e.cfg.nodeChecks
		body["ServiceChecks"] = e.cfg.serviceChecks
	}
	var out struct{ ID string }
	backoff, deadline := minBackoff, time.Now().Add(registrationWait)
	for {
		_, err := e.client.Raw().Write("/v1/session/create", body, &out, e.write(ctx))
		if err == nil {
			break
		}
		if !unregistered(err) || time.Now().Add(backoff).After(deadline) {
			return "", err
		}
		if serr := sleep(ctx, backoff); serr != nil {
			return "", err
		}
		backoff = min(2*backoff, maxBackoff)
	}
	if out.ID == "" {
		return "", fmt.Errorf("session create returned no id")
	}
	return out.ID, nil
}

// registrationWait bounds how long a session create is retried while the
// agent's node is missing from the catalog (see unregistered).
const registrationWait = 5 * time.Second

// unregistered reports whether a session create failed because the
// catalog does not list the agent's node (or its serfHealth check) yet: an
// agent that has just started, or restarted, registers itself within its
// first anti-entropy sync, usually well under a second. A session created
// a moment later succeeds, so createSession retries, within
// registrationWait and the caller's context.
func unregistered(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Missing node registration") ||
		strings.Contains(msg, "Missing check 'serfHealth' registration")
}

// SessionID returns the ID of the engine's current Consul session, or ""
// if it has none (before the first Acquire, after a loss, after Close).
func (e *Engine) SessionID() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sess == nil {
		return ""
	}
	return e.sess.id
}

// halt stops the session goroutine.
func (s *session) halt() { s.stopOnce.Do(func() { close(s.stop) }) }

// lose marks the session lost and ends every lease it backs with
// engine.ErrLeaseLost. The next Acquire creates a new session.
func (s *session) lose(why string) {
	s.mu.Lock()
	if s.lost {
		s.mu.Unlock()
		return
	}
	s.lost = true
	held := make([]*lease, 0, len(s.leases))
	for l := range s.leases {
		held = append(held, l)
	}
	s.mu.Unlock()
	e := s.e
	e.mu.Lock()
	if e.sess == s {
		e.sess = nil
	}
	e.mu.Unlock()
	s.halt()
	for _, l := range held {
		if l.claim() {
			l.finish(fmt.Errorf("%w: session %s", engine.ErrLeaseLost, why))
		}
	}
}

// stopAndDestroy ends the session for Close: it stops the goroutine, tries
// the pending releases, and destroys the session on the server (which
// deletes any key it still holds, under lock-delay).
func (s *session) stopAndDestroy(ctx context.Context) {
	s.mu.Lock()
	s.lost = true
	s.mu.Unlock()
	s.halt()
	s.retryOrphans(ctx)
	_, _ = s.e.client.Session().Destroy(s.id, s.e.write(ctx))
}

// addOrphan records an ended lease whose key may still be held on the
// server; the session goroutine retries its release.
func (s *session) addOrphan(l *lease) {
	s.mu.Lock()
	s.orphans[l] = struct{}{}
	s.mu.Unlock()
}

func (s *session) retryOrphans(ctx context.Context) {
	s.mu.Lock()
	todo := make([]*lease, 0, len(s.orphans))
	for l := range s.orphans {
		todo = append(todo, l)
	}
	s.mu.Unlock()
	for _, l := range todo {
		if l.takeBack(ctx) == nil {
			s.mu.Lock()
			delete(s.orphans, l)
			s.mu.Unlock()
		}
	}
}

// run renews and watches the session until it is lost or stopped.
func (s *session) run() {
	defer s.e.wg.Done()
	e := s.e
	ttl := e.cfg.sessionTTL
	every := ttl / 2
	lastOK := time.Now()
	nextRenew := lastOK.Add(every)
	var index uint64
	// Each turn waits at least a moment (a blocking query or a back-off),
	// and the loop ends when the session is lost; the count is a backstop.
	for turn := 0; turn < 1<<30; turn++ {
		select {
		case <-s.stop:
			return
		default:
		}
		if now := time.Now(); !now.Before(nextRenew) {
			ok, gone := s.renew(min(every/2, cleanupTimeout))
			switch {
			case gone:
				s.lose("invalidated")
				return
			case ok:
				lastOK, nextRenew = now, now.Add(every)
				s.checkReleased()
			default:
				nextRenew = now.Add(min(time.Second, every/4))
			}
		}
		if time.Since(lastOK) >= ttl {
			s.lose("not renewed within its TTL")
			return
		}
		if s.orphanCount() > 0 {
			ctx, cancel := s.ctx(cleanupTimeout)
			s.retryOrphans(ctx)
			cancel()
		}
		wait := time.Until(nextRenew)
		if wait < time.Millisecond {
			continue
		}
		gone, next, err := s.watch(index, wait)
		if gone {
			s.lose("invalidated")
			return
		}
		if err != nil {
			s.pause(min(wait, 500*time.Millisecond))
			continue
		}
		index = next
	}
}

func (s *session) orphanCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.orphans)
}

// ctx returns a context that ends after d or when the session stops.
func (s *session) ctx(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	stop := context.AfterFunc(s.e.frame.Context(), cancel)
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() { stop(); cancel() }
}

// renew renews the session once: ok if it did, gone if Consul no longer
// knows it.
func (s *session) renew(limit time.Duration) (ok, gone bool) {
	ctx, cancel := s.ctx(limit)
	defer cancel()
	entry, _, err := s.e.client.Session().Renew(s.id, s.e.write(ctx))
	if err != nil {
		return false, false
	}
	return entry != nil, entry == nil
}

// watch blocks on the session's info until it changes or wait passes.
func (s *session) watch(index uint64, wait time.Duration) (gone bool, next uint64, err error) {
	ctx, cancel := s.ctx(wait + cleanupTimeout)
	defer cancel()
	q := s.e.query(ctx)
	q.WaitIndex, q.WaitTime = index, wait
	info, meta, err := s.e.client.Session().Info(s.id, q)
	if err != nil {
		return false, index, err
	}
	if info == nil {
		return true, 0, nil
	}
	next = meta.LastIndex
	if next < index {
		next = 0 // the index went backwards: start over, as Consul advises
	}
	return false, next, nil
}

// pause sleeps for d or until the session stops.
func (s *session) pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.stop:
	}
}
