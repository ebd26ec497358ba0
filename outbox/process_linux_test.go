//go:build linux

package outbox

import (
	"os/exec"
	"syscall"
)

// dieWithTest makes the kernel kill the worker if the test binary dies
// first, so no worker outlives the run.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
