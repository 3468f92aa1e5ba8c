package failover

import (
	"fmt"
	"time"

	"github.com/cerberus-go/cerberus/engine"
)

// SwitchEvent describes one switch of the active engine.
type SwitchEvent struct {
	From, To   string // engine names; From is "" for none
	Epoch      uint64 // the new epoch
	Reason     string // "operator", "failover" or "failback"
	LostLeases int    // leases ended with ErrEngineSwitched
	FenceUntil time.Time
}

// SetActive makes name the active engine, as an operator's flip does, and
// keeps it as the override (see Options.Active). An empty name
// clears the override without switching. An unknown name returns
// ErrUnknownEngine and changes nothing.
//
// SetActive moves this process only. Processes of a fleet that switch one
// by one grant the same keys on two engines in between; a fleet switches
// together through a shared key (package config's engine_key), whose
// followers call Follow.
func (m *Manager) SetActive(name string) error {
	if name == "" {
		m.mu.Lock()
		m.override = ""
		m.mu.Unlock()
		return nil
	}
	for i, ne := range m.engines {
		if ne.Name == name {
			m.mu.Lock()
			m.override = name
			m.mu.Unlock()
			m.switchTo(i, "operator", 0)
			return nil
		}
	}
	return fmt.Errorf("%w: %q", ErrUnknownEngine, name)
}

// Follow makes name the active engine at epoch at least epoch, as a
// fleet's shared decision says (package config's engine_key calls it for
// every process of the fleet), and keeps name as the override. If name is
// active already, a higher epoch is taken without a switch, so that every
// later token is larger. A switch takes max(epoch, the current epoch + 1):
// epochs never go back, so a process that had switched more often than
// the fleet keeps its higher epoch. reason is reported in the SwitchEvent.
// An unknown name returns ErrUnknownEngine and changes nothing.
func (m *Manager) Follow(name string, epoch uint64, reason string) error {
	for i, ne := range m.engines {
		if ne.Name != name {
			continue
		}
		if epoch >= 1<<(64-tokenBits) {
			return fmt.Errorf("%w: failover: epoch %d does not fit in %d bits", engine.ErrInvalidRequest,
				epoch, 64-tokenBits)
		}
		m.mu.Lock()
		m.override = name
		if m.active == i && epoch > m.epoch {
			m.epoch = epoch
		}
		m.mu.Unlock()
		m.switchTo(i, reason, epoch)
		return nil
	}
	return fmt.Errorf("%w: %q", ErrUnknownEngine, name)
}

// switchTo makes engines[to] active: new epoch (at least minEpoch), old
// leases ended with ErrEngineSwitched and released in the background,
// waiters moved.
func (m *Manager) switchTo(to int, reason string, minEpoch uint64) {
	m.mu.Lock()
	if m.closed || to == m.active || m.epoch+1 >= 1<<(64-tokenBits) {
		// (After 65535 switches the epoch would overflow its bits and
		// tokens would go backwards: the process stays where it is.)
		m.mu.Unlock()
		return
	}
	from := m.active
	m.active = to
	m.epoch = max(m.epoch+1, minEpoch)
	fence := m.opts.MinFence
	if m.maxTTL > 0 {
		// A silent holder on the old engine keeps its key for its lease
		// period, or for the engine's floor where that is longer.
		fence = max(fence, m.maxTTL, m.engines[from].Engine.Limits().Floor)
	}
	if m.opts.Fence && fence > 0 {
		m.fenceUntil = time.Now().Add(fence)
	}
	m.maxTTL = 0
	lost := make([]*lease, 0, len(m.leases))
	for l := range m.leases {
		lost = append(lost, l)
	}
	m.leases = make(map[*lease]struct{})
	for cancel := range m.waiters {
		(*cancel)(errSwitched)
	}
	ev := SwitchEvent{From: m.engines[from].Name, To: m.engines[to].Name, Epoch: m.epoch,
		Reason: reason, LostLeases: len(lost), FenceUntil: m.fenceUntil}
	m.mu.Unlock()
	for _, l := range lost {
		l.sig.Close(fmt.Errorf("%w: from %s to %s", engine.ErrEngineSwitched, ev.From, ev.To))
		m.releaseLater(l.inner)
	}
	if m.opts.OnSwitch != nil {
		m.opts.OnSwitch(ev)
	}
}

// choose returns the engine the policy wants instead of the active one, or
// -1. Call with m.mu held.
func (m *Manager) choose() (int, string) {
	if !m.opts.Auto {
		return -1, ""
	}
	first := -1
	for i, h := range m.health {
		if h.Healthy {
			first = i
			break
		}
	}
	if first < 0 {
		return -1, "" // nothing better to go to
	}
	activeHealthy := m.health[m.active].Healthy
	switch {
	case !activeHealthy:
		return first, "failover"
	case m.opts.Failback && first < m.active && m.engines[m.active].Name != m.override:
		return first, "failback"
	}
	return -1, ""
}
