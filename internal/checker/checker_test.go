package checker

import (
	"strings"
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

func sec(key string, proc int, token uint64, start, end int64) Section {
	return Section{Key: key, Proc: proc, Token: token, Start: start * ms, End: end * ms, Write: Accepted}
}

func TestCheckJudgesOverlaps(t *testing.T) {
	told := sec("k", 1, 1, 0, 100)
	told.Told = 40 * ms
	late := sec("k", 1, 1, 0, 100)
	late.Told = 60 * ms
	pausedRejected := sec("k", 1, 1, 0, 100)
	pausedRejected.Write = Rejected
	pausedAccepted := sec("k", 1, 1, 0, 100)
	pause := []Pause{{Proc: 1, Start: 10 * ms, End: 80 * ms}}
	next := sec("k", 2, 2, 50, 150)
	crashed := sec("k", 1, 1, 0, 100)
	crashed.Write = NoWrite
	crash := []int64{30 * ms}
	// Asked before the crash, returned after it: the server may have
	// granted before it died (a Redlock node killed after its grant).
	grantedInCrash := asking(sec("k", 1, 1, 40, 100), 20)
	grantedInCrash.Write = NoWrite
	askedAfterCrash := asking(sec("k", 1, 1, 40, 100), 35)
	askedAfterCrash.Write = NoWrite
	// wrote(at) is the paused section whose last write the resource
	// accepted at ms at.
	wrote := func(at int64) Section { s := sec("k", 1, 1, 0, 100); s.Wrote = at * ms; return s }
	// The granting call stopped: asked at 0, the grant learned at 90
	// (before the stop or after it, unknown), its write refused, beside a
	// section that ended before the return and one granted meanwhile.
	ended, meanwhile := sec("k", 3, 5, 20, 40), sec("k", 2, 6, 50, 150)
	lateReturn := asking(sec("k", 1, 1, 90, 95), 0)
	lateReturn.Write = Rejected
	askedLater := asking(sec("k", 1, 1, 90, 95), 85)
	askedLater.Write = Rejected
	callPause := []Pause{{Proc: 1, Start: 10 * ms, End: 85 * ms}}
	cases := []struct {
		name                         string
		secs                         []Section
		pauses                       []Pause
		crashes                      []int64
		violations, told, fenced, tE int
		crashFenced                  int
	}{
		{"disjoint", []Section{sec("k", 1, 1, 0, 10), sec("k", 2, 2, 10, 20), sec("k", 1, 3, 30, 40)}, nil, nil, 0, 0, 0, 0, 0},
		{"other keys may overlap", []Section{sec("a", 1, 1, 0, 100), sec("b", 2, 1, 50, 150)}, nil, nil, 0, 0, 0, 0, 0},
		{"silent overlap", []Section{sec("k", 1, 1, 0, 100), next}, nil, nil, 1, 0, 0, 0, 0},
		{"told before the next grant", []Section{told, next}, nil, nil, 0, 1, 0, 0, 0},
		{"told after the next grant", []Section{late, next}, nil, nil, 1, 0, 0, 0, 0},
		{"paused and fenced", []Section{pausedRejected, next}, pause, nil, 0, 0, 1, 0, 0},
		{"paused but the write got through", []Section{pausedAccepted, next}, pause, nil, 1, 0, 0, 0, 0},
		{"rejected but not paused", []Section{pausedRejected, next}, nil, nil, 1, 0, 0, 0, 0},
		{"paused after its write was taken", []Section{wrote(30), next}, pause, nil, 0, 0, 1, 0, 0},
		{"paused, write taken after the next grant", []Section{wrote(60), next}, pause, nil, 1, 0, 0, 0, 0},
		{"write taken early but not paused", []Section{wrote(30), next}, nil, nil, 1, 0, 0, 0, 0},
		{"granting call stopped, fenced", []Section{ended, meanwhile, lateReturn}, callPause, nil, 0, 0, 1, 0, 0},
		{"granting call not stopped", []Section{ended, meanwhile, lateReturn}, nil, nil, 2, 0, 0, 1, 0},
		{"stopped before the call", []Section{ended, meanwhile, askedLater}, callPause, nil, 2, 0, 0, 1, 0},
		{"token went back", []Section{sec("k", 1, 5, 0, 10), sec("k", 2, 4, 20, 30)}, nil, nil, 1, 0, 0, 1, 0},
		{"token repeated", []Section{sec("k", 1, 5, 0, 10), sec("k", 2, 5, 20, 30)}, nil, nil, 1, 0, 0, 1, 0},
		{"token compared with every earlier section", []Section{sec("k", 1, 9, 0, 10), sec("k", 2, 5, 20, 30), sec("k", 3, 7, 40, 50)}, nil, nil, 2, 0, 0, 2, 0},
		{"crash between the grants, no write", []Section{crashed, next}, nil, crash, 0, 0, 0, 0, 1},
		{"crash between the grants, write taken", []Section{sec("k", 1, 1, 0, 100), next}, nil, crash, 1, 0, 0, 0, 0},
		{"crash after both grants", []Section{crashed, next}, nil, []int64{60 * ms}, 1, 0, 0, 0, 0},
		{"no crashes given", []Section{crashed, next}, nil, nil, 1, 0, 0, 0, 0},
		{"crash while the granting call was under way", []Section{grantedInCrash, next}, nil, crash, 0, 0, 0, 0, 1},
		{"crash before the granting call", []Section{askedAfterCrash, next}, nil, crash, 1, 0, 0, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Check(c.secs, nil, c.pauses, c.crashes, 0)
			if r.Violations != c.violations || r.LostButTold != c.told || r.PausedFenced != c.fenced || r.TokenErrors != c.tE || r.CrashFenced != c.crashFenced {
				t.Errorf("got violations=%d told=%d fenced=%d tokenErrors=%d crashFenced=%d, want %d %d %d %d %d (%v)",
					r.Violations, r.LostButTold, r.PausedFenced, r.TokenErrors, r.CrashFenced, c.violations, c.told, c.fenced, c.tE, c.crashFenced, r.Examples)
			}
			if r.OK() != (c.violations == 0) {
				t.Errorf("OK() = %v with %d violations", r.OK(), r.Violations)
			}
			if c.violations > 0 && len(r.Examples) == 0 {
				t.Errorf("a violation without an example")
			}
		})
	}
}

func TestCheckFindsHungCalls(t *testing.T) {
	s := int64(time.Second)
	calls := []Call{
		{Op: "lock", Start: 0, Deadline: 2 * s, Return: 2*s + s/2},          // within grace
		{Op: "lock", Start: 0, Deadline: 2 * s, Return: 4 * s},              // hung
		{Op: "unlock", Start: 0, Deadline: 2 * s},                           // never returned, run ended late: hung
		{Op: "unlock", Start: 9 * s, Deadline: 11 * s},                      // still in time when the run ended
		{Op: "lock", Start: 0, Deadline: 2 * s, Return: 1 * s, Err: "boom"}, // an error, not a hang
	}
	// A call of a stopped process is not judged.
	calls = append(calls, Call{Op: "lock", Proc: 7, Start: 0, Deadline: 2 * s, Return: 9 * s})
	r := Check(nil, calls, []Pause{{Proc: 7, Start: s, End: 8 * s}}, nil, 10*s)
	if r.Hung != 2 || r.Errors != 1 || r.Ops != 6 {
		t.Fatalf("hung=%d errors=%d ops=%d, want 2 1 6 (%v)", r.Hung, r.Errors, r.Ops, r.Examples)
	}
	if r.OK() {
		t.Fatal("a run with hung calls is OK")
	}
	line := r.Line("x")
	for _, want := range []string{"CHECK x ", "ops=6", "hung=2", "violations=0"} {
		if !strings.Contains(line, want) {
			t.Errorf("summary %q lacks %q", line, want)
		}
	}
}

// permit is a section of a 2-permit semaphore key "s", made without a
// fenced write, as the semaphore workload makes them.
func permit(proc int, token uint64, start, end int64) Section {
	s := sec("s", proc, token, start, end)
	s.Limit, s.Write = 2, NoWrite
	return s
}

// asking sets when s's grant was asked for, in ms.
func asking(s Section, at int64) Section {
	s.Asked = at*ms + 1
	return s
}

func TestCheckJudgesPermits(t *testing.T) {
	told := permit(1, 1, 0, 100)
	told.Told = 40 * ms
	late := permit(1, 1, 0, 100)
	late.Told = 70 * ms
	cases := []struct {
		name                      string
		secs                      []Section
		pauses                    []Pause
		violations, told, stopped int
	}{
		{"two at once", []Section{permit(1, 1, 0, 100), permit(2, 2, 10, 90)}, nil, 0, 0, 0},
		{"three one after another in pairs", []Section{permit(1, 1, 0, 50), permit(2, 2, 10, 100), permit(3, 3, 50, 120)}, nil, 0, 0, 0},
		{"three at once", []Section{permit(1, 1, 0, 100), permit(2, 2, 10, 100), permit(3, 3, 50, 120)}, nil, 1, 0, 0},
		{"the third after the first was told", []Section{told, permit(2, 2, 10, 100), permit(3, 3, 50, 120)}, nil, 0, 1, 0},
		{"the third before the first was told", []Section{late, permit(2, 2, 10, 100), permit(3, 3, 50, 120)}, nil, 1, 0, 0},
		{"the first paused", []Section{permit(1, 1, 0, 100), permit(2, 2, 10, 100), permit(3, 3, 50, 120)},
			[]Pause{{Proc: 1, Start: 20 * ms, End: 90 * ms}}, 0, 0, 1},
		{"the first's call paused, not its hold", []Section{asking(permit(1, 1, 30, 100), 0), permit(2, 2, 10, 100),
			permit(3, 3, 50, 120)}, []Pause{{Proc: 1, Start: 5 * ms, End: 25 * ms}}, 1, 0, 0},
		{"tokens still rise", []Section{permit(1, 5, 0, 10), permit(2, 4, 20, 30)}, nil, 1, 0, 0},
		{"granted together, learned late", []Section{permit(1, 5, 0, 10), asking(permit(2, 4, 20, 30), 0)}, nil, 0, 0, 0},
		{"asked after the other ended", []Section{permit(1, 5, 0, 10), asking(permit(2, 4, 20, 30), 15)}, nil, 1, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Check(c.secs, nil, c.pauses, nil, 0)
			if r.Violations != c.violations || r.LostButTold != c.told || r.PausedFenced != c.stopped {
				t.Errorf("got violations=%d told=%d paused=%d, want %d %d %d (%v)", r.Violations, r.LostButTold,
					r.PausedFenced, c.violations, c.told, c.stopped, r.Examples)
			}
		})
	}
}
