//go:build !linux

package redisquota

import "os/exec"

// dieWithTest does nothing here: only Linux can tie a child's life to its
// parent's; the tests' cleanups stop the server.
func dieWithTest(cmd *exec.Cmd) {}
