package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/go-zookeeper/zk"
	consul "github.com/hashicorp/consul/api"
	"github.com/redis/go-redis/v9"

	"github.com/cerberus-go/cerberus/internal/testenv"
)

// Bounds for every wait in these tests.
const (
	dialTimeout = 2 * time.Second
	opTimeout   = 5 * time.Second
	testTimeout = 30 * time.Second
)

// unique returns a name no other run (or parallel test) uses.
func unique(t *testing.T, prefix string) string {
	t.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return prefix + "-" + hex.EncodeToString(b[:])
}

// testContext is cancelled when the test ends or after testTimeout.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// cleanupContext bounds the work done in a t.Cleanup.
func cleanupContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), opTimeout)
}

func TestRedisSmoke(t *testing.T) {
	t.Parallel()
	addr := testenv.RedisAddr(t)
	ctx := testContext(t)

	rdb := redis.NewClient(&redis.Options{
		Addr:         addr,
		DialTimeout:  dialTimeout,
		ReadTimeout:  opTimeout,
		WriteTimeout: opTimeout,
		MaxRetries:   1,
	})
	t.Cleanup(func() { rdb.Close() })

	key := unique(t, "cerberus:smoke")
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		rdb.Del(ctx, key)
	})

	value := unique(t, "value")
	if err := rdb.Set(ctx, key, value, time.Minute).Err(); err != nil {
		t.Fatalf("redis SET %s at %s: %v", key, addr, err)
	}
	got, err := rdb.Get(ctx, key).Result()
	if err != nil {
		t.Fatalf("redis GET %s: %v", key, err)
	}
	if got != value {
		t.Fatalf("redis GET %s = %q, want %q", key, got, value)
	}
	n, err := rdb.Del(ctx, key).Result()
	if err != nil || n != 1 {
		t.Fatalf("redis DEL %s = %d, %v; want 1, nil", key, n, err)
	}
	if err := rdb.Get(ctx, key).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("redis GET after DEL: err = %v, want redis.Nil", err)
	}
}

// TestRedisClusterSmoke writes and reads one key on every master through a
// ClusterClient, so each node's slots and the MOVED redirects between the
// nodes' announced addresses are exercised.
func TestRedisClusterSmoke(t *testing.T) {
	t.Parallel()
	addrs := testenv.RedisClusterAddrs(t)
	ctx := testContext(t)

	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:        addrs,
		DialTimeout:  dialTimeout,
		ReadTimeout:  opTimeout,
		WriteTimeout: opTimeout,
		MaxRetries:   1,
	})
	t.Cleanup(func() { rdb.Close() })

	masters := make(map[string]bool)
	if err := rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		return c.Ping(ctx).Err()
	}); err != nil {
		t.Fatalf("redis cluster at %v: PING every master: %v", addrs, err)
	}
	shards, err := rdb.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatalf("redis CLUSTER SHARDS at %v: %v", addrs, err)
	}
	for _, sh := range shards {
		for _, n := range sh.Nodes {
			if n.Role == "master" && len(sh.Slots) > 0 {
				masters[fmt.Sprintf("%s:%d", n.IP, n.Port)] = true
			}
		}
	}
	if len(masters) < len(addrs) {
		t.Fatalf("redis cluster at %v has %d masters serving slots (%v), want %d", addrs, len(masters), masters, len(addrs))
	}

	// One key per master: keys whose slots land on masters not yet covered.
	prefix := unique(t, "cerberus:smoke")
	keys := make(map[string]string) // master address -> key
	for i := 0; len(keys) < len(masters) && i < 10000; i++ {
		key := fmt.Sprintf("%s:%d", prefix, i)
		m, err := rdb.MasterForKey(ctx, key)
		if err != nil {
			t.Fatalf("redis cluster: master for %s: %v", key, err)
		}
		if _, ok := keys[m.Options().Addr]; !ok {
			keys[m.Options().Addr] = key
		}
	}
	if len(keys) < len(masters) {
		t.Fatalf("redis cluster: keys reach only masters %v of %v", keys, masters)
	}
	slots := make(map[int64]bool)
	for master, key := range keys {
		t.Cleanup(func() {
			ctx, cancel := cleanupContext()
			defer cancel()
			rdb.Del(ctx, key)
		})
		slot, err := rdb.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatalf("redis CLUSTER KEYSLOT %s: %v", key, err)
		}
		slots[slot] = true

		value := unique(t, "value")
		if err := rdb.Set(ctx, key, value, time.Minute).Err(); err != nil {
			t.Fatalf("redis cluster SET %s (slot %d, master %s): %v", key, slot, master, err)
		}
		got, err := rdb.Get(ctx, key).Result()
		if err != nil {
			t.Fatalf("redis cluster GET %s (slot %d, master %s): %v", key, slot, master, err)
		}
		if got != value {
			t.Fatalf("redis cluster GET %s = %q, want %q", key, got, value)
		}
		// The key lives on that master and nowhere else.
		if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 1 {
			t.Fatalf("redis cluster EXISTS %s = %d, %v; want 1, nil", key, n, err)
		}
		if n, err := rdb.Del(ctx, key).Result(); err != nil || n != 1 {
			t.Fatalf("redis cluster DEL %s = %d, %v; want 1, nil", key, n, err)
		}
	}
	if len(slots) != len(keys) {
		t.Fatalf("redis cluster: keys %v share slots %v", keys, slots)
	}
}

// TestRedlockNodesSmoke pings each independent Redis for Redlock and checks
// that they are distinct servers, none of them in cluster mode.
func TestRedlockNodesSmoke(t *testing.T) {
	t.Parallel()
	addrs := testenv.RedlockAddrs(t)
	ctx := testContext(t)

	ids := make(map[string]string) // run_id -> address
	for _, addr := range addrs {
		rdb := redis.NewClient(&redis.Options{
			Addr:         addr,
			DialTimeout:  dialTimeout,
			ReadTimeout:  opTimeout,
			WriteTimeout: opTimeout,
			MaxRetries:   1,
		})
		t.Cleanup(func() { rdb.Close() })
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Fatalf("redis PING %s: %v", addr, err)
		}
		info, err := rdb.InfoMap(ctx, "server", "cluster").Result()
		if err != nil {
			t.Fatalf("redis INFO at %s: %v", addr, err)
		}
		if info["Cluster"]["cluster_enabled"] == "1" {
			t.Fatalf("redis at %s is in cluster mode; Redlock needs independent servers", addr)
		}
		id := info["Server"]["run_id"]
		if id == "" {
			t.Fatalf("redis INFO server at %s has no run_id", addr)
		}
		if other, ok := ids[id]; ok {
			t.Fatalf("%s and %s are the same Redis server (run_id %s); Redlock needs independent ones", other, addr, id)
		}
		ids[id] = addr
	}
}

func TestZooKeeperSmoke(t *testing.T) {
	t.Parallel()
	addr := testenv.ZooKeeperAddr(t)

	// 10 s lies within the server's session bounds (2 and 20 ticks of 2 s).
	// The client dials with a 1 s timeout and retries until Close.
	conn, events, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatalf("zk.Connect(%s): %v", addr, err)
	}
	t.Cleanup(conn.Close)

	deadline := time.After(opTimeout * 2)
	for connected := false; !connected; {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				connected = true
			}
			if ev.State == zk.StateAuthFailed || ev.State == zk.StateExpired {
				t.Fatalf("zookeeper session at %s: %v", addr, ev.State)
			}
		case <-deadline:
			t.Fatalf("no zookeeper session with %s within %v (state %v)", addr, opTimeout*2, conn.State())
		}
	}

	path := "/" + unique(t, "cerberus-smoke")
	data := []byte(unique(t, "data"))
	created, err := conn.Create(path, data, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatalf("zookeeper create %s: %v", path, err)
	}
	if created != path {
		t.Fatalf("zookeeper create returned path %q, want %q", created, path)
	}
	t.Cleanup(func() {
		if err := conn.Delete(path, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			t.Logf("cleanup: zookeeper delete %s: %v", path, err)
		}
	})

	got, stat, err := conn.Get(path)
	if err != nil {
		t.Fatalf("zookeeper get %s: %v", path, err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("zookeeper get %s = %q, want %q", path, got, data)
	}
	if stat.EphemeralOwner != conn.SessionID() {
		t.Fatalf("node %s is owned by session %#x, want ours (%#x): not ephemeral?", path, stat.EphemeralOwner, conn.SessionID())
	}
	if err := conn.Delete(path, stat.Version); err != nil {
		t.Fatalf("zookeeper delete %s: %v", path, err)
	}
	if ok, _, err := conn.Exists(path); err != nil || ok {
		t.Fatalf("zookeeper exists %s after delete = %v, %v; want false, nil", path, ok, err)
	}
}

func TestConsulSmoke(t *testing.T) {
	t.Parallel()
	addr := testenv.ConsulAddr(t)
	ctx := testContext(t)

	cfg := consul.DefaultConfig()
	cfg.Address = addr
	cfg.Scheme = "http"
	cfg.Token = "" // dev mode: no ACLs; ignore a CONSUL_HTTP_TOKEN in the environment
	client, err := consul.NewClient(cfg)
	if err != nil {
		t.Fatalf("consul client for %s: %v", addr, err)
	}
	kv := client.KV()
	wo := (&consul.WriteOptions{}).WithContext(ctx)
	qo := (&consul.QueryOptions{RequireConsistent: true}).WithContext(ctx)

	key := "cerberus/smoke/" + unique(t, "key")
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		kv.Delete(key, (&consul.WriteOptions{}).WithContext(ctx))
	})

	value := []byte(unique(t, "value"))
	if _, err := kv.Put(&consul.KVPair{Key: key, Value: value}, wo); err != nil {
		t.Fatalf("consul KV put %s at %s: %v", key, addr, err)
	}
	pair, _, err := kv.Get(key, qo)
	if err != nil {
		t.Fatalf("consul KV get %s: %v", key, err)
	}
	if pair == nil || !bytes.Equal(pair.Value, value) {
		t.Fatalf("consul KV get %s = %+v, want value %q", key, pair, value)
	}
	if _, err := kv.Delete(key, wo); err != nil {
		t.Fatalf("consul KV delete %s: %v", key, err)
	}
	pair, _, err = kv.Get(key, qo)
	if err != nil || pair != nil {
		t.Fatalf("consul KV get %s after delete = %+v, %v; want nil, nil", key, pair, err)
	}
}

func TestMySQLSmoke(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDSN(t)
	ctx := testContext(t)

	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("parse %s: %v", testenv.MySQLDSNEnv, err)
	}
	cfg.Timeout = dialTimeout
	cfg.ReadTimeout = opTimeout
	cfg.WriteTimeout = opTimeout
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatalf("mysql connector: %v", err)
	}
	db := sql.OpenDB(connector)
	t.Cleanup(func() { db.Close() })

	var one int
	if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("mysql SELECT 1 at %s as %q: %v", cfg.Addr, cfg.User, err)
	}
	if one != 1 {
		t.Fatalf("mysql SELECT 1 = %d", one)
	}

	// Temporary tables belong to one connection: pin one.
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatalf("mysql conn: %v", err)
	}
	t.Cleanup(func() { conn.Close() })

	if _, err := conn.ExecContext(ctx, `CREATE TEMPORARY TABLE cerberus_smoke (
		id INT PRIMARY KEY,
		name VARCHAR(64) NOT NULL,
		at DATETIME(6) NOT NULL
	)`); err != nil {
		t.Fatalf("mysql CREATE TEMPORARY TABLE: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		conn.ExecContext(ctx, "DROP TEMPORARY TABLE IF EXISTS cerberus_smoke")
	})

	name := unique(t, "name")
	at := time.Now().UTC().Truncate(time.Microsecond)
	if _, err := conn.ExecContext(ctx, "INSERT INTO cerberus_smoke (id, name, at) VALUES (?, ?, ?)", 1, name, at); err != nil {
		t.Fatalf("mysql INSERT: %v", err)
	}
	var gotName string
	var gotAt time.Time // needs parseTime=true in the DSN
	if err := conn.QueryRowContext(ctx, "SELECT name, at FROM cerberus_smoke WHERE id = ?", 1).Scan(&gotName, &gotAt); err != nil {
		t.Fatalf("mysql SELECT from the temporary table: %v", err)
	}
	if gotName != name || !gotAt.Equal(at) {
		t.Fatalf("mysql round trip = (%q, %v), want (%q, %v)", gotName, gotAt, name, at)
	}
	if _, err := conn.ExecContext(ctx, "DROP TEMPORARY TABLE cerberus_smoke"); err != nil {
		t.Fatalf("mysql DROP TEMPORARY TABLE: %v", err)
	}
}
