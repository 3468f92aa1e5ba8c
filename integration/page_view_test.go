package integration

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/chromedp"
	"golang.org/x/net/html"
)

// pageView is what the status page shows, read from the DOM chromium
// built (through the DevTools DOM domain: no script runs in the page).
type pageView struct {
	Active, ActiveFrom, Epoch, Agreement, ListErr string
	Processes                                     []string          // the fleet table's process IDs
	Held                                          map[string]string // "engine key" -> its tokens, comma-separated
	SwitchForm                                    bool
	Release                                       []string // the keys of the force-release forms
	PostForms, Scripts, Bold                      int      // forms posting, <script> and <b> elements
}

// readPage reads the page loaded in ctx's tab.
func readPage(t *testing.T, ctx context.Context) pageView {
	t.Helper()
	// The root comes from chromedp's own view of the DOM: a DOM.getDocument
	// here would renumber the nodes under chromedp's later queries.
	nodes, err := chromedp.Run(ctx, chromedp.Nodes(chromedp.CSS("html")))
	if err != nil || len(nodes) == 0 {
		t.Fatalf("no document: %v", err)
	}
	res, err := chromedp.Call(ctx, dom.GetOuterHTML, dom.GetOuterHTMLParams{BackendNodeID: nodes[0].BackendNodeID})
	if err != nil {
		t.Fatal(err)
	}
	root, err := html.Parse(strings.NewReader(res.OuterHTML))
	if err != nil {
		t.Fatal(err)
	}
	v := pageView{Held: map[string]string{}}
	for n := range root.Descendants() {
		if n.Type == html.ElementNode {
			v.element(n)
		}
	}
	return v
}

// element records what n shows.
func (v *pageView) element(n *html.Node) {
	switch attr(n, "id") {
	case "active":
		v.Active = text(n)
	case "active-from":
		v.ActiveFrom = text(n)
	case "epoch":
		v.Epoch = text(n)
	case "agreement":
		v.Agreement = text(n)
	case "list-error":
		v.ListErr = text(n)
	case "switch-form":
		v.SwitchForm = true
	}
	switch {
	case n.Data == "script":
		v.Scripts++
	case n.Data == "b":
		v.Bold++
	case n.Data == "form" && attr(n, "method") == "post":
		v.PostForms++
	case n.Data == "tr" && attr(n, "data-process") != "":
		v.Processes = append(v.Processes, attr(n, "data-process"))
	case n.Data == "tr" && hasClass(n, "holder"):
		eng := ""
		for p := n.Parent; p != nil; p = p.Parent {
			if p.Data == "section" {
				eng = attr(p, "data-engine")
			}
		}
		id := eng + " " + attr(n, "data-key")
		for c := range n.Descendants() {
			if c.Type == html.ElementNode && hasClass(c, "token") {
				v.Held[id] = strings.TrimPrefix(v.Held[id]+","+text(c), ",")
			}
		}
	case n.Data == "input" && attr(n, "name") == "release":
		v.Release = append(v.Release, attr(n, "value"))
	}
}

// attr is n's attribute name, "" if absent.
func attr(n *html.Node, name string) string {
	for _, a := range n.Attr {
		if a.Key == name {
			return a.Val
		}
	}
	return ""
}

func hasClass(n *html.Node, class string) bool {
	return slices.Contains(strings.Fields(attr(n, "class")), class)
}

// text is n's text, spaces collapsed.
func text(n *html.Node) string {
	var b strings.Builder
	for c := range n.Descendants() {
		if c.Type == html.TextNode {
			b.WriteString(c.Data)
		}
	}
	return strings.Join(strings.Fields(b.String()), " ")
}
