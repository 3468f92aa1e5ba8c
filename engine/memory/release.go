package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/cerberus-go/cerberus/engine"
)

var _ engine.Releaser = (*Engine)(nil)

// ForceRelease frees key in the engine's Store whoever holds it; see
// engine.Releaser. Every holder, on any engine of the Store, is told at
// once (Done closes with engine.ErrReleasedByOperator) before the key is
// handed to the head of its queue with the next token. It returns
// engine.ErrClosed after Close.
func (e *Engine) ForceRelease(ctx context.Context, key string) ([]engine.Holder, error) {
	if err := engine.CheckKey(key, e.Limits().MaxKeyLen); err != nil {
		return nil, err
	}
	if e.frame.Closed() {
		return nil, engine.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := e.store
	s.mu.Lock()
	ent := s.locks[key]
	var freed []*lease
	if ent != nil {
		if ent.writer != nil {
			freed = append(freed, ent.writer)
		}
		for r := range ent.readers {
			freed = append(freed, r)
		}
	}
	if len(freed) == 0 {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %q is free", engine.ErrNotHeld, key)
	}
	// Out of the entry first, so that their Release finds them gone; the
	// queue waits until they are told.
	ent.writer = nil
	clear(ent.readers)
	s.mu.Unlock()
	slices.SortFunc(freed, func(a, b *lease) int { return cmp.Compare(a.Token(), b.Token()) })
	hs := make([]engine.Holder, len(freed))
	for i, l := range freed {
		hs[i] = l.holder()
		l.stop()
		l.Signal.Close(fmt.Errorf("%w: %q", engine.ErrReleasedByOperator, key))
	}
	s.mu.Lock()
	if s.locks[key] == ent {
		s.notify(key)
		s.handOff(ent)
		s.tidy(key, ent)
	}
	s.mu.Unlock()
	return hs, nil
}
