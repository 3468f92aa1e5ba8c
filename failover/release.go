package failover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/cerberus-go/cerberus/engine"
)

var _ engine.Releaser = (*Manager)(nil)

// ReleaseEvent is one force release (Manager.ReleaseOn), as
// Options.OnRelease receives it.
type ReleaseEvent struct {
	// Engine names the engine the key was freed on.
	Engine string
	// Key is the key freed.
	Key string
	// By names who asked: Options.Caller's answer for the Handler, the
	// caller's by for ReleaseOn.
	By string
	// Holders are the leases freed, in grant order, with tokens as
	// ReleaseOn returns them.
	Holders []engine.Holder
}

// ForceRelease frees key on the active engine; see engine.Releaser and
// ReleaseOn. Its tokens carry the epoch, as the Manager's leases' do.
func (m *Manager) ForceRelease(ctx context.Context, key string) ([]engine.Holder, error) {
	return m.ReleaseOn(ctx, "", key, "")
}

// ReleaseOn frees key on the engine named name (the active one for ""),
// whoever holds it, through that engine's engine.Releaser: the next
// waiter is granted at once and the freed holders are told with
// engine.ErrReleasedByOperator, each engine's doc says when. by names who
// asked, for the log. It returns the freed holders; on the active engine
// their tokens carry the epoch (as Holders and List give them), on another
// engine they are that engine's own (the epoch they were granted in is not
// kept). It checks key before any I/O (engine.ErrInvalidKey) and returns
// an error wrapping ErrUnknownEngine for an unknown name, engine.ErrNotHeld
// for a key nobody holds, and engine.ErrInvalidRequest for an engine that
// cannot force-release. Each release is logged (Options.Logger, at Warn,
// with key, engine, tokens and by) and passed to Options.OnRelease.
func (m *Manager) ReleaseOn(ctx context.Context, name, key, by string) ([]engine.Holder, error) {
	if err := engine.CheckKey(key, m.Limits().MaxKeyLen); err != nil {
		return nil, err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, engine.ErrClosed
	}
	idx, epoch, onRelease, log := m.active, m.epoch, m.opts.OnRelease, m.opts.Logger
	if name != "" {
		idx = m.index(name)
	}
	m.mu.Unlock()
	if idx < 0 {
		return nil, fmt.Errorf("%w: %q", ErrUnknownEngine, name)
	}
	ne := m.engines[idx]
	rel := engine.ReleaserOf(ne.Engine)
	if rel == nil {
		return nil, fmt.Errorf("%w: engine %s cannot force-release a key", engine.ErrInvalidRequest, ne.Name)
	}
	hs, err := rel.ForceRelease(ctx, key)
	if err != nil {
		return nil, err
	}
	if name == "" || m.Active() == ne.Name {
		for i := range hs {
			hs[i].Token |= epoch << tokenBits
		}
	}
	if log == nil {
		log = slog.Default()
	}
	log.Warn("cerberus force release", slog.String("key", key), slog.String("engine", ne.Name),
		slog.Any("tokens", tokens(hs)), slog.String("by", by))
	if onRelease != nil {
		onRelease(ReleaseEvent{Engine: ne.Name, Key: key, By: by, Holders: hs})
	}
	return hs, nil
}

// index returns the position of the engine named name, or -1.
func (m *Manager) index(name string) int {
	for i, ne := range m.engines {
		if ne.Name == name {
			return i
		}
	}
	return -1
}

func tokens(hs []engine.Holder) []uint64 {
	out := make([]uint64, len(hs))
	for i, h := range hs {
		out[i] = h.Token
	}
	return out
}

// errBadRelease is a release POST the handler cannot act on.
var errBadRelease = errors.New("cerberus: bad release request")

// releaseDoc is the Handler's answer to a release.
type releaseDoc struct {
	Released string      `json:"released"`
	Engine   string      `json:"engine"`
	By       string      `json:"by"`
	Holders  []holderDoc `json:"holders"`
}

type holderDoc struct {
	Mode  string `json:"mode"`
	Token uint64 `json:"token"`
	Value string `json:"value"`
}

// handleRelease carries out a release POST: form release=KEY and
// confirm=KEY (the same key, typed twice), engine=NAME optional (the
// active engine).
func (m *Manager) handleRelease(r *http.Request) (releaseDoc, error) {
	key, confirm, name := r.FormValue("release"), r.FormValue("confirm"), r.FormValue("engine")
	if key == "" || confirm != key {
		return releaseDoc{}, fmt.Errorf("%w: confirm must repeat the key to release (release=KEY&confirm=KEY)",
			errBadRelease)
	}
	if err := engine.CheckKey(key, m.Limits().MaxKeyLen); err != nil {
		return releaseDoc{}, errors.Join(errBadRelease, err)
	}
	if name != "" && !m.has(name) {
		return releaseDoc{}, fmt.Errorf("%w: %q", ErrUnknownEngine, name)
	}
	m.mu.Lock()
	caller := m.opts.Caller
	m.mu.Unlock()
	by := r.RemoteAddr
	if caller != nil {
		by = caller(r)
	}
	if name == "" {
		name = m.Active()
	}
	hs, err := m.ReleaseOn(r.Context(), name, key, by)
	if err != nil {
		return releaseDoc{}, err
	}
	doc := releaseDoc{Released: key, Engine: name, By: by, Holders: make([]holderDoc, len(hs))}
	for i, h := range hs {
		doc.Holders[i] = holderDoc{Mode: h.Mode.String(), Token: h.Token, Value: h.Value}
	}
	return doc, nil
}

// serveRelease answers a release POST.
func (m *Manager) serveRelease(w http.ResponseWriter, r *http.Request) {
	doc, err := m.handleRelease(r)
	if err != nil {
		code := http.StatusInternalServerError
		switch {
		case errors.Is(err, errBadRelease) || errors.Is(err, engine.ErrInvalidKey):
			code = http.StatusBadRequest
		case errors.Is(err, engine.ErrNotHeld) || errors.Is(err, ErrUnknownEngine):
			code = http.StatusNotFound
		}
		postError(w, r, err.Error(), code)
		return
	}
	if wantsHTML(r.Header.Values("Accept")) {
		writeOutcome(w, http.StatusOK, releaseOutcome(doc))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(doc)
}
