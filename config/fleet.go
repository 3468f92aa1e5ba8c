package config

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/cerberus-go/cerberus/failover"
)

// keyValue is the engine key's value: the fleet's engine and epoch.
type keyValue struct {
	Engine string    `json:"engine"`
	Epoch  uint64    `json:"epoch,omitempty"`
	Reason string    `json:"reason,omitempty"` // "operator", "failover" or "failback"
	By     string    `json:"by,omitempty"`     // who wrote it: host/pid, or "cerberusctl"
	At     time.Time `json:"at,omitzero"`
}

// parseKeyValue reads the key's value: JSON, or a bare engine name as an
// operator would write it by hand (then the epoch is 0: each process
// counts its own).
func parseKeyValue(b []byte) keyValue {
	t := bytes.TrimSpace(b)
	if len(t) > 0 && t[0] == '{' {
		var v keyValue
		if json.Unmarshal(t, &v) == nil {
			return v
		}
	}
	return keyValue{Engine: string(t), Reason: "operator"}
}

// fleetPolicy is the part of the configuration the fleet's decisions use;
// a reload may change it.
type fleetPolicy struct {
	auto, failback bool
	quorum         int // 0: a majority
	interval       time.Duration
}

func (c *Config) fleetPolicy() fleetPolicy {
	return fleetPolicy{auto: c.Auto, failback: c.Failback == FailbackAuto, quorum: c.EngineKey.Quorum,
		interval: c.Health.Interval}
}

// needed returns how many of n live processes make a quorum.
func (p fleetPolicy) needed(n int) int {
	if p.quorum > 0 {
		return p.quorum
	}
	return n/2 + 1
}

// decision is what the fleet should do, as decide sees it.
type decision struct {
	to, reason string // to is "" for no switch
	note       string // why not, when this process's own view wants a switch
}

// decide applies the fleet rule to the members' reports: with cur the
// fleet's engine, move to the first engine in order that a quorum sees
// healthy, when a quorum sees cur down (failover) or, with failback and
// no operator's pin, when a quorum sees an earlier engine healthy. self is
// this process's report, used only to explain a refusal.
func decide(order []string, cur keyValue, members []failover.FleetMember, self failover.FleetMember,
	p fleetPolicy) decision {
	n := len(members)
	if n == 0 || !p.auto {
		return decision{}
	}
	need := p.needed(n)
	downFor := func(name string) int {
		c := 0
		for _, m := range members {
			if slices.Contains(m.Down, name) {
				c++
			}
		}
		return c
	}
	firstHealthy := func(skip string) string {
		for _, name := range order {
			if name != skip && n-downFor(name) >= need {
				return name
			}
		}
		return ""
	}
	down := downFor(cur.Engine)
	if down >= need {
		if to := firstHealthy(cur.Engine); to != "" {
			return decision{to: to, reason: "failover"}
		}
		return decision{note: fmt.Sprintf("%s is down for %d of %d processes, but no other engine is "+
			"healthy for %d", cur.Engine, down, n, need)}
	}
	if p.failback && cur.Reason != "operator" {
		if to := firstHealthy(""); to != "" && slices.Index(order, to) < slices.Index(order, cur.Engine) {
			return decision{to: to, reason: "failback"}
		}
	}
	if slices.Contains(self.Down, cur.Engine) {
		return decision{note: fmt.Sprintf("outvoted: %s is down here, but for %d of %d processes only "+
			"(%d needed); staying, and calls on %s fail here until it answers",
			cur.Engine, down, n, need, cur.Engine)}
	}
	return decision{}
}

// fleet keeps one process in step with its fleet through the engine key:
// it follows the key's value, registers the process under the key, and,
// with auto, writes the fleet's decisions to the key.
type fleet struct {
	k     EngineKey
	kv    *api.Client
	f     *failover.Manager
	log   *slog.Logger
	order []string // engine names, primary first
	def   string   // the engine an empty value means
	id    string   // this process's registration: "<host>-<pid>-<n>"
	host  string
	kick  chan struct{}

	mu      sync.Mutex
	policy  fleetPolicy
	value   keyValue // last value read, Engine resolved
	index   uint64   // its modify index (0: absent)
	read    bool     // value was read at least once
	since   time.Time
	members []failover.FleetMember
	keyErr  string // why the key could not be read, if it could not
	note    string // the last round's note
	logged  string // the last note logged
}

func newFleet(cfg *Config, f *failover.Manager, kv *api.Client, log *slog.Logger) *fleet {
	host, _ := os.Hostname()
	fl := &fleet{k: cfg.EngineKey, kv: kv, f: f, log: log, host: host, kick: make(chan struct{}, 1),
		id:     fmt.Sprintf("%s-%d-%d", host, os.Getpid(), time.Now().UnixNano()%1e6),
		policy: cfg.fleetPolicy(), since: time.Now(), def: cfg.defaultEngine()}
	for _, e := range cfg.Engines {
		fl.order = append(fl.order, e.Name)
	}
	return fl
}

// defaultEngine is the engine an empty engine key means: the first engine
// in order, in every process. Not the file's engine setting: processes
// started before and after an edit of it would resolve an empty key to two
// engines, and status would name one of them.
func (c *Config) defaultEngine() string {
	return c.Engines[0].Name
}

// setPolicy applies a reloaded configuration's policy.
func (fl *fleet) setPolicy(p fleetPolicy) {
	fl.mu.Lock()
	fl.policy = p
	fl.mu.Unlock()
	fl.poke()
}

// poke asks the member loop for a round now.
func (fl *fleet) poke() {
	select {
	case fl.kick <- struct{}{}:
	default:
	}
}

// resolve fills in the engine an empty value means.
func (fl *fleet) resolve(v keyValue) keyValue {
	if v.Engine == "" {
		v.Engine = fl.def
	}
	return v
}

// readKey reads the key once: its value (resolved) and modify index.
func (fl *fleet) readKey(ctx context.Context,
	q *api.QueryOptions) (keyValue, uint64, *api.QueryMeta, error) {
	pair, meta, err := fl.kv.KV().Get(fl.k.Key, q.WithContext(ctx))
	if err != nil {
		return keyValue{}, 0, nil, fl.k.scrub(err)
	}
	if pair == nil {
		return fl.resolve(keyValue{}), 0, meta, nil
	}
	return fl.resolve(parseKeyValue(pair.Value)), pair.ModifyIndex, meta, nil
}

// follow keeps the manager on the key's engine and epoch until ctx ends,
// with blocking queries.
func (fl *fleet) follow(ctx context.Context) {
	var wait uint64
	for ctx.Err() == nil {
		v, idx, meta, err := fl.readKey(ctx,
			&api.QueryOptions{WaitIndex: wait, WaitTime: 30 * time.Second})
		if err != nil {
			if ctx.Err() == nil {
				fl.setKeyErr(fmt.Sprintf("engine key: read failed on %s; retrying, and no automatic switch "+
					"until it answers: %v", fl.k.Consul, err))
				sleepCtx(ctx, time.Second)
			}
			continue
		}
		fl.setKeyErr("")
		if meta.LastIndex < wait {
			wait = 0 // the index went back (a new agent state): start over
		} else {
			wait = meta.LastIndex
		}
		fl.apply(v, idx)
	}
}

// apply follows a value read from the key.
func (fl *fleet) apply(v keyValue, idx uint64) {
	fl.mu.Lock()
	same := fl.read && fl.value == v
	fl.value, fl.index, fl.read = v, idx, true
	fl.mu.Unlock()
	if same {
		return
	}
	defer fl.publish() // the views of the active engine show the new value
	before, epoch := fl.f.Active(), fl.f.Epoch()
	reason := cmp.Or(v.Reason, "operator")
	if err := fl.f.Follow(v.Engine, v.Epoch, reason); err != nil {
		fl.log.Warn("cerberus engine key names no configured engine; staying",
			slog.String("key", fl.k.Key), slog.String("value", v.Engine))
		return
	}
	if fl.f.Active() != before || fl.f.Epoch() != epoch {
		fl.mu.Lock()
		fl.since = time.Now()
		fl.mu.Unlock()
	}
	fl.log.Info("cerberus engine key applied", slog.String("key", fl.k.Key),
		slog.String("active", fl.f.Active()),
		slog.Uint64("epoch", fl.f.Epoch()), slog.String("reason", reason))
	fl.poke()
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// setNote records the last round's note for the status.
func (fl *fleet) setNote(note string) {
	fl.mu.Lock()
	fl.note = note
	fl.mu.Unlock()
	fl.publish()
}

// setKeyErr records why the key cannot be read ("" once it can).
func (fl *fleet) setKeyErr(e string) {
	fl.mu.Lock()
	fl.keyErr = e
	fl.mu.Unlock()
	fl.publish()
}

// publish hands the fleet's status to the manager, and logs its note
// when the note changes.
func (fl *fleet) publish() {
	fl.mu.Lock()
	note := fl.keyErr
	if note == "" {
		note = fl.note
	}
	keyErr := fl.keyErr
	if keyErr == "" && !fl.read {
		keyErr = "engine key not read yet"
	}
	s := failover.FleetStatus{Scope: failover.ScopeFleet, Key: fl.k.Key, Engine: fl.value.Engine,
		Epoch: fl.value.Epoch, KeyError: keyErr,
		Members: slices.Clone(fl.members), Note: note, Updated: time.Now()}
	logIt := note != fl.logged
	fl.logged = note
	fl.mu.Unlock()
	if logIt && note != "" {
		fl.log.Warn("cerberus fleet: "+note, slog.String("key", fl.k.Key))
	}
	fl.f.SetFleet(s)
}

// self is this process's report.
func (fl *fleet) self() failover.FleetMember {
	m := failover.FleetMember{ID: fl.id, Host: fl.host, PID: os.Getpid(), Active: fl.f.Active(),
		Epoch: fl.f.Epoch(), Self: true}
	fl.mu.Lock()
	m.Since = fl.since
	fl.mu.Unlock()
	for _, s := range fl.f.Status() {
		if !s.Healthy {
			m.Down = append(m.Down, s.Name)
		}
	}
	return m
}

func (fl *fleet) prefix() string { return strings.TrimSuffix(fl.k.Key, "/") + "/fleet/" }

// run registers this process and, each health interval or when poked,
// refreshes its registration, reads the fleet and applies the rule. It
// returns when ctx ends, removing the registration.
func (fl *fleet) run(ctx context.Context) {
	r := &registration{fl: fl}
	defer r.leave()
	for ctx.Err() == nil {
		fl.round(ctx, r)
		fl.mu.Lock()
		interval := min(fl.policy.interval, cmp.Or(fl.k.MemberTTL, DefaultMemberTTL)/3)
		fl.mu.Unlock()
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
		case <-fl.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

// round is one pass of run.
func (fl *fleet) round(ctx context.Context, r *registration) {
	self := fl.self()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.put(rctx, self); err != nil {
		fl.setNote(fmt.Sprintf("cannot register on %s (no automatic switch until it answers): %v",
			fl.k.Consul, err))
		return
	}
	members, err := fl.list(rctx)
	if err != nil {
		fl.setNote(fmt.Sprintf("cannot read the fleet on %s (no automatic switch until it answers): %v",
			fl.k.Consul, err))
		return
	}
	fl.mu.Lock()
	fl.members = members
	cur, idx, read, p := fl.value, fl.index, fl.read, fl.policy
	fl.mu.Unlock()
	if !read {
		fl.setNote("engine key not read yet")
		return
	}
	d := decide(fl.order, cur, members, self, p)
	if d.to != "" {
		fl.propose(rctx, cur, idx, members, d)
	}
	fl.setNote(d.note)
}

// list reads every live registration.
func (fl *fleet) list(ctx context.Context) ([]failover.FleetMember, error) {
	pairs, _, err := fl.kv.KV().List(fl.prefix(), (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, fl.k.scrub(err)
	}
	var out []failover.FleetMember
	for _, p := range pairs {
		var m failover.FleetMember
		if p.Session == "" || json.Unmarshal(p.Value, &m) != nil {
			continue // not held by a live session, or not a registration
		}
		m.ID = strings.TrimPrefix(p.Key, fl.prefix())
		m.Self = m.ID == fl.id
		out = append(out, m)
	}
	return out, nil
}

// propose writes the decision to the key, if the key is still at idx. A
// lost race is not an error: the follower reads whatever won.
func (fl *fleet) propose(ctx context.Context, cur keyValue, idx uint64,
	members []failover.FleetMember, d decision) {
	next := keyValue{Engine: d.to, Epoch: nextEpoch(cur, members), Reason: d.reason,
		By: fmt.Sprintf("%s/%d", fl.host, os.Getpid()), At: time.Now().UTC()}
	ok, err := casKey(ctx, fl.kv, &fl.k, next, idx)
	switch {
	case err != nil:
		fl.log.Warn("cerberus fleet: writing the decision failed", slog.String("key", fl.k.Key),
			slog.String("err", err.Error()))
	case ok:
		fl.log.Warn("cerberus fleet: switching the fleet", slog.String("key", fl.k.Key),
			slog.String("from", cur.Engine),
			slog.String("to", d.to), slog.String("reason", d.reason), slog.Uint64("epoch", next.Epoch))
	}
}

// nextEpoch is above the key's epoch and every member's.
func nextEpoch(cur keyValue, members []failover.FleetMember) uint64 {
	e := cur.Epoch
	for _, m := range members {
		e = max(e, m.Epoch)
	}
	return e + 1
}

// casKey writes v to the key if its modify index is still idx (0: only if
// absent) and reports whether it did.
func casKey(ctx context.Context, kv *api.Client, k *EngineKey, v keyValue,
	idx uint64) (bool, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return false, err
	}
	ok, _, err := kv.KV().CAS(&api.KVPair{Key: k.Key, Value: b, ModifyIndex: idx},
		(&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return false, fmt.Errorf("engine_key: writing %s on %s: %w", k.Key, k.Consul, k.scrub(err))
	}
	return ok, nil
}

// registration is this process's entry under the key's fleet prefix, held
// by a Consul session so that it disappears when the process does.
type registration struct {
	fl      *fleet
	session string
	renewed time.Time
	last    []byte
}

// put writes m (when it changed) and keeps the session alive, making a
// new session when the old one is gone.
func (r *registration) put(ctx context.Context, m failover.FleetMember) error {
	ttl := cmp.Or(r.fl.k.MemberTTL, DefaultMemberTTL)
	if r.session != "" && time.Since(r.renewed) > ttl/3 {
		e, _, err := r.fl.kv.Session().Renew(r.session, (&api.WriteOptions{}).WithContext(ctx))
		if err != nil {
			return r.fl.k.scrub(err)
		}
		if e == nil {
			r.session = "" // expired: register anew
		} else {
			r.renewed = time.Now()
		}
	}
	if r.session == "" {
		id, _, err := r.fl.kv.Session().Create(&api.SessionEntry{Name: "cerberus fleet " + r.fl.id,
			TTL:      ttl.String(),
			Behavior: api.SessionBehaviorDelete, LockDelay: time.Millisecond},
			(&api.WriteOptions{}).WithContext(ctx))
		if err != nil {
			return r.fl.k.scrub(err)
		}
		r.session, r.renewed, r.last = id, time.Now(), nil
	}
	m.Self = false
	b, _ := json.Marshal(m)
	if bytes.Equal(b, r.last) {
		return nil
	}
	ok, _, err := r.fl.kv.KV().Acquire(&api.KVPair{Key: r.fl.prefix() + r.fl.id, Value: b,
		Session: r.session}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return r.fl.k.scrub(err)
	}
	if !ok {
		r.session = "" // the session is gone: the next round makes a new one
		return errors.New("registration refused: session invalidated")
	}
	r.last = b
	return nil
}

// leave ends the session, which deletes the registration.
func (r *registration) leave() {
	if r.session == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = r.fl.kv.Session().Destroy(r.session, (&api.WriteOptions{}).WithContext(ctx))
}
