package failover_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cerberus-go/cerberus/failover"
)

// browserAccept is what chromium sends for a page.
const browserAccept = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"

// getPage sends a GET with accept and returns the status, the content
// type and the body.
func getPage(t *testing.T, url, accept string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// TestHandlerPageOrJSON: a browser's Accept gets the page, any other
// Accept JSON; the page escapes a key that looks like markup, lists it
// with its token, and shows operator forms only with permission.
func TestHandlerPageOrJSON(t *testing.T) {
	fl := newFleet(t)
	c, f := fl.client(t, failover.Options{})
	const key = `page/<b id="x">&'"`
	l, err := c.Lock(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	rw := httptest.NewServer(f.Handler(true))
	defer rw.Close()
	ro := httptest.NewServer(f.Handler(false))
	defer ro.Close()
	for _, accept := range []string{"", "*/*", "application/json", "text/html;q=0.5, application/json", "text/*;q=0.5, */*"} {
		code, ct, body := getPage(t, rw.URL+"?prefix=page/", accept)
		var doc map[string]any
		if code != 200 || ct != "application/json" || json.Unmarshal([]byte(body), &doc) != nil || doc["locks"] == nil {
			t.Errorf("Accept %q: %d %s %.80q; want 200 and JSON with locks", accept, code, ct, body)
		}
	}
	for _, accept := range []string{browserAccept, "text/html", "application/json;q=0.5, text/html"} {
		if code, ct, _ := getPage(t, rw.URL, accept); code != 200 || !strings.HasPrefix(ct, "text/html") {
			t.Errorf("Accept %q: %d %s; want the page", accept, code, ct)
		}
	}
	_, _, page := getPage(t, rw.URL+"?prefix=page/", browserAccept)
	if strings.Contains(page, `<b id="x">`) || !strings.Contains(page, `page/&lt;b id=&#34;x&#34;&gt;&amp;&#39;&#34;`) {
		t.Errorf("the key is not escaped, or not shown:\n%s", page)
	}
	if !strings.Contains(page, `value="page/&lt;b id=&#34;x&#34;&gt;&amp;&#39;&#34;"`) {
		t.Errorf("no release form for the key")
	}
	for _, tag := range []string{"<script", " src=", "http://", "https://"} {
		if strings.Contains(page, tag) {
			t.Errorf("the page has %q: it must be self-contained, without script", tag)
		}
	}
	if n := strings.Count(page, `method="post"`); n != 2 {
		t.Errorf("%d POST forms with permission; want 2 (switch, one release)", n)
	}
	_, _, page = getPage(t, ro.URL+"?prefix=page/", browserAccept)
	if strings.Contains(page, `method="post"`) || !strings.Contains(page, "&lt;b id=") {
		t.Errorf("without permission: want the key listed and no POST form")
	}
}

// TestHandlerBadListing: a bad prefix or limit gets 400 and says why, as
// JSON's plain error and on the page.
func TestHandlerBadListing(t *testing.T) {
	fl := newFleet(t)
	_, f := fl.client(t, failover.Options{})
	srv := httptest.NewServer(f.Handler(false))
	defer srv.Close()
	for q, want := range map[string]string{
		"?prefix=":                             "give a prefix",
		"?limit=5":                             "give a prefix",
		"?prefix=a&limit=0":                    `limit "0" is not a number from 1 to`,
		"?prefix=a&limit=x":                    `limit "x"`,
		"?prefix=a&limit=-1":                   `limit "-1"`,
		"?prefix=" + strings.Repeat("k", 5000): "prefix",
	} {
		code, _, body := getPage(t, srv.URL+q, "")
		if code != http.StatusBadRequest || !strings.Contains(body, want) {
			t.Errorf("JSON GET %.40s: %d %.200q; want 400 saying %q", q, code, body, want)
		}
		code, _, body = getPage(t, srv.URL+q, browserAccept)
		if code != http.StatusBadRequest || !strings.Contains(body, `id="list-error"`) || !strings.Contains(body, escaped(want)) {
			t.Errorf("page GET %.40s: %d; want 400 and the page saying %q", q, code, want)
		}
	}
}

// escaped is s as html/template escapes it in text.
func escaped(s string) string { return strings.ReplaceAll(s, `"`, "&#34;") }
