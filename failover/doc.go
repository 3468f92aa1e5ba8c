// Package failover is the failover manager: a Manager is an engine.Engine
// over several engines in priority order. It dispatches to the active one,
// pings all of them, and moves to another on an operator's SetActive or,
// with Options.Auto, when the active engine is down. Give it to
// cerberus.New like any engine:
//
//	m, err := failover.New([]failover.NamedEngine{
//		{Name: "primary", Engine: primary},
//		{Name: "backup", Engine: backup},
//	}, failover.Options{Fence: true})
//	c, err := cerberus.New(m)
//
// SetActive and Options.Auto move this process alone. Processes of a fleet
// that switch one by one grant the same keys on two engines in between, so
// a fleet switches together through a shared key: package config builds a
// Manager from a file, with that key (engine_key), and calls Follow in
// every process. Package metrics watches a Manager.
//
// The files follow the concerns: options.go (Options, Configure),
// manager.go (Manager, New, Status, Close), acquire.go (Acquire and the
// Manager's leases), health.go (the health loop and quick probes),
// switch.go (SetActive, Follow, the switch and the fence), fleet.go (what
// a fleet coordinator reports), active.go (DecideActive, the one rule for
// "which engine is active"), handler.go (the HTTP status and switch
// handler) and inspect.go (Holders and Watch, for semaphores and
// elections).
//
// # Switching
//
// A switch loses the locks held on the old engine, and says so: every lease
// granted there closes Done with cerberus.ErrEngineSwitched at once (Unlock
// then returns cerberus.ErrNotHeld), and is released on the old engine in
// the background where that engine still answers. Waiters move to the new
// engine. With Options.Fence, the first grant on the new engine waits until
// the old leases must have expired.
//
// # Detection
//
// Health rounds run on a fixed schedule, one every Options.Interval from
// start to start, and each waits for its pings at most 9/10 of Interval,
// whatever a client library's own retries do (a ping still running then
// counts as failed). So an engine that stops answering is marked down
// within Interval x Threshold of its failure. Calls on real traffic count
// too: an Acquire, Release or renewal on the active engine that fails with
// engine.ErrUnavailable (while its caller's context is live) starts a quick
// probe at once: the active engine is pinged, and again every
// QuickProbeSpacing, until it answers or has failed Threshold times in a
// row. A busy service thus notices an outage in about one round trip plus
// (Threshold-1) x QuickProbeSpacing; one failed call on a healthy engine
// costs one ping and changes nothing.
//
// # Tokens across a switch
//
// Every switch increments the epoch, and a lease's Token is epoch<<48 |
// the engine's token. So a resource that fences on Token sees every grant
// of the new epoch above every grant of the old one, whichever engines
// issued them. Engine tokens must fit in 48 bits (a grant whose token does
// not is refused and released); every cerberus engine's does in practice
// (ZooKeeper's czxid carries the ensemble epoch in its high 32 bits, which
// would need 2^16 leader elections to overflow; Redis tokens follow the
// server's clock in 8µs units from 2025, which fit in 48 bits until about
// 2096).
//
// Epochs are per process. Processes that switch together (an operator's
// flip through shared configuration, Options.Epoch set alike) keep equal
// epochs. A process that has not switched yet keeps the lower epoch: a
// fenced resource refuses its writes once a switched process has written,
// which is safe. A process that switched more often than the others (say,
// away and back on a flapping health check) gets a higher epoch, and its
// writes then shut out the others' until they switch too: safe, but a loss
// of availability; keep Failback off and give every process the same
// configuration.
package failover
