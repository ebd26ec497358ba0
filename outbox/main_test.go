package outbox

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp"
)

// workerEnv, when set, makes the test binary a replay worker on the bolt
// file it names (TestWorkerKilledMidReplay starts it so, and kills it).
const workerEnv = "OUTBOX_TEST_WORKER_DB"

// workerLease is the worker's visibility timeout: long enough that the
// test kills it well inside, as a crash would.
const workerLease = 30 * time.Second

func TestMain(m *testing.M) {
	if path := os.Getenv(workerEnv); path != "" {
		os.Exit(workerMain(path))
	}
	os.Exit(m.Run())
}

// workerMain runs an outbox worker on the file at path until SIGTERM.
func workerMain(path string) int {
	store, err := OpenBolt(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	defer store.Close()
	ob, err := New(Options{
		Transport:    retryhttp.New(http.DefaultTransport, retryhttp.WithMaxRetries(0)),
		Store:        store,
		Authorize:    func(r *http.Request) error { r.Header.Set("Authorization", "Bearer worker"); return nil },
		Lease:        workerLease,
		Workers:      1,
		PollInterval: 10 * time.Millisecond,
		Logger:       quietLogger(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	ob.Run(ctx)
	return 0
}
