package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/retryhttp/retryhttp/internal/simkit"
)

// The chart: one row of panels per scenario, one panel per policy. Each
// panel shows, over the run's time, the attempts answered per second as
// bars stacked by outcome (left axis), and the number of requests waiting
// in the client as a line (right axis). Panels in a row share the time
// axis, so runs that end sooner end further left, and their vertical
// scales: a row's left axis runs to the largest stack of any of its panels,
// its right axis to the most requests any of them kept waiting, so the
// panels of a row compare at a glance (a bar as tall as its neighbour's is
// as many attempts a second).

// seriesInfo describes one series of the chart.
type seriesInfo struct {
	class, label, color string
}

// barSeries are the outcomes stacked in the bars, bottom to top, indexed
// by kind.
var barSeries = [numKinds]seriesInfo{
	kindOK:        {"ok", "success (2xx)", "#2ca02c"},
	kindThrottled: {"throttled", "429 rate limited", "#ff7f0e"},
	kind5xx:       {"5xx", "5xx / 529 overloaded", "#d62728"},
	kindNoAnswer:  {"noanswer", "no answer: reset, timeout, body cut short", "#9467bd"},
	kindOther:     {"other", "other status", "#8c8c8c"},
}

// waitSeries is the line of requests waiting in the client.
var waitSeries = seriesInfo{"wait", "local wait: requests waiting in the client", "#1f77b4"}

// Geometry, in SVG user units (pixels).
const (
	chartMarginL = 70
	chartMarginR = 70
	chartTop     = 96 // title, subtitle and legend
	panelW       = 300
	panelH       = 150
	panelGapX    = 110 // room for one panel's right labels and the next one's left labels
	rowHeader    = 44  // a row's scenario title and description
	panelHeader  = 34  // a panel's policy name and numbers
	panelFooter  = 26  // the time axis' labels
	rowGap       = 16
	// maxBins bounds the bars per panel: with more, a steady 50 requests a
	// second shows as a comb of 2s and 3s per bin rather than as a level.
	maxBins = 40
	// minWaitTop is the least top of the waiting axis, so a run in which
	// almost nothing waits draws a flat line rather than magnified noise.
	minWaitTop = 4
)

// panel is one run binned for drawing.
type panel struct {
	bins    int
	binW    time.Duration
	rates   [numKinds][]float64 // attempts answered per second, by bin
	waiting []float64           // mean requests waiting, by bin
}

// peaks returns the panel's tallest stack of bars and the most requests
// it shows waiting in one bin.
func (p panel) peaks() (rate, waiting float64) {
	for i := range p.bins {
		var sum float64
		for k := range p.rates {
			sum += p.rates[k][i]
		}
		rate = max(rate, sum)
		waiting = max(waiting, p.waiting[i])
	}
	return rate, waiting
}

// scale is the vertical scales of a row of panels: the left axis' ticks and
// top (attempts answered per second) and the right axis' (requests
// waiting).
type scale struct {
	yt, wt     []float64
	yTop, wTop float64
}

// rowScale is the one scale every panel of a row is drawn on: room for the
// tallest stack and the most requests waiting of any of them.
func rowScale(ps []panel) scale {
	var peak, peakWait float64
	for _, p := range ps {
		r, w := p.peaks()
		peak, peakWait = max(peak, r), max(peakWait, w)
	}
	var s scale
	s.yt, s.yTop = ticks(peak, 4)
	s.wt, s.wTop = ticks(max(peakWait, minWaitTop), 4)
	return s
}

// binRun puts run r's attempts and waits into bins of width binW from its
// start. An attempt counts in the bin where its answer came.
func binRun(r *runResult, binW time.Duration, bins int) panel {
	p := panel{bins: bins, binW: binW, waiting: make([]float64, bins)}
	for k := range p.rates {
		p.rates[k] = make([]float64, bins)
	}
	binOf := func(t time.Time) int { return min(max(int(t.Sub(r.start)/binW), 0), bins-1) }
	perSecond := 1 / binW.Seconds()
	for _, tr := range r.requests {
		tr.mu.Lock()
		for _, a := range tr.attempts {
			p.rates[a.kind][binOf(a.end)] += perSecond
		}
		for _, iv := range tr.waits() {
			from, to := iv.from.Sub(r.start), iv.to.Sub(r.start)
			for b := binOf(iv.from); b <= binOf(iv.to); b++ {
				lo, hi := time.Duration(b)*binW, time.Duration(b+1)*binW
				if b == bins-1 {
					hi = max(hi, to) // the last bin takes any overhang
				}
				if overlap := min(to, hi) - max(from, lo); overlap > 0 {
					p.waiting[b] += float64(overlap) / float64(binW)
				}
			}
		}
		tr.mu.Unlock()
	}
	return p
}

// binning picks a round bin width for a row whose longest run took wall,
// and how many bins cover it.
func binning(wall time.Duration) (time.Duration, int) {
	w := niceStep(float64(max(wall, time.Millisecond)) / float64(maxBins))
	binW := max(time.Duration(math.Ceil(w)), time.Microsecond)
	bins := max(int(math.Ceil(float64(wall)/float64(binW))), 1)
	return binW, bins
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// ticks returns about n round tick values from 0 to at least top, and the
// axis' end (the last tick).
func ticks(top float64, n int) ([]float64, float64) {
	if !(top > 0) {
		top = 1
	}
	step := niceStep(top / float64(n))
	var ts []float64
	for i := 0; ; i++ {
		v := float64(i) * step
		ts = append(ts, v)
		if v >= top*(1-1e-9) {
			return ts, v
		}
	}
}

// fmtTick formats a tick value with no more digits than its step needs.
func fmtTick(v, step float64) string {
	decimals := 0
	if step < 1 {
		decimals = int(math.Ceil(-math.Log10(step) - 1e-9))
	}
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// writeChart draws the chart of every run, grouped by scenario, as SVG.
func writeChart(cfg config, groups [][]*runResult) []byte {
	cols := 1
	for _, g := range groups {
		cols = max(cols, len(g))
	}
	width := chartMarginL + cols*panelW + (cols-1)*panelGapX + chartMarginR
	rowH := rowHeader + panelHeader + panelH + panelFooter + rowGap
	height := chartTop + len(groups)*rowH + 10

	var b bytes.Buffer
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif">`+"\n",
		width, height, width, height)
	b.WriteString(`<title>retrysim: requests over time by outcome</title>
<style>
text { fill: #222; }
.title { font-size: 20px; font-weight: bold; }
.sub { font-size: 12px; fill: #555; }
.row { font-size: 15px; font-weight: bold; }
.about { font-size: 11px; fill: #555; }
.ptitle { font-size: 13px; font-weight: bold; }
.pstats { font-size: 11px; fill: #444; }
.tick { font-size: 10px; fill: #555; }
.wtick { font-size: 10px; fill: #1f77b4; }
.axis { font-size: 11px; fill: #333; }
.legend { font-size: 12px; }
.grid { stroke: #e4e4e4; stroke-width: 1; }
.frame { fill: none; stroke: #999; stroke-width: 1; }
</style>
<rect x="0" y="0" width="100%" height="100%" fill="#ffffff"/>
`)
	text(&b, chartMarginL, 30, "start", "title", "retrysim: requests over time by outcome")
	text(&b, chartMarginL, 50, "start", "sub", fmt.Sprintf(
		"Bars: attempts answered per second, stacked by outcome (left axis). Line: requests waiting in the client "+
			"for a retry, a pacing slot or a breaker (right axis, blue). Time runs from each run's start; "+
			"the panels of a row share their scales. Seed %d.", cfg.seed))
	legend(&b, chartMarginL, 76, groups)

	for gi, g := range groups {
		y0 := chartTop + gi*rowH
		drawRow(&b, g, y0)
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// legend draws the series' swatches in one line.
func legend(b *bytes.Buffer, x, y int, groups [][]*runResult) {
	other := false
	for _, g := range groups {
		for _, r := range g {
			for _, tr := range r.requests {
				for _, a := range tr.attempts {
					other = other || a.kind == kindOther
				}
			}
		}
	}
	fmt.Fprintf(b, `<g class="legend">`+"\n")
	for k, s := range barSeries {
		if kind(k) == kindOther && !other {
			continue
		}
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="14" height="14" fill="%s"/>`+"\n", x, y-11, s.color)
		text(b, x+19, y, "start", "legend", s.label)
		x += 30 + 7*len(s.label)
	}
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2.5"/>`+"\n", x, y-4, x+20, y-4, waitSeries.color)
	text(b, x+25, y, "start", "legend", waitSeries.label)
	b.WriteString("</g>\n")
}

// drawRow draws one scenario's runs side by side from height y0.
func drawRow(b *bytes.Buffer, g []*runResult, y0 int) {
	if len(g) == 0 {
		return
	}
	sc := g[0].scenario
	text(b, chartMarginL-50, y0+16, "start", "row", sc.title+" ("+sc.key+")")
	text(b, chartMarginL-50, y0+32, "start", "about", sc.about)

	var wall time.Duration
	for _, r := range g {
		wall = max(wall, r.wall)
	}
	binW, bins := binning(wall)
	span := float64(binW) * float64(bins) // the time axis' length, ns
	xt, _ := ticks(span/float64(time.Second), 5)

	ps := make([]panel, len(g))
	for i, r := range g {
		ps[i] = binRun(r, binW, bins)
	}
	rs := rowScale(ps)

	for i, r := range g {
		x0 := chartMarginL + i*(panelW+panelGapX)
		top := y0 + rowHeader + panelHeader
		s := summarize(r)
		fmt.Fprintf(b, `<g class="panel" data-scenario="%s" data-policy="%s" data-rate-top="%g" data-wait-top="%g">`+"\n",
			attr(sc.key), attr(r.policy.name), rs.yTop, rs.wTop)
		text(b, x0, top-20, "start", "ptitle", r.policy.name)
		stats := fmt.Sprintf("%d/%d ok, %d attempts, %d×429, %d×5xx, last done at %s",
			s.succeeded, s.requests, s.attempts, s.byKind[kindThrottled], s.byKind[kind5xx], simkit.Round3(s.wall))
		if sc.capacity != nil {
			stats = capacityStats(r)
		}
		text(b, x0, top-6, "start", "pstats", stats)
		drawPanel(b, ps[i], rs, x0, top, span, xt, i == 0, i == len(g)-1)
		b.WriteString("</g>\n")
	}
}

// drawPanel draws panel p's plot on the row's scale sc with its top-left
// corner at (x0, y0). span is the time axis' length in nanoseconds and xt
// its ticks in seconds.
func drawPanel(b *bytes.Buffer, p panel, sc scale, x0, y0 int, span float64, xt []float64, first, last bool) {
	xOf := func(ns float64) float64 { return float64(x0) + float64(panelW)*ns/span }
	bottom := float64(y0 + panelH)
	yt, wt := sc.yt, sc.wt
	yOf := func(v float64) float64 { return bottom - float64(panelH)*v/sc.yTop }
	wOf := func(v float64) float64 { return bottom - float64(panelH)*v/sc.wTop }

	// Grid and left axis.
	for _, v := range yt {
		y := yOf(v)
		fmt.Fprintf(b, `<line class="grid" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`+"\n", x0, y, x0+panelW, y)
		text(b, x0-5, int(math.Round(y))+3, "end", "tick", fmtTick(v, stepOf(yt)))
	}
	// Right axis.
	for _, v := range wt {
		text(b, x0+panelW+5, int(math.Round(wOf(v)))+3, "start", "wtick", fmtTick(v, stepOf(wt)))
	}
	// Time axis.
	for _, v := range xt {
		x := xOf(v * float64(time.Second))
		if x > float64(x0+panelW)+0.5 {
			break
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999"/>`+"\n", x, bottom, x, bottom+4)
		text(b, int(math.Round(x)), int(bottom)+15, "middle", "tick", fmtTick(v, stepOf(xt))+"s")
	}
	if first {
		axisLabel(b, x0-42, y0+panelH/2, -90, "axis", "attempts answered per second")
	}
	if last {
		axisLabel(b, x0+panelW+48, y0+panelH/2, 90, "axis", "requests waiting in the client")
	}

	// Bars, one group per series so each can be found (and styled) whole.
	binPx := float64(panelW) * float64(p.binW) / span
	base := make([]float64, p.bins)
	for k, s := range barSeries {
		fmt.Fprintf(b, `<g class="series %s" fill="%s">`+"\n", s.class, s.color)
		for i, v := range p.rates[k] {
			if v <= 0 {
				continue
			}
			yHi, yLo := yOf(base[i]+v), yOf(base[i])
			fmt.Fprintf(b, `<rect x="%.2f" y="%.2f" width="%.2f" height="%.2f"/>`+"\n",
				xOf(float64(i)*float64(p.binW)), yHi, max(binPx-0.6, 0.4), yLo-yHi)
			base[i] += v
		}
		b.WriteString("</g>\n")
	}

	// The waiting line, as steps over the bins, with a light fill under it.
	var path strings.Builder
	for i, v := range p.waiting {
		xa, xb := xOf(float64(i)*float64(p.binW)), xOf(float64(i+1)*float64(p.binW))
		if i == 0 {
			fmt.Fprintf(&path, "M%.2f %.2f", xa, wOf(v))
		} else {
			fmt.Fprintf(&path, " L%.2f %.2f", xa, wOf(v))
		}
		fmt.Fprintf(&path, " L%.2f %.2f", xb, wOf(v))
	}
	line := path.String()
	fmt.Fprintf(b, `<g class="series %s">`+"\n", waitSeries.class)
	fmt.Fprintf(b, `<path d="%s L%.2f %.2f L%.2f %.2f Z" fill="%s" fill-opacity="0.10" stroke="none"/>`+"\n",
		line, xOf(span), bottom, xOf(0), bottom, waitSeries.color)
	fmt.Fprintf(b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.8"/>`+"\n", line, waitSeries.color)
	b.WriteString("</g>\n")

	fmt.Fprintf(b, `<rect class="frame" x="%d" y="%d" width="%d" height="%d"/>`+"\n", x0, y0, panelW, panelH)
}

// stepOf is the distance between ticks.
func stepOf(ts []float64) float64 {
	if len(ts) < 2 {
		return 1
	}
	return ts[1] - ts[0]
}

// text writes an SVG text element with its content escaped.
func text(b *bytes.Buffer, x, y int, anchor, class, s string) {
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="%s" class="%s">`, x, y, anchor, class)
	xml.EscapeText(b, []byte(s))
	b.WriteString("</text>\n")
}

// axisLabel writes a rotated label centred on (x, y).
func axisLabel(b *bytes.Buffer, x, y, angle int, class, s string) {
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle" class="%s" transform="rotate(%d %d %d)">`, x, y, class, angle, x, y)
	xml.EscapeText(b, []byte(s))
	b.WriteString("</text>\n")
}

// attr escapes s for an attribute value.
func attr(s string) string {
	var b bytes.Buffer
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
