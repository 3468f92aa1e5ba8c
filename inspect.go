package cerberus

import "github.com/cerberus-go/cerberus/engine"

// inspectorOf returns the engine.Inspector of e, looking through wrappers
// (engine.Wrapper), or nil when e has none.
func inspectorOf(e engine.Engine) engine.Inspector {
	for e != nil {
		if in, ok := e.(engine.Inspector); ok {
			return in
		}
		w, ok := e.(engine.Wrapper)
		if !ok {
			return nil
		}
		e = w.Unwrap()
	}
	return nil
}

// watcherOf returns the engine.Watcher of e, looking through wrappers, or
// nil when e has none.
func watcherOf(e engine.Engine) engine.Watcher {
	for e != nil {
		if w, ok := e.(engine.Watcher); ok {
			return w
		}
		u, ok := e.(engine.Wrapper)
		if !ok {
			return nil
		}
		e = u.Unwrap()
	}
	return nil
}
