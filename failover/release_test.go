package failover_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus/engine"
	"github.com/cerberus-go/cerberus/engine/enginetest"
	"github.com/cerberus-go/cerberus/engine/memory"
	"github.com/cerberus-go/cerberus/failover"
)

// TestManagerRelease runs enginetest.RunRelease on Managers over memory
// engines sharing their Stores: the Manager is an engine.Releaser on its
// active engine, with tokens in its epoch-carrying form.
func TestManagerRelease(t *testing.T) {
	a, b := memory.NewStore(), memory.NewStore()
	enginetest.RunRelease(t, func() (engine.Engine, error) {
		return failover.New([]failover.NamedEngine{{Name: "a", Engine: memory.New(memory.WithStore(a))},
			{Name: "b", Engine: memory.New(memory.WithStore(b))}}, failover.Options{Epoch: 3})
	})
}

// TestHandlerRelease: a POST release=KEY&confirm=KEY frees the key on the
// active engine (or engine=NAME) and lists the freed holders with who
// asked (Options.Caller); a missing or different confirm is 400, a free
// key or an unknown engine 404, a read-only handler 403, a GET carrying
// release 405, and none of them changes anything.
func TestHandlerRelease(t *testing.T) {
	a, b := memory.New(), memory.New()
	f, err := failover.New([]failover.NamedEngine{{Name: "a", Engine: a}, {Name: "b", Engine: b}},
		failover.Options{Caller: func(r *http.Request) string { return r.Header.Get("X-User") }})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	l, err := f.Acquire(ctx, engine.Request{Key: "job", TTL: time.Minute, Renew: true, Value: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(f.Handler(true))
	defer srv.Close()
	readonly := httptest.NewServer(f.Handler(false))
	defer readonly.Close()
	post := func(base string, form url.Values) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-User", "alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, tc := range []struct {
		base string
		form url.Values
		code int
	}{
		{srv.URL, url.Values{"release": {"job"}}, http.StatusBadRequest},
		{srv.URL, url.Values{"release": {"job"}, "confirm": {"jo"}}, http.StatusBadRequest},
		{srv.URL, url.Values{"release": {""}, "confirm": {""}}, http.StatusBadRequest},
		{srv.URL, url.Values{"release": {"free"}, "confirm": {"free"}}, http.StatusNotFound},
		{srv.URL, url.Values{"release": {"job"}, "confirm": {"job"}, "engine": {"b"}}, http.StatusNotFound},
		{srv.URL, url.Values{"release": {"job"}, "confirm": {"job"}, "engine": {"zz"}}, http.StatusNotFound},
		{readonly.URL, url.Values{"release": {"job"}, "confirm": {"job"}}, http.StatusForbidden},
	} {
		if code, body := post(tc.base, tc.form); code != tc.code {
			t.Errorf("POST %v: %d %s; want %d", tc.form, code, body, tc.code)
		}
	}
	resp, err := http.Get(srv.URL + "?release=job&confirm=job")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET ?release=job&confirm=job: %d; want 405", resp.StatusCode)
	}
	if l.Err() != nil || f.Active() != "a" {
		t.Fatalf("a refused release changed something: lease %v, active %s", l.Err(), f.Active())
	}
	code, body := post(srv.URL, url.Values{"release": {"job"}, "confirm": {"job"}})
	var doc struct {
		Released, Engine, By string
		Holders              []struct {
			Mode  string
			Token uint64
			Value string
		}
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &doc) != nil || doc.Released != "job" ||
		doc.Engine != "a" || doc.By != "alice" || len(doc.Holders) != 1 || doc.Holders[0].Token != l.Token() ||
		doc.Holders[0].Mode != "exclusive" || doc.Holders[0].Value != "w1" {
		t.Fatalf("POST release=job&confirm=job: %d %s; want the holder with token %d, by alice", code, body, l.Token())
	}
	<-l.Done()
	if !errors.Is(l.Err(), engine.ErrReleasedByOperator) {
		t.Errorf("the released lease ended with %v; want ErrReleasedByOperator", l.Err())
	}
}

// TestHandlerFormPosts: the status page's forms, posted by a browser (an
// Accept that prefers text/html), get an HTML page saying what was done,
// or why nothing was, with the same status code as the JSON answer, the
// key escaped, and a link back to the page.
func TestHandlerFormPosts(t *testing.T) {
	f, err := failover.New([]failover.NamedEngine{{Name: "a", Engine: memory.New()}, {Name: "b", Engine: memory.New()}},
		failover.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const key = `<b>"job"</b>`
	l, err := f.Acquire(context.Background(), engine.Request{Key: key, TTL: time.Minute, Renew: true, Value: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(f.Handler(true))
	defer srv.Close()
	post := func(form url.Values) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(body)
	}
	check := func(what string, code int, ctype, body string, wantCode int, want ...string) {
		t.Helper()
		if code != wantCode || !strings.HasPrefix(ctype, "text/html") || strings.Contains(body, "<b>") ||
			!strings.Contains(body, `href="?"`) {
			t.Errorf("%s: %d %s %q; want %d, an escaped HTML page with a link back", what, code, ctype, body, wantCode)
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("%s: the page does not say %q: %s", what, w, body)
			}
		}
	}
	code, ctype, body := post(url.Values{"release": {key}, "confirm": {"other"}})
	check("a bad confirm", code, ctype, body, http.StatusBadRequest, "Nothing was changed")
	code, ctype, body = post(url.Values{"release": {key}, "confirm": {key}})
	check("a release", code, ctype, body, http.StatusOK, "Released", "&lt;b&gt;", fmt.Sprint(l.Token()))
	code, ctype, body = post(url.Values{"engine": {"b"}})
	check("a switch", code, ctype, body, http.StatusOK, "Switched to b")
	if f.Active() != "b" {
		t.Errorf("after the switch form: active %s; want b", f.Active())
	}
}
