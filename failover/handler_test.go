package failover_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
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
