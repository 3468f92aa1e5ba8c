package failover_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cerberus-go/cerberus/failover"
)

// TestHandler: GET shows the status, and the fleet under a coordinator;
// POST switches, or says why not; other methods get 405.
func TestHandler(t *testing.T) {
	fl := newFleet(t)
	_, f := fl.client(t, failover.Options{})
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
	f.SetFleet(failover.FleetStatus{Scope: failover.ScopeFleet, Key: "k", Members: []failover.FleetMember{{ID: "p1", Active: "a"}}})
	if doc := get(srv.URL); doc["scope"] != "fleet" || doc["fleet"].(map[string]any)["key"] != "k" {
		t.Fatalf("status under a fleet coordinator: %v", doc)
	}
	f.SetFleet(failover.FleetStatus{})
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

// TestHandlerGetDoesNotSwitch: a GET that names an engine, as if to switch,
// is refused with 405 and leaves the active engine and the epoch as they
// were.
func TestHandlerGetDoesNotSwitch(t *testing.T) {
	fl := newFleet(t)
	_, f := fl.client(t, failover.Options{})
	srv := httptest.NewServer(f.Handler(true))
	defer srv.Close()
	for _, q := range []string{"?engine=b", "?engine=b&wait=1s", "?wait=1s"} {
		resp, err := http.Get(srv.URL + q)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(string(body), "must be a POST") {
			t.Errorf("GET %s: %d %q; want 405 saying a switch must be a POST", q, resp.StatusCode, body)
		}
	}
	if f.Active() != "a" || f.Epoch() != 0 {
		t.Errorf("after GETs naming engine b: active %s, epoch %d; want a, 0", f.Active(), f.Epoch())
	}
}
