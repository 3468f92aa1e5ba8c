// Command benchchart turns the BENCH lines that the bench package prints
// into an SVG chart: one panel per figure, one bar per library, grouped by
// engine. Usage: benchchart < results.txt > chart.svg
package main

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// panel is one figure of the chart.
type panel struct {
	kind, metric, title, unit string
	lowerBetter               bool
}

var panels = []panel{
	{"uncontended", "cycles_per_s", "Uncontended lock+unlock cycles/s", "cycles/s", false},
	{"hotkey", "acq_per_s", "Hot key, 16 clients, 1 ms hold: acquisitions/s", "acq/s", false},
	{"hotkey", "wait_p99_ms", "Hot key: wait p99 (ms)", "ms", true},
	{"hotkey", "fairness", "Hot key: per-client min/max acquisitions", "", false},
}

type bar struct {
	name  string
	value float64
}

func main() {
	vals, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchchart:", err)
		os.Exit(1)
	}
	if err := render(os.Stdout, vals); err != nil {
		fmt.Fprintln(os.Stderr, "benchchart:", err)
		os.Exit(1)
	}
}

// parse reads "BENCH <kind> <name> <metric>=<value>" lines; others are
// ignored.
func parse(r io.Reader) (map[string][]bar, error) {
	vals := map[string][]bar{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 || f[0] != "BENCH" {
			continue
		}
		metric, v, ok := strings.Cut(f[3], "=")
		if !ok {
			continue
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			continue
		}
		k := f[1] + " " + metric
		vals[k] = append(vals[k], bar{f[2], x})
	}
	return vals, sc.Err()
}

func render(w io.Writer, vals map[string][]bar) error {
	const width, barH, gap, left, panelGap = 860, 16, 4, 260, 40
	var body strings.Builder
	y := 20
	for _, p := range panels {
		bars := vals[p.kind+" "+p.metric]
		if len(bars) == 0 {
			continue
		}
		sort.SliceStable(bars, func(i, j int) bool { return bars[i].name < bars[j].name })
		maxV := 0.0
		for _, b := range bars {
			maxV = max(maxV, b.value)
		}
		note := ""
		if p.lowerBetter {
			note = " (lower is better)"
		}
		fmt.Fprintf(&body, `<text x="10" y="%d" font-weight="bold">%s%s</text>`+"\n", y,
			html.EscapeString(p.title), note)
		y += 10
		for _, b := range bars {
			l := 0.0
			if maxV > 0 {
				l = b.value / maxV * float64(width-left-120)
			}
			color := "#9aa5b1"
			if strings.Contains(b.name, "cerberus") {
				color = "#2f6fba"
			}
			fmt.Fprintf(&body, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-8, y+barH-4,
				html.EscapeString(b.name))
			fmt.Fprintf(&body, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", left, y, l,
				barH, color)
			fmt.Fprintf(&body, `<text x="%.1f" y="%d">%s %s</text>`+"\n", float64(left)+l+6, y+barH-4,
				format(b.value), p.unit)
			y += barH + gap
		}
		y += panelGap
	}
	_, err := fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">
<rect width="100%%" height="100%%" fill="white"/>
%s</svg>
`, width, y, body.String())
	return err
}

func format(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}
