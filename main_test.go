package retryhttp

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any test leaves a goroutine behind: a retry loop,
// timer or body that outlives its request is a leak users would inherit.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
