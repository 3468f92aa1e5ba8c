package redis

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// benchLeases grants n renewed leases on five private nodes, with a TTL
// long enough that no renewal or re-take runs on its own during the
// benchmark.
func benchLeases(b *testing.B, n int) (*Redlock, []*redlockLease) {
	b.Helper()
	servers, _ := redlockNodes(b)
	r := newRedlock(b, servers)
	leases := make([]*redlockLease, n)
	for i := range leases {
		req := engine.Request{Key: fmt.Sprintf("bench/%d", i), Mode: engine.Exclusive, TTL: time.Minute, Renew: true}
		l, err := r.Acquire(context.Background(), req)
		if err != nil {
			b.Fatal(err)
		}
		leases[i] = l.(*redlockLease)
	}
	for _, l := range leases {
		for held, _ := l.Nodes(); held < len(servers); held, _ = l.Nodes() {
			l.heal() // a node that timed out under the burst of grants
		}
	}
	return r, leases
}

// BenchmarkRedlockRenewal measures one renewal round of n leases held on
// all five nodes: every node engine renews all of them, the five in
// parallel, as their loops do when the leases fall due together. Healing
// adds nothing to it while every node holds every lease.
func BenchmarkRedlockRenewal(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("leases=%d", n), func(b *testing.B) {
			r, _ := benchLeases(b, n)
			b.ReportAllocs()
			for b.Loop() {
				var wg sync.WaitGroup
				for _, e := range r.nodes {
					wg.Go(func() {
						e.mu.Lock()
						for l := range e.frame.AllLocked() {
							l.due = time.Now()
						}
						e.mu.Unlock()
						e.renewDue()
					})
				}
				wg.Wait()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/lease")
		})
	}
}

// BenchmarkRedlockRetake measures re-taking one node for n leases, as
// after that node restarted empty: each lease's re-take round (the acquire
// script, then the fence raise) runs for all n at once.
func BenchmarkRedlockRetake(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("leases=%d", n), func(b *testing.B) {
			_, leases := benchLeases(b, n)
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				for _, l := range leases {
					dropNode(b, l, 0)
				}
				b.StartTimer()
				var wg sync.WaitGroup
				for _, l := range leases {
					wg.Go(l.heal)
				}
				wg.Wait()
			}
			for _, l := range leases {
				if held, _ := l.Nodes(); held != 5 {
					b.Fatalf("%s holds %d nodes after its re-take round", l.Key(), held)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/lease")
		})
	}
}

// dropNode gives up l's lease on node i as if the node had lost it.
func dropNode(b *testing.B, l *redlockLease, i int) {
	l.mu.Lock()
	h := l.parts[i]
	l.parts[i] = nil
	l.held--
	l.mu.Unlock()
	if err := h.l.Release(context.Background()); err != nil {
		b.Fatal(err)
	}
}
