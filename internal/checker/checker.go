// Package checker judges a history of critical sections recorded by many
// processes locking the same keys: it finds overlapping exclusive sections,
// tokens that do not increase, and calls that hung past their context.
//
// Every section records when its holder got the lock (Start), when it
// stopped believing it held it (End), when its Done channel was seen closed
// (Told, if it was), and what happened to its one fenced write. All times
// are wall-clock nanoseconds from processes on one machine, so they are
// comparable across processes.
//
// Two sections on one key overlap when one starts before the other ends.
// Of the two, the one with the smaller token (A) holds the older grant, and
// B the newer. The overlap is judged in this order:
//
//   - lost but told: A's Done was seen closed no later than B started (or,
//     if A's section started after B's, no later than A's start: a lease
//     already dead when its holder got it). The lock kept its promise: it
//     said A had lost the lock before A could act on it beside B.
//   - paused and fenced: A's process was stopped (SIGSTOP, a simulated GC
//     pause) during A's section or during the call that granted it (the
//     grant may have come before the stop and its return after), and A's
//     fenced write was rejected or never made, or was accepted before B
//     started (Section.Wrote: A stopped after its last act, before it
//     could note its end). No lock can prevent such an overlap; the
//     fencing token stops the damage.
//   - crashed and fenced: only for an engine whose locks die with the
//     server's connections (Check's crashes are given): the server crashed
//     between the two grants (after the older one's call began, since a
//     server can grant and die before the answer returns), so the older
//     holder's lock was gone before it could be told, and its fenced write
//     was rejected or never made.
//   - otherwise, or if both have the same token, a violation.
//
// Tokens are checked between sections that do not overlap: if A ended
// before B started, A's token must be smaller than B's. On a counted key,
// where permits granted together may be learned in either order, B's
// start is the start of the call that asked for it (Section.Asked); so it
// is for a section whose granting call was stopped, as its grant may have
// come before the stop.
//
// Sections of a counted key (a semaphore: Limit above 1) may overlap up to
// Limit at a time. At each section's start the checker counts the
// sections then in progress on the key, leaving out those excused as
// above (told before that instant, or paused and not written, or crashed
// and not written); more than Limit is a violation.
package checker

import (
	"fmt"
	"sort"
	"time"
)

// Write is the outcome of a section's fenced write.
type Write int

const (
	// NoWrite: the section made no fenced write (its Done closed first, or
	// the write could not be sent).
	NoWrite Write = iota
	// Accepted: the fenced resource took the write.
	Accepted
	// Rejected: the fenced resource refused it, having seen a larger
	// token on the key.
	Rejected
)

// Section is one critical section as its holder lived it.
type Section struct {
	Key   string `json:"k"`
	Token uint64 `json:"t"`
	Proc  int    `json:"p"`
	Start int64  `json:"s"`           // unix ns, just after the grant returned
	End   int64  `json:"e"`           // unix ns, when the holder stopped
	Told  int64  `json:"d,omitempty"` // unix ns when Done was seen closed, 0 if never
	Write Write  `json:"w"`
	// Wrote is when the fenced resource accepted the section's last
	// write (unix ns, its own clock), 0 if it took none or did not say.
	Wrote int64 `json:"wt,omitempty"`
	// Limit is how many sections of the key may be in progress at once:
	// a semaphore's permits; 0 or 1 for a lock or an election.
	Limit int `json:"n,omitempty"`
	// Asked is when the call that got the grant began (unix ns). On a
	// counted key two permits may be granted at once and their holders
	// learn of it in either order, so tokens are compared from the ask:
	// a permit asked for after another ended must have a larger token.
	Asked int64 `json:"a,omitempty"`
}

// Call is one library call with a context deadline.
type Call struct {
	Op       string `json:"op"`
	Key      string `json:"k"`
	Proc     int    `json:"p"`
	Start    int64  `json:"s"`
	Deadline int64  `json:"dl"`          // unix ns of the context's deadline
	Return   int64  `json:"r,omitempty"` // unix ns when it returned, 0 if it never did
	Err      string `json:"err,omitempty"`
}

// Pause is a span during which a client process was stopped.
type Pause struct {
	Proc       int
	Start, End int64
}

// Grace is how long after its context's deadline a call may still return
// before it counts as hung: enough for a goroutine to be scheduled on a
// loaded machine, far less than any engine's own timeouts.
const Grace = time.Second

// Result is the judgement of one run.
type Result struct {
	Ops, Sections, Faults int
	// Violations are overlaps that were neither told nor fenced, plus
	// tokens that did not increase.
	Violations   int
	Overlaps     int // unexcused overlaps (part of Violations)
	TokenErrors  int // non-increasing tokens (part of Violations)
	LostButTold  int
	PausedFenced int
	CrashFenced  int
	Hung         int
	Errors       int // calls that returned an error (expected under faults)
	// Examples describes up to five violations and hung calls.
	Examples []string
}

// Add adds o's counts to r (for totals over several runs).
func (r *Result) Add(o Result) {
	r.Ops += o.Ops
	r.Sections += o.Sections
	r.Faults += o.Faults
	r.Violations += o.Violations
	r.Overlaps += o.Overlaps
	r.TokenErrors += o.TokenErrors
	r.LostButTold += o.LostButTold
	r.PausedFenced += o.PausedFenced
	r.CrashFenced += o.CrashFenced
	r.Hung += o.Hung
	r.Errors += o.Errors
	for _, e := range o.Examples {
		r.example("%s", e)
	}
}

// OK reports whether the run kept every promise.
func (r Result) OK() bool { return r.Violations == 0 && r.Hung == 0 }

// Line is the run's one summary line.
func (r Result) Line(name string) string {
	return fmt.Sprintf("CHECK %s ops=%d sections=%d faults=%d violations=%d lost_but_told=%d "+
		"paused_fenced=%d crash_fenced=%d hung=%d errors=%d",
		name, r.Ops, r.Sections, r.Faults, r.Violations, r.LostButTold, r.PausedFenced, r.CrashFenced,
		r.Hung, r.Errors)
}

func (r *Result) example(format string, args ...any) {
	if len(r.Examples) < 5 {
		r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
	}
}

// Check judges sections and calls. pauses are the spans during which client
// processes were stopped. crashes are the instants at which the lock server
// was killed, given only for an engine whose locks live in the server's
// connections and so cannot outlive it (nil otherwise). end is when the
// run stopped waiting for calls: a call that has not returned by then, and
// whose deadline plus Grace has passed, is hung.
func Check(secs []Section, calls []Call, pauses []Pause, crashes []int64, end int64) Result {
	r := Result{Ops: len(calls), Sections: len(secs)}
	byKey := map[string][]Section{}
	for _, s := range secs {
		byKey[s.Key] = append(byKey[s.Key], s)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ss := byKey[k]
		if limit := ss[0].Limit; limit > 1 {
			r.counted(ss, limit, pauses, crashes)
		} else {
			r.overlaps(ss, pauses, crashes)
		}
		r.tokens(ss, pauses)
	}
	r.Violations = r.Overlaps + r.TokenErrors
	for _, c := range calls {
		if c.Err != "" {
			r.Errors++
		}
		limit := c.Deadline + int64(Grace)
		switch {
		case pausedCall(c, pauses, end):
			// A stopped process cannot return on time; its calls are
			// not judged.
		case c.Return == 0 && end >= limit:
			r.Hung++
			r.example("hung: proc %d %s %q started %s before the end, never returned", c.Proc, c.Op, c.Key,
				time.Duration(end-c.Start))
		case c.Return > limit:
			r.Hung++
			r.example("hung: proc %d %s %q started at %s, returned %s after its deadline (%s)", c.Proc, c.Op,
				c.Key,
				clock(c.Start), time.Duration(c.Return-c.Deadline), c.Err)
		}
	}
	return r
}

// overlaps judges every overlapping pair of sections on one key. Of the
// two, the one with the smaller token holds the older grant: it is the one
// that must have been told, or stopped and fenced.
func (r *Result) overlaps(ss []Section, pauses []Pause, crashes []int64) {
	sort.Slice(ss, func(i, j int) bool { return ss[i].Start < ss[j].Start })
	for i, a := range ss {
		for _, b := range ss[i+1:] {
			if b.Start >= a.End {
				break // sorted by start: no later section overlaps a either
			}
			old, cur := a, b
			if b.Token < a.Token {
				old, cur = b, a
			}
			switch {
			case old.Token != cur.Token && old.Told != 0 && old.Told <= max(cur.Start, old.Start):
				r.LostButTold++
			case old.Token != cur.Token && stopped(old.Proc, asked(old), old.End, pauses) &&
				(old.Write != Accepted || old.Wrote != 0 && old.Wrote <= cur.Start):
				r.PausedFenced++
			case old.Token != cur.Token && old.Write != Accepted && crashedBetween(old, cur, crashes):
				r.CrashFenced++
			default:
				r.Overlaps++
				r.example("overlap on %q: proc %d token %d from %s for %s (told %s, write %d) and proc %d "+
					"token %d from %s for %s (told %s, write %d)",
					a.Key, old.Proc, old.Token, clock(old.Start), time.Duration(old.End-old.Start),
					since(old.Start, old.Told), old.Write,
					cur.Proc, cur.Token, clock(cur.Start), time.Duration(cur.End-cur.Start), since(cur.Start,
						cur.Told), cur.Write)
			}
		}
	}
}

// counted judges the sections of a key with limit permits: at each
// section's start, no more than limit sections may be in progress that are
// not excused (told, paused and not written, crashed and not written). An
// instant at which the excused ones alone made the count exceed limit is
// counted once as lost but told, or paused or crash fenced.
func (r *Result) counted(ss []Section, limit int, pauses []Pause, crashes []int64) {
	sort.Slice(ss, func(i, j int) bool { return ss[i].Start < ss[j].Start })
	for i, b := range ss {
		t := b.Start
		var live []Section
		raw, told, stopped, crashed := 0, 0, 0, 0
		for _, s := range ss[:i+1] {
			if s.End <= t {
				continue
			}
			raw++
			switch {
			case s.Told != 0 && s.Told <= max(t, s.Start):
				told++
			case s.Write != Accepted && paused(s, pauses):
				stopped++
			case s.Write != Accepted && crashedBetween(s, b, crashes):
				crashed++
			default:
				live = append(live, s)
			}
		}
		switch {
		case len(live) > limit:
			r.Overlaps++
			r.example("%d of %d permits of %q in use at %s: %s", len(live), limit, b.Key, clock(t), describe(live))
		case raw > limit && told > 0:
			r.LostButTold++
		case raw > limit && stopped > 0:
			r.PausedFenced++
		case raw > limit && crashed > 0:
			r.CrashFenced++
		}
	}
}

// describe lists sections briefly, for a violation's example.
func describe(ss []Section) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("proc %d token %d from %s (told %s)", s.Proc, s.Token, clock(s.Start), since(s.Start, s.Told))
	}
	return out
}

func clock(ns int64) string { return time.Unix(0, ns).Format("15:04:05.000") }

// since describes an optional instant relative to start.
func since(start, at int64) string {
	if at == 0 {
		return "never"
	}
	return "after " + time.Duration(at-start).String()
}

// crashedBetween reports whether the server crashed after old's grant and
// before cur's. Old's grant is taken to be as early as its call began: a
// server can grant and then die before the grant's answer returns (a
// Redlock node killed between its grant and the call's return).
func crashedBetween(old, cur Section, crashes []int64) bool {
	for _, c := range crashes {
		if asked(old) < c && c < cur.Start {
			return true
		}
	}
	return false
}

// paused reports whether s's process was stopped during s. (An exclusive
// section's granting call counts too, in overlaps; a permit's does not: a
// permit makes no fenced write, so its excuse is only that its holder
// could not act.)
func paused(s Section, pauses []Pause) bool { return stopped(s.Proc, s.Start, s.End, pauses) }

// stopped reports whether proc was stopped at some time between from and
// to.
func stopped(proc int, from, to int64, pauses []Pause) bool {
	for _, p := range pauses {
		if p.Proc == proc && p.Start < to && p.End > from {
			return true
		}
	}
	return false
}

// pausedCall reports whether c's process was stopped while c was in
// flight.
func pausedCall(c Call, pauses []Pause, end int64) bool {
	ret := c.Return
	if ret == 0 {
		ret = end
	}
	for _, p := range pauses {
		if p.Proc == c.Proc && p.Start < ret && p.End > c.Start {
			return true
		}
	}
	return false
}

// asked is when s's grant was asked for: Asked, or its start if unknown.
func asked(s Section) int64 {
	if s.Asked != 0 {
		return s.Asked
	}
	return s.Start
}

// tokens checks that a section's token is larger than the token of every
// section on its key that ended before it started (before it was asked
// for, on a counted key or when its call was stopped).
func (r *Result) tokens(ss []Section, pauses []Pause) {
	byEnd := append([]Section(nil), ss...)
	sort.Slice(byEnd, func(i, j int) bool { return byEnd[i].End < byEnd[j].End })
	from := func(b Section) int64 {
		if b.Limit > 1 || stopped(b.Proc, asked(b), b.Start, pauses) {
			return asked(b)
		}
		return b.Start
	}
	byStart := append([]Section(nil), ss...)
	sort.Slice(byStart, func(i, j int) bool { return from(byStart[i]) < from(byStart[j]) })
	var maxTok uint64
	var maxSec Section
	j := 0
	for _, b := range byStart {
		at := from(b)
		for j < len(byEnd) && byEnd[j].End <= at {
			if byEnd[j].Token >= maxTok {
				maxTok, maxSec = byEnd[j].Token, byEnd[j]
			}
			j++
		}
		if j > 0 && b.Token <= maxTok {
			r.TokenErrors++
			r.example("token on %q did not increase: proc %d got %d after proc %d's %d had ended", b.Key,
				b.Proc, b.Token, maxSec.Proc, maxTok)
		}
	}
}
