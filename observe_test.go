package cerberus_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus"
)

type recordObserver struct {
	mu       sync.Mutex
	acquired []cerberus.AcquireEvent
	lost     []cerberus.LostEvent
}

func (r *recordObserver) Acquired(e cerberus.AcquireEvent) {
	r.mu.Lock()
	r.acquired = append(r.acquired, e)
	r.mu.Unlock()
}

func (r *recordObserver) Lost(e cerberus.LostEvent) {
	r.mu.Lock()
	r.lost = append(r.lost, e)
	r.mu.Unlock()
}

func (r *recordObserver) snapshot() ([]cerberus.AcquireEvent, []cerberus.LostEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]cerberus.AcquireEvent(nil), r.acquired...), append([]cerberus.LostEvent(nil), r.lost...)
}

func TestObserverSeesGrantsRefusalsAndLosses(t *testing.T) {
	fl := newFleet(t)
	rec := &recordObserver{}
	f, err := cerberus.NewFailover([]cerberus.NamedEngine{{Name: "a", Engine: fl.a}, {Name: "b", Engine: fl.b}}, cerberus.FailoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cerberus.New(f, cerberus.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := cerberus.WithOwner(ctxT(t))
	l := must(t)(c.Lock(ctx, "k"))
	_ = must(t)(c.Lock(ctx, "k")) // re-entry: not reported
	if _, err := c.TryLock(ctxT(t), "k"); !errors.Is(err, cerberus.ErrNotAcquired) {
		t.Fatal(err)
	}
	if err := f.SetActive("b"); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	onB := must(t)(c.RLock(ctxT(t), "r"))
	_ = onB.Unlock(ctxT(t))
	acq, lost := rec.snapshot()
	if len(acq) != 3 {
		t.Fatalf("%d acquire events, want 3 (grant, refusal, shared grant): %+v", len(acq), acq)
	}
	if acq[0].Engine != "a" || acq[0].Err != nil || acq[0].Token != l.Token() || !acq[0].Wait || acq[0].Shared {
		t.Errorf("grant event %+v", acq[0])
	}
	if acq[1].Engine != "a" || !errors.Is(acq[1].Err, cerberus.ErrNotAcquired) || acq[1].Wait {
		t.Errorf("refusal event %+v", acq[1])
	}
	if acq[2].Engine != "b" || !acq[2].Shared || acq[2].Err != nil {
		t.Errorf("grant on b event %+v", acq[2])
	}
	if len(lost) != 1 || lost[0].Engine != "a" || lost[0].Key != "k" || !errors.Is(lost[0].Err, cerberus.ErrEngineSwitched) {
		t.Fatalf("lost events %+v, want one for k on a with ErrEngineSwitched", lost)
	}
}

func TestLogObserver(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, _, _ := newClients(t, cerberus.WithObserver(cerberus.LogObserver(log)))
	l := must(t)(c.Lock(ctxT(t), "k", cerberus.WithTTL(30*time.Millisecond)))
	<-l.Done()
	out := buf.String()
	for _, want := range []string{"level=DEBUG msg=\"cerberus: lock granted\" engine=memory key=k", "level=WARN msg=\"cerberus: lease lost\" engine=memory key=k"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

func TestFailoverHandler(t *testing.T) {
	fl := newFleet(t)
	_, f := fl.client(t, cerberus.FailoverOptions{})
	srv := httptest.NewServer(f.Handler(true))
	defer srv.Close()
	readonly := httptest.NewServer(f.Handler(false))
	defer readonly.Close()
	get := func(url string) map[string]any {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var doc map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
			t.Fatal(err)
		}
		return doc
	}
	if doc := get(srv.URL); doc["active"] != "a" || len(doc["engines"].([]any)) != 2 || doc["scope"] != "process" || doc["fleet"] != nil {
		t.Fatalf("status %v", doc)
	}
	f.SetFleet(cerberus.FleetStatus{Scope: cerberus.ScopeFleet, Key: "k", Members: []cerberus.FleetMember{{ID: "p1", Active: "a"}}})
	if doc := get(srv.URL); doc["scope"] != "fleet" || doc["fleet"].(map[string]any)["key"] != "k" {
		t.Fatalf("status under a fleet coordinator: %v", doc)
	}
	f.SetFleet(cerberus.FleetStatus{})
	for _, tc := range []struct {
		url  string
		code int
	}{
		{srv.URL + "?engine=b", http.StatusOK},
		{srv.URL + "?engine=nope", http.StatusNotFound},
		{srv.URL, http.StatusBadRequest},
		{readonly.URL + "?engine=a", http.StatusForbidden},
	} {
		resp, err := http.Post(tc.url, "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("POST %s: %d, want %d", tc.url, resp.StatusCode, tc.code)
		}
	}
	if f.Active() != "b" || f.Epoch() != 1 {
		t.Fatalf("after the switches: active %s epoch %d, want b and 1", f.Active(), f.Epoch())
	}
	req, _ := http.NewRequest(http.MethodDelete, srv.URL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("DELETE: %d", resp.StatusCode)
	}
}
