// Package integration holds the tests that run against real servers: Redis,
// ZooKeeper, Consul, MySQL/MariaDB, etcd and PostgreSQL, reached with their
// real Go clients.
//
// smoke_test.go does one small round trip per server, so a broken test
// environment shows up as a plain, early failure rather than as a confusing
// one deep inside an engine's tests. Server addresses come from
// internal/testenv (the CERBERUS_* environment variables); a server that does
// not answer fails the test with the command that starts it:
//
//	scripts/services.sh up              # start the test servers
//	eval "$(scripts/services.sh env)"   # export their addresses
//	go test -race -count=1 ./integration/
//
// or simply `make test`, which does all of that for the whole module.
package integration
