package bench

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine/etcd"
	"github.com/cerberus-go/cerberus/internal/testenv"
)

// semPermits is the size of the contended semaphore.
const semPermits = 4

// BenchmarkSemaphoreContended: 16 clients, each with its own connection,
// on one semaphore of 4 permits, 1 ms held. cerberus on etcd and on Redis,
// and
// consul/api's semaphore (api.SemaphorePrefix, a new Semaphore and so a
// new session per acquisition, as its documentation shows) on Consul.
func BenchmarkSemaphoreContended(b *testing.B) {
	once(b, func() {
		eaddr, root := etcdSetup(b)
		caddr := testenv.ConsulAddr(b)
		name := fmt.Sprintf("bench-sem-%d", time.Now().UnixNano())
		res := map[string]HotKeyResult{}
		raddr, rprefix, _ := redisSetup(b)
		for lib, newClient := range map[string]func() *cerberus.Client{
			"cerberus-etcd":  func() *cerberus.Client { return etcdCerberus(b, eaddr, root) },
			"cerberus-redis": func() *cerberus.Client { return newCerberusRedis(b, raddr, rprefix) },
		} {
			r := hotKey("semaphore/"+lib, func() LockFunc { return semaphoreLock(newClient().Semaphore(name, semPermits)) },
				30*time.Second)
			r.Report(out)
			res[lib] = r
		}
		r := hotKey("semaphore/consul-api", func() LockFunc {
			return apiSemaphore(b, consulClient(b, caddr), consulPrefix+"/"+name)
		}, 30*time.Second)
		r.Report(out)
		res["consul-api"] = r
		Ratio(out, "semaphore_acq", "cerberus-etcd", "consul-api", res["cerberus-etcd"].Rate(),
			res["consul-api"].Rate())
		Ratio(out, "semaphore_wait_p99", "consul-api", "cerberus-etcd",
			float64(res["consul-api"].WaitP99), float64(res["cerberus-etcd"].WaitP99))
		Ratio(out, "semaphore_acq", "cerberus-redis", "consul-api", res["cerberus-redis"].Rate(),
			res["consul-api"].Rate())
	})
}

// semaphoreLock adapts a cerberus Semaphore to LockFunc.
func semaphoreLock(sem *cerberus.Semaphore) LockFunc {
	return func(ctx context.Context) (func() error, error) {
		l, err := sem.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		return func() error { return l.Unlock(context.Background()) }, nil
	}
}

// apiSemaphore adapts consul/api's Semaphore: one new Semaphore (and
// session) per acquisition, as its documentation shows.
func apiSemaphore(b *testing.B, c *api.Client, prefix string) LockFunc {
	return func(ctx context.Context) (func() error, error) {
		s, err := c.SemaphorePrefix(prefix, semPermits)
		if err != nil {
			return nil, err
		}
		if _, err := s.Acquire(ctx.Done()); err != nil {
			return nil, err
		}
		if ctx.Err() != nil {
			_ = s.Release()
			return nil, ctx.Err()
		}
		return s.Release, nil
	}
}

// etcdCerberus makes a cerberus Client on an etcd engine of its own
// connection, closed when the benchmark ends.
func etcdCerberus(b *testing.B, addr, root string) *cerberus.Client {
	b.Helper()
	e, err := etcd.New(newEtcdClient(b, addr), etcd.WithPrefix(root+"cerberus/"), etcd.WithLeaseTTL(etcdLeaseTTL))
	if err != nil {
		b.Fatal(err)
	}
	c, err := cerberus.New(e)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// candidate is one library's election participant: campaign blocks until
// it leads; resign gives leadership up.
type candidate struct {
	campaign func(ctx context.Context) error
	resign   func() error
}

// handoverRounds is how many resignations each election library does.
const handoverRounds = 40

// BenchmarkElectionHandover: two candidates, each with its own connection;
// one leads, the other campaigns; the time from the leader starting to
// resign to the other's Campaign returning, alternately, handoverRounds
// times. cerberus's Election on etcd against etcd's own
// concurrency.Election, the rounds of the two interleaved.
func BenchmarkElectionHandover(b *testing.B) {
	once(b, func() {
		addr, root := etcdSetup(b)
		libs := map[string]func() candidate{
			"cerberus": func() candidate {
				el := etcdCerberus(b, addr, root).Election("handover")
				var l *cerberus.Lease
				return candidate{
					campaign: func(ctx context.Context) (err error) { l, err = el.Campaign(ctx, "x"); return err },
					resign:   func() error { return l.Unlock(context.Background()) },
				}
			},
			"concurrency.Election": func() candidate {
				s, err := concurrency.NewSession(newEtcdClient(b, addr), concurrency.WithTTL(int(etcdLeaseTTL/time.Second)))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = s.Close() })
				el := concurrency.NewElection(s, root+"election/handover")
				return candidate{
					campaign: func(ctx context.Context) error { return el.Campaign(ctx, "x") },
					resign:   func() error { return el.Resign(context.Background()) },
				}
			},
		}
		names := []string{"cerberus", "concurrency.Election"}
		pairs := map[string][2]candidate{}
		leader := map[string]int{}
		for _, n := range names {
			pairs[n] = [2]candidate{libs[n](), libs[n]()}
			if err := pairs[n][0].campaign(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
		samples := map[string][]time.Duration{}
		for round := range handoverRounds {
			for _, n := range names {
				d, err := handover(pairs[n][leader[n]], pairs[n][1-leader[n]])
				if err != nil {
					b.Fatalf("%s round %d: %v", n, round, err)
				}
				samples[n] = append(samples[n], d)
				leader[n] = 1 - leader[n]
			}
		}
		p50 := map[string]time.Duration{}
		for _, n := range names {
			s := samples[n]
			slices.Sort(s)
			p50[n] = s[len(s)/2]
			fmt.Fprintf(out, "BENCH election_handover/%s p50_us=%.0f p99_us=%.0f rounds=%d\n", n, us(s[len(s)/2]),
				us(s[len(s)*99/100]), len(s))
		}
		Ratio(out, "election_handover_p50", "concurrency.Election", "cerberus", float64(p50["concurrency.Election"]),
			float64(p50["cerberus"]))
	})
}

// handover makes next campaign while cur leads, then resigns cur, and
// returns the time from the resignation to next's Campaign returning.
func handover(cur, next candidate) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	won := make(chan error, 1)
	go func() { won <- next.campaign(ctx) }()
	time.Sleep(20 * time.Millisecond) // let next's campaign reach the server
	t0 := time.Now()
	if err := cur.resign(); err != nil {
		return 0, err
	}
	if err := <-won; err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// killLeaseTTL is the etcd lease period of the killed-leader runs: the
// hand-over then waits for etcd to expire the dead leader's lease.
const killLeaseTTL = 2 * time.Second

// killRounds is how many leaders each library loses in the killed-leader
// runs.
const killRounds = 3

// BenchmarkElectionKilledLeader: a leader whose connection is closed
// without resigning (its process died), while another candidate
// campaigns; the time from the kill to the other's Campaign returning.
// Both libraries use a 2 s etcd lease, so the floor is etcd expiring it.
func BenchmarkElectionKilledLeader(b *testing.B) {
	once(b, func() {
		addr, root := etcdSetup(b)
		// Each library makes a candidate on a client of its own and the function
		// that kills that client.
		libs := map[string]func(name string) (candidate, func()){
			"cerberus": func(name string) (candidate, func()) {
				cli := newEtcdClient(b, addr)
				e, err := etcd.New(cli, etcd.WithPrefix(root+"cerberus/"), etcd.WithLeaseTTL(killLeaseTTL))
				if err != nil {
					b.Fatal(err)
				}
				c, err := cerberus.New(e)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = c.Close() })
				el := c.Election(name)
				return candidate{campaign: func(ctx context.Context) error { _, err := el.Campaign(ctx, "x"); return err }},
					func() { _ = cli.Close() }
			},
			"concurrency.Election": func(name string) (candidate, func()) {
				cli := newEtcdClient(b, addr)
				s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(killLeaseTTL/time.Second)))
				if err != nil {
					b.Fatal(err)
				}
				el := concurrency.NewElection(s, root+"election/"+name)
				return candidate{campaign: func(ctx context.Context) error { return el.Campaign(ctx, "x") }},
					func() { _ = cli.Close() }
			},
		}
		names := []string{"cerberus", "concurrency.Election"}
		samples := map[string][]time.Duration{}
		for round := range killRounds {
			for _, n := range names {
				name := fmt.Sprintf("killed-%d", round)
				leader, kill := libs[n](name)
				next, _ := libs[n](name)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				if err := leader.campaign(ctx); err != nil {
					b.Fatalf("%s: %v", n, err)
				}
				won := make(chan error, 1)
				go func() { won <- next.campaign(ctx) }()
				time.Sleep(50 * time.Millisecond)
				t0 := time.Now()
				kill()
				if err := <-won; err != nil {
					b.Fatalf("%s round %d: %v", n, round, err)
				}
				samples[n] = append(samples[n], time.Since(t0))
				cancel()
			}
		}
		med := map[string]time.Duration{}
		for _, n := range names {
			s := samples[n]
			slices.Sort(s)
			med[n] = s[len(s)/2]
			fmt.Fprintf(out, "BENCH election_killed/%s median_ms=%.0f max_ms=%.0f rounds=%d lease_ttl_s=%.0f\n", n,
				ms(s[len(s)/2]), ms(s[len(s)-1]), len(s), killLeaseTTL.Seconds())
		}
		Ratio(out, "election_killed_median", "concurrency.Election", "cerberus", float64(med["concurrency.Election"]),
			float64(med["cerberus"]))
	})
}
