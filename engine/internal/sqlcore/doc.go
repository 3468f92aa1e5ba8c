// Package sqlcore is the lease strategy that the MySQL and PostgreSQL
// engines share, written once: the lease of a row (exclusive) or a reader
// row (shared) that names its owner value until it is cleared or expires
// on the server's clock; the polling grant loop (kit.Turns,
// kit.Backoff, transient retries, the undo of a grant whose outcome is
// unknown); renewal in rounds (kit.RenewRounds, kit.Pace); Holders;
// and the parts of the engine frame both engines put around their
// strategies (the lease registry, Ping, Close, owner values).
//
// An engine keeps only its dialect: the statements and how it sends them,
// behind Dialect, and its other strategy (MySQL's row locks, PostgreSQL's
// advisory-lock sessions), which uses the Core's Frame and Mu as well.
//
// The package is internal to engine/: it is no part of the public API, and
// the engines keep their Core in a named field so that its methods do not
// join theirs.
package sqlcore
