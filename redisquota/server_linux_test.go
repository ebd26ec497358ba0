//go:build linux

package redisquota

import (
	"os/exec"
	"syscall"
)

// dieWithTest makes the kernel kill the server if the test binary dies
// without its cleanups (a -timeout panic, a signal), so no redis-server
// outlives the run.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
