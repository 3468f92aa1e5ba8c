// Package bench measures cerberus side by side with peer lock libraries on
// the same servers, in the same run. It is a module of its own so that the
// peers never enter the dependency graph of cerberus's users.
//
// # Uncontended figures of the SQL engines
//
// The uncontended figures of MySQL and PostgreSQL run in rounds of fresh
// clients (InterleavedRounds; flags -sql-rounds and -sql-round-cycles):
// each round makes every library's client anew, so each has new
// connections, runs each library's cycles interleaved in an order drawn
// for the round, and closes them. Each server connection is served by a
// thread of its own, and on a virtual machine with two vCPUs where that
// thread runs decides much of a cycle's time: forty fresh connections of
// the same bare GET_LOCK/RELEASE_LOCK loop ran at 42-165 µs a cycle, one
// from the next, in one run (2026-12-02). A run that keeps one connection
// per library measures where its threads landed nearly as much as the
// library (the same engine came out at 0.57x-0.90x the bare lock in four
// such runs), and many rounds give every library the same draw. A second
// client of the bare lock (get_lock#2, advisory#2) runs beside the first:
// its ratio to the first is what the run can resolve.
//
// On that machine, time a client spends between an answer and its next
// statement costs about twice itself in cycle time: a bare GET_LOCK loop
// that waited 2, 5 and 15 µs between the grant's answer and the release
// ran at 0.93x, 0.88x-0.92x and 0.72x-0.76x of the same loop without the
// wait. (A server thread that has gone idle by the time the next
// statement arrives is woken on a vCPU that halted, which costs more than
// the wait.) A library's own work on the client weighs accordingly.
package bench
