// Package enginetest is the conformance suite every cerberus engine passes.
//
// An engine's tests call Run with a Factory that connects a fresh engine
// instance to a real server (see the example of Run).
//
// Each check is a subtest named after the semantic it covers (see the
// package engine documentation): mutual exclusion across many engine
// instances, TryLock versus waiting, context deadlines and cancellation,
// ownership of release, TTL expiry and renewal, fencing tokens, shared mode,
// validation before I/O, and Close. Keys are unique per run, so the suite can
// run again and again against a long-lived server.
//
// The suite also holds every engine to one meaning of its errors (see
// engine.ErrUnavailable): a caller's ended context is never
// engine.ErrUnavailable; with Options.Unreachable an engine whose server
// cannot be reached reports engine.ErrUnavailable; with Options.AccessDenied
// one the server refuses by its access control reports
// engine.ErrAccessDenied and not engine.ErrUnavailable. The suite cannot stop
// a server or change its credentials, so each engine's tests build those
// engines: pointed at a port where nothing listens, and with a wrong password
// or token.
//
// The checks are written against the small T interface rather than
// *testing.T, so the suite's own tests can run them against deliberately
// broken engines and show that each one is caught.
//
// RunList checks the optional engine.Lister (the inventory of held keys)
// apart from Run: an engine's tests call it when the engine has one.
//
// RunRelease checks the optional engine.Releaser (force release) the same
// way; RunPausedRelease checks it against a holder in another process,
// stopped with SIGSTOP through the release (the package's TestMain calls
// Hold, which is that process), and RunReleaseUpgrade against a store of
// the previous version that a migration brings up to date.
// RunNoInventory checks an engine whose type has those calls but that does
// not serve them in its configuration (errors.ErrUnsupported, after the
// arguments' checks, and nothing changed).
//
// Retry is for an engine's own token tests (a token survives a client's or
// a server's restart): it grants and cycles a key across the restart,
// trying again while the engine reports the server unavailable.
package enginetest
