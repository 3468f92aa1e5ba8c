package testenv

import "testing"

// TestStartEtcdCluster starts three members, finds the leader, kills it,
// and finds another; the killed one comes back as a member.
func TestStartEtcdCluster(t *testing.T) {
	c := StartEtcdCluster(t, 3)
	if len(c.Addrs) != 3 {
		t.Fatalf("%d addresses, want 3", len(c.Addrs))
	}
	for _, a := range c.Addrs {
		if err := talk(a, ProbeTimeout, probeEtcd); err != nil {
			t.Fatalf("member at %s: %v", a, err)
		}
	}
	first := c.Leader()
	c.Nodes[first].Kill()
	next := c.Leader()
	if next == first {
		t.Fatalf("the killed member %d still leads", first)
	}
	c.Nodes[first].Restart()
	if err := talk(c.Nodes[first].Addr, ProbeTimeout, probeEtcd); err != nil {
		t.Errorf("restarted member: %v", err)
	}
}

// TestEtcdAddrProbe: EtcdAddr accepts a healthy server and the probe
// refuses a port where something else answers.
func TestEtcdAddrProbe(t *testing.T) {
	e := StartEtcd(t)
	t.Setenv(EtcdAddrEnv, e.Addr)
	if got := EtcdAddr(t); got != e.Addr {
		t.Errorf("EtcdAddr = %q, want %q", got, e.Addr)
	}
	r := StartRedis(t)
	if err := talk(r.Addr, ProbeTimeout, probeEtcd); err == nil {
		t.Errorf("the etcd probe accepted a Redis server")
	}
}
