package retrytest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a test leaves a goroutine behind: a hold or
// delay that outlives its request, or a server left open.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
