package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// at is t0 plus ms milliseconds.
func at(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }

// fakeRun builds a finished run by hand: no network, no waiting.
func fakeRun(sc *scenario, name string, reqs ...*requestTrace) *runResult {
	r := &runResult{scenario: sc, policy: policy{name: name}, start: t0, requests: reqs}
	for _, tr := range reqs {
		r.wall = max(r.wall, tr.end.Sub(t0))
	}
	return r
}

// traced is a sent request with the given attempts, ending at end.
func traced(id int, startMS, endMS float64, ok bool, attempts ...attempt) *requestTrace {
	tr := &requestTrace{id: id, start: at(startMS), end: at(endMS), sent: true, ok: ok, attempts: attempts}
	if !ok {
		tr.reason = "529 Overloaded"
	}
	return tr
}

func try(fromMS, toMS float64, k kind, status int) attempt {
	return attempt{start: at(fromMS), end: at(toMS), kind: k, status: status}
}

// chartFixture is two scenarios of two runs each, with every outcome.
func chartFixture() [][]*runResult {
	outage := &scenario{key: "outage", title: "Outage", about: `529 for 1s & "then" <200>`}
	contention := &scenario{key: "contention", title: "Contention", about: "clients"}
	return [][]*runResult{
		{
			fakeRun(outage, "no retries",
				traced(0, 0, 1, false, try(0, 1, kind5xx, 529)),
				traced(1, 500, 501, false, try(500, 501, kind5xx, 529))),
			fakeRun(outage, "retryhttp defaults",
				traced(0, 0, 1201, true, try(0, 1, kind5xx, 529), try(1200, 1201, kindOK, 200)),
				traced(1, 500, 1900, true, try(500, 501, kindThrottled, 429), try(1000, 1010, kindNoAnswer, 0),
					try(1800, 1801, kindOther, 410), try(1899, 1900, kindOK, 200))),
		},
		{
			fakeRun(contention, "full", traced(0, 0, 30, true, try(0, 30, kindOK, 200))),
			fakeRun(contention, "no jitter", traced(0, 0, 90, true, try(0, 1, kind5xx, 503), try(60, 90, kindOK, 200))),
		},
	}
}

// svgElement is what the test looks at in each element of the chart.
type svgElement struct {
	name  string
	attrs map[string]string
	text  string
}

// decodeSVG parses the chart with encoding/xml, failing on any malformed
// part, and returns its elements in document order.
func decodeSVG(t *testing.T, data []byte) []svgElement {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(data))
	var els []svgElement
	var stack []int
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err, "the chart is well-formed XML")
		switch tok := tok.(type) {
		case xml.StartElement:
			e := svgElement{name: tok.Name.Local, attrs: map[string]string{}}
			for _, a := range tok.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			els = append(els, e)
			stack = append(stack, len(els)-1)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				els[stack[len(stack)-1]].text += string(tok)
			}
		}
	}
	require.NotEmpty(t, els)
	assert.Equal(t, "svg", els[0].name, "the root is <svg>")
	assert.Equal(t, "http://www.w3.org/2000/svg", els[0].attrs["xmlns"])
	return els
}

func TestChartIsWellFormedSVGWithEverySeries(t *testing.T) {
	groups := chartFixture()
	data := writeChart(defaultConfig(), groups)
	els := decodeSVG(t, data)

	var texts []string
	series := map[string]int{}
	panels := 0
	for _, e := range els {
		switch {
		case e.name == "text":
			texts = append(texts, e.text)
		case e.name == "g" && strings.HasPrefix(e.attrs["class"], "series "):
			series[strings.TrimPrefix(e.attrs["class"], "series ")]++
		case e.name == "g" && e.attrs["class"] == "panel":
			panels++
		}
		for _, a := range []string{"x", "y", "width", "height", "x1", "x2", "y1", "y2"} {
			if v, ok := e.attrs[a]; ok && !strings.HasSuffix(v, "%") {
				f, err := strconv.ParseFloat(v, 64)
				assert.NoError(t, err, "<%s %s=%q>", e.name, a, v)
				assert.GreaterOrEqual(t, f, 0.0, "<%s %s=%q> is on the canvas", e.name, a, v)
			}
		}
		assert.NotContains(t, e.attrs["d"], "NaN")
		assert.NotContains(t, e.attrs["d"], "Inf")
	}
	all := strings.Join(texts, "\n")

	// A title, axes, and a legend naming every series.
	assert.Contains(t, all, "retrysim: requests over time by outcome")
	assert.Contains(t, all, "attempts answered per second")
	assert.Contains(t, all, "requests waiting in the client")
	for _, s := range barSeries {
		assert.Contains(t, all, s.label, "the legend names %s", s.class)
	}
	assert.Contains(t, all, waitSeries.label)

	// One panel per run, each with every series, found by class.
	assert.Equal(t, 4, panels)
	for _, s := range append(barSeries[:], waitSeries) {
		assert.Equal(t, 4, series[s.class], "series %q in every panel", s.class)
	}

	// Each row says what its scenario is; each panel, its policy and numbers.
	assert.Contains(t, all, "Outage (outage)")
	assert.Contains(t, all, `529 for 1s & "then" <200>`, "text is escaped, and read back intact")
	assert.Contains(t, all, "retryhttp defaults")
	assert.Contains(t, all, "2/2 ok, 6 attempts, 1×429, 1×5xx, last done at 1.9s")
	assert.Contains(t, all, "0s")
}

func TestChartLeavesOutOtherStatusWhenThereIsNone(t *testing.T) {
	groups := chartFixture()[1:]
	var texts []string
	for _, e := range decodeSVG(t, writeChart(defaultConfig(), groups)) {
		if e.name == "text" {
			texts = append(texts, e.text)
		}
	}
	assert.NotContains(t, strings.Join(texts, "\n"), barSeries[kindOther].label)
}

func TestBinRunCountsAttemptsWhereTheyEndedAndSpreadsWaits(t *testing.T) {
	sc := &scenario{key: "s"}
	r := fakeRun(sc, "p",
		// Waits 10ms-30ms before its second attempt, which is answered in bin 3.
		traced(0, 0, 31, true, try(0, 10, kind5xx, 503), try(30, 31, kindOK, 200)),
		// Never sent: neither an attempt nor a wait.
		&requestTrace{id: 1, start: at(5), end: at(5), reason: "not sent"},
		// Waits 0-5ms (pacing) before its only attempt.
		traced(2, 0, 6, true, try(5, 6, kindOK, 200)))
	p := binRun(r, 10*time.Millisecond, 4)

	perSecond := 100.0 // one attempt in a 10ms bin
	assert.Equal(t, []float64{0, perSecond, 0, 0}, p.rates[kind5xx], "answered at 10ms: bin 1")
	assert.Equal(t, []float64{perSecond, 0, 0, perSecond}, p.rates[kindOK])
	assert.InDeltaSlice(t, []float64{0.5, 1, 1, 0}, p.waiting, 1e-9,
		"bin 0: half a request waiting; bins 1, 2: one; the 1ms attempt in bin 3 waits not")
}

func TestWaitsAreTheRequestsLifeOutsideItsAttempts(t *testing.T) {
	tr := traced(0, 0, 100, false, try(10, 20, kind5xx, 503), try(50, 60, kind5xx, 503))
	assert.Equal(t, []interval{{at(0), at(10)}, {at(20), at(50)}, {at(60), at(100)}}, tr.waits(),
		"before the first attempt, between attempts, and after the last until the request ended")
	assert.Equal(t, 80*time.Millisecond, tr.waited())

	assert.Empty(t, (&requestTrace{start: at(0), end: at(50)}).waits(), "a request never sent waited not at all")
	back := traced(0, 0, 10, true, try(0, 10, kindOK, 200))
	assert.Empty(t, back.waits(), "no gap, no wait")
}

func TestBinningPicksRoundBins(t *testing.T) {
	for _, tc := range []struct {
		wall time.Duration
		binW time.Duration
		bins int
	}{
		{4 * time.Second, 100 * time.Millisecond, 40},
		{3980 * time.Millisecond, 100 * time.Millisecond, 40},
		{10200 * time.Millisecond, 500 * time.Millisecond, 21},
		{620 * time.Millisecond, 20 * time.Millisecond, 31},
		{0, 50 * time.Microsecond, 1},
	} {
		binW, bins := binning(tc.wall)
		assert.Equal(t, tc.binW, binW, "%v", tc.wall)
		assert.Equal(t, tc.bins, bins, "%v", tc.wall)
		assert.LessOrEqual(t, bins, maxBins)
		assert.GreaterOrEqual(t, time.Duration(bins)*binW, tc.wall, "the bins cover the run")
	}
}

func TestTicks(t *testing.T) {
	ts, top := ticks(190, 4)
	assert.Equal(t, []float64{0, 50, 100, 150, 200}, ts)
	assert.Equal(t, 200.0, top)
	ts, top = ticks(0, 4)
	assert.Equal(t, 1.0, top, "an empty panel still gets an axis")
	assert.Equal(t, 0.0, ts[0])
	_, top = ticks(3.98, 5)
	assert.Equal(t, 4.0, top)

	assert.Equal(t, 0.5, niceStep(0.31))
	assert.Equal(t, 2.0, niceStep(2))
	assert.Equal(t, 10.0, niceStep(5.01))
	assert.Equal(t, 1.0, niceStep(-1))
	assert.Equal(t, "0.25", fmtTick(0.25, 0.05))
	assert.Equal(t, "150", fmtTick(150, 50))
}

func TestRunWritesTheChartItNames(t *testing.T) {
	cfg := tinyConfig(t, "contention")
	cfg.svg = filepath.Join(t.TempDir(), "sub.svg")
	groups, out, _ := runTiny(t, cfg)
	data, err := os.ReadFile(cfg.svg)
	require.NoError(t, err)
	els := decodeSVG(t, data)
	panels := 0
	for _, e := range els {
		if e.name == "g" && e.attrs["class"] == "panel" {
			assert.Equal(t, "contention", e.attrs["data-scenario"])
			panels++
		}
	}
	assert.Equal(t, len(groups[0]), panels)
	assert.Contains(t, out, cfg.svg)
}

// panelAxes is what one drawn panel shows of its vertical scales.
type panelAxes struct {
	policy            string
	rateTop, waitTop  string  // the scales the panel says it is drawn on
	leftTop, rightTop float64 // the highest tick of each axis
	barPx, barsPerSec float64 // the panel's bars: their height and what they stand for
}

// readAxes reads, for every panel of the chart, its scales back from its
// attributes and its tick labels, and its bars' total height in pixels.
func readAxes(t *testing.T, els []svgElement) []panelAxes {
	t.Helper()
	var out []panelAxes
	for _, e := range els {
		switch {
		case e.name == "g" && e.attrs["class"] == "panel":
			out = append(out, panelAxes{policy: e.attrs["data-policy"],
				rateTop: e.attrs["data-rate-top"], waitTop: e.attrs["data-wait-top"]})
		case len(out) == 0:
		case e.name == "text" && (e.attrs["class"] == "tick" && e.attrs["text-anchor"] == "end" ||
			e.attrs["class"] == "wtick"):
			v, err := strconv.ParseFloat(e.text, 64)
			require.NoError(t, err, "tick %q", e.text)
			p := &out[len(out)-1]
			if e.attrs["class"] == "wtick" {
				p.rightTop = max(p.rightTop, v)
			} else {
				p.leftTop = max(p.leftTop, v)
			}
		case e.name == "rect" && e.attrs["class"] == "":
			if _, ok := e.attrs["width"]; ok && e.attrs["fill"] == "" {
				h, err := strconv.ParseFloat(e.attrs["height"], 64)
				require.NoError(t, err)
				out[len(out)-1].barPx += h
			}
		}
	}
	return out
}

// One row, one scale: a quiet panel next to a busy one is drawn on the busy
// one's axes, so a bar's height means the same number of attempts a second
// across the row, and so does the waiting line's.
func TestRowPanelsShareTheirScales(t *testing.T) {
	sc := &scenario{key: "burst", title: "Burst", about: "a busy run next to a quiet one"}
	// Runs of 4s: bins of 100ms.
	var busy, quiet []*requestTrace
	for i := range 20 { // 20 answers in the first bin: 200 a second
		busy = append(busy, traced(i, 0, 10, true, try(0, 10, kindOK, 200)))
	}
	for i := range 12 { // 12 requests waiting all along, answered in the last bin
		busy = append(busy, traced(20+i, 0, 4000, true, try(3990, 4000, kindOK, 200)))
	}
	quiet = append(quiet, traced(0, 0, 10, true, try(0, 10, kindOK, 200)), // 10 a second
		traced(1, 0, 4000, true, try(3990, 4000, kindThrottled, 429)))
	other := &scenario{key: "outage", title: "Outage", about: "one run alone"}
	groups := [][]*runResult{
		{fakeRun(sc, "quiet", quiet...), fakeRun(sc, "busy", busy...)},
		{fakeRun(other, "alone", traced(0, 0, 1000, true, try(0, 1000, kindOK, 200)))},
	}

	axes := readAxes(t, decodeSVG(t, writeChart(defaultConfig(), groups)))
	require.Len(t, axes, 3)
	q, b, alone := axes[0], axes[1], axes[2]
	require.Equal(t, "quiet", q.policy)
	require.Equal(t, "busy", b.policy)

	// The row's scales are the busy panel's, and the quiet one says so.
	assert.Equal(t, b.rateTop, q.rateTop, "one left scale per row")
	assert.Equal(t, b.waitTop, q.waitTop, "one right scale per row")
	assert.Equal(t, "200", b.rateTop, "room for the row's tallest stack")
	assert.Equal(t, "15", b.waitTop, "room for the most requests the row keeps waiting")
	// And so do the axes drawn.
	assert.Equal(t, 200.0, q.leftTop)
	assert.Equal(t, b.leftTop, q.leftTop)
	assert.Equal(t, 15.0, q.rightTop)
	assert.Equal(t, b.rightTop, q.rightTop)

	// Bars: the quiet panel's 20 attempts a second (10 ok, 10 throttled,
	// in their bins) stand a tenth as tall as the busy one's 200 + 120.
	assert.InDelta(t, (10+10)/(200.0+120)*b.barPx, q.barPx, 0.1,
		"a bar of the same value has the same height in both panels")

	// Another row keeps scales of its own.
	assert.NotEqual(t, b.rateTop, alone.rateTop)
}
