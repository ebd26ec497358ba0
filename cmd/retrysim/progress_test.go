package main

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProgressIsPlainLinesWhenStderrIsNoTerminal(t *testing.T) {
	var buf bytes.Buffer
	prog := newProgress(&buf, 4)
	require.IsType(t, &lines{}, prog, "a buffer is no terminal")

	sc := &scenario{key: "outage", policies: make([]policy, 2), requests: 2}
	prog.scenario(sc)
	runs := chartFixture()[0] // two runs of outage, two requests each
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Add(1)
		go func() { // runs finish concurrently, as with -parallel
			defer wg.Done()
			prog.request()
			prog.request()
			prog.finished(r)
		}()
	}
	wg.Wait()
	prog.done()

	got := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	require.Len(t, got, 3, buf.String())
	assert.Equal(t, "retrysim: outage: 2 policies, 2 requests each...", got[0])
	assert.ElementsMatch(t, []string{
		"retrysim: outage / no retries: 2 requests, 0 ok, 2 failed, 2 attempts, 501ms",
		"retrysim: outage / retryhttp defaults: 2 requests, 2 ok, 0 failed, 6 attempts, 1.9s",
	}, []string{trimCount(got[1]), trimCount(got[2])})
	assert.Contains(t, got[2], "[4/4 requests done]", "the last line counts every request")
	assert.NotContains(t, buf.String(), "\r")
}

// trimCount cuts the "[n/m requests done]" suffix, which depends on the
// order the runs finished in.
func trimCount(line string) string {
	if i := strings.Index(line, " ["); i >= 0 {
		return line[:i]
	}
	return line
}

func TestBarDrawsAndPrintsFinishedRunsAboveIt(t *testing.T) {
	var buf bytes.Buffer
	b := newBar(&buf, 4)
	sc := &scenario{key: "outage"}
	b.scenario(sc)
	for range 4 {
		b.request()
	}
	b.finished(chartFixture()[0][1])
	b.done()
	out := buf.String()
	assert.Contains(t, out, "outage", "the bar names the scenario running")
	assert.Contains(t, out, "retrysim: outage / retryhttp defaults: 2 requests, 2 ok, 0 failed, 6 attempts, 1.9s\n")
	assert.Contains(t, out, "(0/4)", "the bar counts requests")
	assert.Contains(t, out, "\r", "a bar redraws in place")
}
