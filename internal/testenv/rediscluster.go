package testenv

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"
)

// RedisCluster is a Redis Cluster of a test's own: masters only, no
// replicas, every node a RedisServer on loopback.
type RedisCluster struct {
	// Nodes are the masters; node i serves the i-th share of the slots.
	Nodes []*RedisServer
	// Addrs are the nodes' addresses, Addrs[i] == Nodes[i].Addr.
	Addrs []string

	t testing.TB
}

// redisClusterNodeTimeout is cluster-node-timeout: how long a node may be
// unreachable before the others mark it failed.
const redisClusterNodeTimeout = 2 * time.Second

// StartRedisCluster starts n (at least three) redis-servers in cluster mode
// (no persistence, cluster-node-timeout 2s), spreads the 16384 slots evenly
// over them as masters without replicas, and waits until every node reports
// cluster_state:ok. Each node keeps its cluster config (nodes.conf) in its
// own Dir, so a node brought back with Restart rejoins the cluster, empty;
// its Restart waits for PING and, when every node of the cluster runs, for
// cluster_state:ok on all of them. All nodes are killed when the test ends.
//
// Node ports are below 20000, so that each one's cluster bus port (port +
// 10000) is below the ephemeral range as well.
func StartRedisCluster(t testing.TB, n int) *RedisCluster {
	t.Helper()
	if n < MinRedisClusterNodes {
		t.Fatalf("testenv: StartRedisCluster(%d): a Redis Cluster needs at least %d masters", n,
			MinRedisClusterNodes)
		return nil
	}
	c := &RedisCluster{t: t}
	for range n {
		port := freePort(t, 10000, 20000, 10000)
		s := prepareRedis(t, port, []string{"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(redisClusterNodeTimeout.Milliseconds(), 10)})
		s.name = "Redis Cluster node at " + s.Addr
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	for _, s := range c.Nodes {
		s.launch()
	}
	for _, s := range c.Nodes {
		s.await()
	}
	c.form()
	for _, s := range c.Nodes {
		addr := s.Addr
		s.ready = func() error {
			if err := talk(addr, time.Second, probeRedis); err != nil {
				return err
			}
			if !c.allUp() {
				return nil
			}
			return c.healthy()
		}
	}
	c.Wait()
	return c
}

// form assigns the slots, gives each node its own config epoch, and
// introduces every node to the first one.
func (c *RedisCluster) form() {
	c.t.Helper()
	const slots = 16384
	n := len(c.Nodes)
	for i, s := range c.Nodes {
		args := []string{"CLUSTER", "ADDSLOTS"}
		for slot := i * slots / n; slot < (i+1)*slots/n; slot++ {
			args = append(args, strconv.Itoa(slot))
		}
		if _, err := redisDo(s.Addr, args...); err != nil {
			c.t.Fatalf("testenv: Redis Cluster node %s: %v%s", s.Addr, err, s.tail())
			return
		}
		if _, err := redisDo(s.Addr, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			c.t.Fatalf("testenv: Redis Cluster node %s: %v%s", s.Addr, err, s.tail())
			return
		}
	}
	for _, s := range c.Nodes[1:] {
		port := s.Addr[len("127.0.0.1:"):]
		if _, err := redisDo(c.Nodes[0].Addr, "CLUSTER", "MEET", "127.0.0.1", port); err != nil {
			c.t.Fatalf("testenv: Redis Cluster node %s: %v%s", c.Nodes[0].Addr, err, c.Nodes[0].tail())
			return
		}
	}
}

// Wait waits until every node answers and reports cluster_state:ok, for
// instance after a Resume. It fails the test if that takes over a minute
// (a node that is not running never reports it).
func (c *RedisCluster) Wait() {
	c.t.Helper()
	if _, err := poll(time.Minute, 50*time.Millisecond,
		func() (struct{}, error) { return struct{}{}, c.healthy() }); err != nil {
		c.t.Fatalf("testenv: the Redis Cluster %v is not ok after a minute: %v", c.Addrs, err)
	}
}

func (c *RedisCluster) allUp() bool {
	for _, s := range c.Nodes {
		if !s.up() {
			return false
		}
	}
	return true
}

// healthy checks PING and cluster_state:ok on every node.
func (c *RedisCluster) healthy() error {
	for _, s := range c.Nodes {
		if err := talk(s.Addr, 2*time.Second, probeRedisCluster); err != nil {
			return fmt.Errorf("node %s: %w", s.Addr, err)
		}
	}
	return nil
}

// each runs f on every element at once and waits for all: kills of several
// servers then take as long as the slowest, not the sum.
func each[T any](xs []T, f func(T)) {
	var wg sync.WaitGroup
	for _, x := range xs {
		wg.Go(func() { f(x) })
	}
	wg.Wait()
}

// restartAll kills every node at once, as a power cut would, then starts
// them all again on their ports with their data and waits for each to
// answer.
func restartAll[T interface {
	Kill()
	launch()
	await()
}](nodes []T) {
	each(nodes, T.Kill)
	for _, n := range nodes {
		n.launch()
	}
	for _, n := range nodes {
		n.await()
	}
}

// poll calls f every interval until it returns no error, and returns what
// it returned; after wait it gives up with f's last error.
func poll[T any](wait, interval time.Duration, f func() (T, error)) (T, error) {
	deadline := time.Now().Add(wait)
	for {
		v, err := f()
		if err == nil || time.Now().After(deadline) {
			return v, err
		}
		time.Sleep(interval)
	}
}
