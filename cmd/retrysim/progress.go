package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/retryhttp/retryhttp/internal/simkit"
)

// progress is told what the run is doing, from many goroutines at once.
type progress interface {
	// scenario announces that sc's runs are starting.
	scenario(sc *scenario)
	// request notes that one request has ended, however it ended.
	request()
	// finished notes that a policy's run of a scenario has ended.
	finished(r *runResult)
	// done ends the progress display before the summary is printed.
	done()
}

// newProgress shows a progress bar on a terminal and plain lines anywhere
// else (a CI log, a file), where a bar's carriage returns would be noise.
func newProgress(stderr io.Writer, total int) progress {
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return newBar(f, total)
	}
	return &lines{w: stderr, total: total}
}

// finishedLine is the one-line report of a finished run.
func finishedLine(r *runResult) string {
	s := summarize(r)
	line := fmt.Sprintf("%s / %s: %d requests, %d ok, %d failed, %d attempts, %s",
		s.scenario, s.policy, s.requests, s.succeeded, s.failed, s.attempts, simkit.Round3(s.wall))
	if r.scenario.capacity != nil {
		line += fmt.Sprintf(", %.2f of capacity", summarizeCapacity(r).ofLimit)
	}
	return line
}

// lines writes one line when a scenario starts and one when each of its
// runs ends.
type lines struct {
	mu    sync.Mutex
	w     io.Writer
	total int // requests in the whole run
	ended int
}

func (l *lines) scenario(sc *scenario) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "retrysim: %s: %d policies, %d requests each...\n", sc.key, len(sc.policies), sc.requests)
}

func (l *lines) request() {
	l.mu.Lock()
	l.ended++
	l.mu.Unlock()
}

func (l *lines) finished(r *runResult) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "retrysim: %s [%d/%d requests done]\n", finishedLine(r), l.ended, l.total)
}

func (l *lines) done() {}

// bar is a progress bar of requests ended, with a line printed above it as
// each run ends.
type bar struct {
	mu sync.Mutex
	b  *progressbar.ProgressBar
	w  io.Writer
}

func newBar(w io.Writer, total int) *bar {
	return &bar{w: w, b: progressbar.NewOptions(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("starting"),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)}
}

func (b *bar) scenario(sc *scenario) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.Describe(fmt.Sprintf("%-10s", sc.key))
}

func (b *bar) request() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.Add(1)
}

func (b *bar) finished(r *runResult) {
	b.mu.Lock()
	defer b.mu.Unlock()
	// Clear the bar, print the line where it was, and draw it again below.
	b.b.Clear()
	fmt.Fprintln(b.w, "retrysim: "+finishedLine(r))
	b.b.RenderBlank()
}

func (b *bar) done() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.Finish()
}
