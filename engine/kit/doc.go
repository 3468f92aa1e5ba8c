// Package kit holds the helpers the cerberus engines are built from, apart
// from the contract in package engine that they implement: the frame around
// every engine's protocol (Base, ReleaseAll), what every lease holds and
// reports alike (LeaseCore, with its close-once loss notice, Signal), bounded clean-up after an ended wait
// (Background, WaitUpTo, UndoWait), one waiting call per key and engine on
// the server (Turns), and the renewal and polling frame of the engines
// that renew in rounds and poll (RenewRounds, Pace, InBatches, Backoff),
// and the tokens of an engine that are its server's clock: their ticks
// (Ticks, TickEnd) and the waits before it frees a lock: by releasing it
// (FreeAt) or by closing a connection (ClockGuard), each with WaitPast.
//
// An engine written outside this module may use them too; nothing in them
// is specific to one server. Package engine's documentation, "Writing an
// engine", says how they fit together.
package kit
