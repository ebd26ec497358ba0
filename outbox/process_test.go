package outbox

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryhttp/retryhttp"
)

// A worker process killed with SIGKILL in the middle of a replay loses
// nothing: once its lease ends, the entry it was sending is sent once more,
// with the same Idempotency-Key, and every other entry is delivered once.
func TestWorkerKilledMidReplay(t *testing.T) {
	const entries, victim = 5, "/item/2"
	u := newUpstream(t, status(503))
	store, path := openBolt(t)

	// Five requests fail and are saved (fsynced), due a millisecond later.
	ob, _ := newTestOutbox(t, store, u, func(o *Options) {
		o.Transport = testTransport(u.Client().Transport, retryhttp.WithMaxRetries(0))
		o.Backoff = []time.Duration{time.Millisecond}
		o.Now = time.Now
	})
	ids := deferN(t, ob, u, entries)
	store.Close()
	time.Sleep(2 * time.Millisecond)

	// The upstream now answers, except the victim's first replay: it hangs
	// until the sender goes away.
	arrived := make(chan struct{})
	var hung atomic.Bool
	u.setAnswer(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == victim && hung.CompareAndSwap(false, true) {
			close(arrived)
			<-r.Context().Done()
			return
		}
		w.WriteHeader(200)
	})

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"="+path)
	cmd.Stderr = os.Stderr
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("the worker never replayed the victim")
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	cmd.Wait()

	// Restart: a new worker opens the file. Before the lease ends the
	// victim is not sent again; after, it is, once.
	store, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ob2, now := newTestOutbox(t, store, u, func(o *Options) {
		o.Transport = testTransport(u.Client().Transport, retryhttp.WithMaxRetries(0))
	})
	ctx := context.Background()
	for {
		if n, err := ob2.RunOnce(ctx); err != nil {
			t.Fatal(err)
		} else if n == 0 {
			break
		}
	}
	if got := count(u.Arrivals(), victim); got != 2 {
		t.Fatalf("the victim was sent %d times before its lease ended, want 2 (Do's and the killed replay)", got)
	}
	now.Advance(workerLease)
	for {
		if n, err := ob2.RunOnce(ctx); err != nil {
			t.Fatal(err)
		} else if n == 0 {
			break
		}
	}

	keys := map[string]string{}
	for _, a := range u.Arrivals() {
		if k, ok := keys[a.Path]; ok && k != a.Key {
			t.Errorf("%s sent with keys %s and %s", a.Path, k, a.Key)
		}
		keys[a.Path] = a.Key
	}
	for _, id := range ids {
		e := get(t, ob2, id)
		if e.State != Delivered {
			t.Errorf("lost: %+v", e)
		}
	}
	for p := range keys {
		want := 2 // Do's, and one replay
		if p == victim {
			want = 3 // Do's, the killed replay, and one more
		}
		if got := count(u.Arrivals(), p); got != want {
			t.Errorf("%s sent %d times, want %d", p, got, want)
		}
	}
	if len(keys) != entries {
		t.Errorf("%d paths", len(keys))
	}
}

func count(as []arrival, path string) int {
	n := 0
	for _, a := range as {
		if a.Path == path {
			n++
		}
	}
	return n
}
