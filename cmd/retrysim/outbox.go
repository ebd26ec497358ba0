package main

// The outbox scenario runs in a subprocess. Its code is the outboxsim
// command of the outbox module (outbox/cmd/outboxsim), because the outbox
// stores requests in bbolt (and Redis) and this module, the library's, must
// not require those: whoever imports retryhttp would download them. So
// retrysim builds that command from the outbox module's directory of this
// checkout (the module's go.mod points back here with a replace directive)
// and runs it, streaming its output; the command exits 1 when a request was
// lost, and the retrysim run fails with it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// outboxScenario is the -scenario name of the outbox scenario.
const outboxScenario = "outbox"

// scenarioNames is what -scenario accepts, in the order "all" runs them:
// the scenarios run in this process, then outbox.
var scenarioNames = append(slices.Clip(allScenarios), outboxScenario)

// corePath is this module's path, as the repository root's go.mod names it.
const corePath = "github.com/retryhttp/retryhttp"

// takeOutbox removes the outbox scenario from cfg's list, which run then
// runs in this process, and reports whether it was there.
func takeOutbox(cfg config) (config, bool) {
	if !slices.Contains(cfg.scenarios, outboxScenario) {
		return cfg, false
	}
	cfg.scenarios = slices.DeleteFunc(slices.Clone(cfg.scenarios), func(s string) bool { return s == outboxScenario })
	return cfg, true
}

// outboxCommand returns the command that runs the outbox scenario, built
// into dir from the outbox module of the repository at root, with any build
// failure written to stderr. Tests replace it.
var outboxCommand = buildOutboxSim

// buildOutboxSim builds outbox/cmd/outboxsim with the go command (the one
// on PATH: go run puts its own first) and returns the command to run it. A
// build, then a run, rather than "go run", so that ending the run
// interrupts the scenario itself and not only the go command.
func buildOutboxSim(ctx context.Context, root, dir string, stderr io.Writer) (*exec.Cmd, error) {
	bin := filepath.Join(dir, "outboxsim")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/outboxsim")
	build.Dir = filepath.Join(root, "outbox")
	// The outbox module stands alone (its go.mod replaces the core with
	// this checkout); a go.work elsewhere must not change that.
	build.Env = append(os.Environ(), "GOWORK=off")
	build.Stdout, build.Stderr = stderr, stderr
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("building the outbox scenario (go build ./cmd/outboxsim in %s): %w", build.Dir, err)
	}
	return exec.CommandContext(ctx, bin), nil
}

// runOutbox runs the outbox scenario as a subprocess until it ends or ctx
// does, its output streamed to stdout and stderr. It fails when the
// scenario reports a lost request (exit status 1) or cannot run.
func runOutbox(ctx context.Context, stdout, stderr io.Writer) error {
	root, err := findRepoRoot()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "retrysim-outbox")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintf(stderr, "retrysim: %s: building and running outbox/cmd/outboxsim (the outbox is a module of its own: see -h)...\n", outboxScenario)
	cmd, err := outboxCommand(ctx, root, dir, stderr)
	if err != nil {
		return stopReason(ctx, err)
	}
	if deadline, ok := ctx.Deadline(); ok {
		cmd.Args = append(cmd.Args, "-max-time", max(time.Until(deadline), time.Millisecond).Round(time.Millisecond).String())
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// Stopped (^C, -max-time): the scenario is interrupted, says what it
	// had, and exits; killed if it has not within WaitDelay.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Second
	fmt.Fprintln(stdout)
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return stopReason(ctx, err)
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return fmt.Errorf("the %s scenario lost requests or could not run (exit status 1): see its output above", outboxScenario)
	}
	return fmt.Errorf("the %s scenario failed: %w", outboxScenario, err)
}

// stopReason says why the outbox scenario stopped when ctx ended, or
// returns err.
func stopReason(ctx context.Context, err error) error {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("the %s scenario stopped at -max-time: %w", outboxScenario, err)
	case ctx.Err() != nil:
		return fmt.Errorf("the %s scenario was interrupted: %w", outboxScenario, err)
	}
	return err
}

// findRepoRoot returns the root of the repository clone that holds the
// outbox module: the one this file was compiled from (go run and go build
// record where; -trimpath does not), else the working directory or the
// nearest of its parents that is one.
func findRepoRoot() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		if dir := filepath.Join(filepath.Dir(file), "..", ".."); isRepoRoot(dir) {
			return filepath.Clean(dir), nil
		}
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isRepoRoot(dir) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("the %s scenario runs from a clone of the repository (it builds the outbox module's "+
				"outbox/cmd/outboxsim); run retrysim from one, or leave the scenario out with -scenario %s",
				outboxScenario, strings.Join(allScenarios, ","))
		}
		dir = parent
	}
}

// isRepoRoot reports whether dir holds this module's go.mod and the outbox
// module.
func isRepoRoot(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	if _, err := os.Stat(filepath.Join(dir, "outbox", "go.mod")); err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" && strings.Trim(f[1], `"`) == corePath {
			return true
		}
	}
	return false
}
