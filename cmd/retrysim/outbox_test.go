package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeOutboxEnv makes the test binary, run by TestFakeOutboxsim, stand in
// for outboxsim: it prints a line with its arguments and exits with the
// code the variable holds, or with "wait" waits for an interrupt.
const fakeOutboxEnv = "RETRYSIM_FAKE_OUTBOXSIM"

// TestFakeOutboxsim is not a test: it is the fake outboxsim that
// fakeOutbox starts.
func TestFakeOutboxsim(t *testing.T) {
	mode := os.Getenv(fakeOutboxEnv)
	if mode == "" {
		t.Skip("the fake outboxsim of the outbox scenario's tests")
	}
	fmt.Printf("outbox: fake scenario, args %q\n", os.Args[len(os.Args)-2:])
	fmt.Fprintln(os.Stderr, "outbox: fake stderr")
	if mode == "wait" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		select {
		case <-ctx.Done():
			fmt.Println("outbox: interrupted")
			os.Exit(1)
		case <-time.After(time.Minute):
			os.Exit(3)
		}
	}
	code, _ := strconv.Atoi(mode)
	os.Exit(code)
}

// fakeOutbox makes the outbox scenario run the test binary as its
// subprocess, in mode (an exit code, or "wait"), and returns the roots it
// was given.
func fakeOutbox(t *testing.T, mode string) *[]string {
	t.Helper()
	var roots []string
	saved := outboxCommand
	outboxCommand = func(ctx context.Context, root, dir string, stderr io.Writer) (*exec.Cmd, error) {
		roots = append(roots, root)
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFakeOutboxsim$", "--")
		cmd.Env = append(os.Environ(), fakeOutboxEnv+"="+mode)
		return cmd, nil
	}
	t.Cleanup(func() { outboxCommand = saved })
	return &roots
}

func TestOutboxScenarioStreamsTheSubprocess(t *testing.T) {
	roots := fakeOutbox(t, "0")
	var stdout, stderr bytes.Buffer
	code := realMain(context.Background(), []string{"-scenario", "outbox", "-max-time", "1m"}, &stdout, &stderr)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	assert.Contains(t, stdout.String(), "outbox: fake scenario")
	assert.Contains(t, stderr.String(), "outbox: fake stderr")
	assert.NotContains(t, stdout.String(), "retrysim: ran", "no in-process scenario ran")
	// It is given what is left of -max-time.
	m := regexp.MustCompile(`args \["-max-time" "([^"]+)"\]`).FindStringSubmatch(stdout.String())
	require.Len(t, m, 2, stdout.String())
	left, err := time.ParseDuration(m[1])
	require.NoError(t, err)
	assert.True(t, left > 50*time.Second && left <= time.Minute, "-max-time %v", left)

	// The clone it builds from is the one these tests run in.
	require.Len(t, *roots, 1)
	want, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	assert.Equal(t, want, (*roots)[0])
}

// A lost request (the subprocess's exit status 1) fails the run.
func TestOutboxScenarioFailureFailsTheRun(t *testing.T) {
	fakeOutbox(t, "1")
	var stdout, stderr bytes.Buffer
	code := realMain(context.Background(), []string{"-scenario", "outbox"}, &stdout, &stderr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stdout.String(), "outbox: fake scenario", "its output is shown")
	assert.Contains(t, stderr.String(), "retrysim: the outbox scenario lost requests")

	fakeOutbox(t, "2")
	stdout.Reset()
	stderr.Reset()
	assert.Equal(t, 1, realMain(context.Background(), []string{"-scenario", "outbox"}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "retrysim: the outbox scenario failed: exit status 2")
}

// -max-time interrupts the subprocess, which says what it had.
func TestOutboxScenarioStopsAtMaxTime(t *testing.T) {
	fakeOutbox(t, "wait")
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := realMain(context.Background(), []string{"-scenario", "outbox", "-max-time", "2s"}, &stdout, &stderr)
	assert.Equal(t, 1, code)
	assert.Less(t, time.Since(start), 30*time.Second, "not the fake's minute")
	assert.Contains(t, stdout.String(), "outbox: interrupted", "interrupted, not killed")
	assert.Contains(t, stderr.String(), "retrysim: the outbox scenario stopped at -max-time")
}

// The in-process scenarios run first, then the outbox's subprocess.
func TestOutboxScenarioRunsAfterTheOthers(t *testing.T) {
	fakeOutbox(t, "0")
	var stdout bytes.Buffer
	code := realMain(context.Background(), []string{"-scenario", "outbox,contention", "-clients", "4", "-svg", ""},
		&stdout, io.Discard)
	require.Equal(t, 0, code, stdout.String())
	out := stdout.String()
	ran, fake := bytes.Index([]byte(out), []byte("retrysim: ran 1 scenario(s)")), bytes.Index([]byte(out), []byte("outbox: fake"))
	assert.True(t, ran >= 0 && fake > ran, "contention's table, then outbox:\n%s", out)
}

func TestTakeOutbox(t *testing.T) {
	cfg := defaultConfig()
	assert.Equal(t, scenarioNames, cfg.scenarios, "all includes outbox")
	rest, ok := takeOutbox(cfg)
	assert.True(t, ok)
	assert.Equal(t, allScenarios, rest.scenarios, "the others run in this process")
	assert.Equal(t, scenarioNames, cfg.scenarios, "the caller's list is left as it was")
	cfg.scenarios = []string{"burst"}
	rest, ok = takeOutbox(cfg)
	assert.False(t, ok)
	assert.Equal(t, []string{"burst"}, rest.scenarios)
}

func TestIsRepoRoot(t *testing.T) {
	assert.True(t, isRepoRoot(filepath.Join("..", "..")))
	assert.False(t, isRepoRoot("."), "cmd/retrysim")
	assert.False(t, isRepoRoot(filepath.Join("..", "..", "outbox")), "the outbox module is not the core's")
}
