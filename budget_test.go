package retryhttp

import (
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRetryBudgetDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   RetryBudget
		want RetryBudget
	}{
		{"zero value", RetryBudget{}, RetryBudget{Ratio: 0.2, MinPerSecond: 10, Window: 10 * time.Second}},
		{"negatives mean none", RetryBudget{Ratio: -1, MinPerSecond: -1, Window: -1}, RetryBudget{Ratio: 0, MinPerSecond: 0, Window: 10 * time.Second}},
		{"NaN means the default", RetryBudget{Ratio: math.NaN(), MinPerSecond: math.NaN()}, RetryBudget{Ratio: 0.2, MinPerSecond: 10, Window: 10 * time.Second}},
		{"short window raised", RetryBudget{Window: time.Millisecond}, RetryBudget{Ratio: 0.2, MinPerSecond: 10, Window: time.Second}},
		{"huge ratio capped", RetryBudget{Ratio: math.Inf(1)}, RetryBudget{Ratio: 1000, MinPerSecond: 10, Window: 10 * time.Second}},
		{"kept", RetryBudget{Ratio: 0.5, MinPerSecond: 1, Window: time.Minute}, RetryBudget{Ratio: 0.5, MinPerSecond: 1, Window: time.Minute}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.in.withDefaults())
		})
	}
	assert.Nil(t, newBudget(RetryBudget{Disabled: true}))

	var c config
	WithRetryBudget(RetryBudget{Ratio: 0.5}).apply(&c)
	assert.Equal(t, RetryBudget{Ratio: 0.5}, c.retryBudget)
}

// With no requests, MinPerSecond × Window retries are allowed per window.
func TestBudgetReserve(t *testing.T) {
	b := newBudget(RetryBudget{Ratio: -1, MinPerSecond: 2, Window: 5 * time.Second}) // 10 per 5s
	now := brAt(0)
	for i := 10; i > 0; i-- {
		require.Equal(t, float64(i), b.left(now))
		require.True(t, b.withdraw(now), "retry %d", 11-i)
	}
	assert.Zero(t, b.left(now))
	assert.False(t, b.withdraw(now), "the 11th in the window")
	assert.False(t, b.withdraw(now.Add(5*time.Second-1)), "still the same window")
	assert.Equal(t, 10.0, b.left(now.Add(5*time.Second)), "a window later the retries have aged out")
	assert.True(t, b.withdraw(now.Add(5*time.Second)))
}

// Each request allows Ratio retries; a refused retry takes nothing.
func TestBudgetRatio(t *testing.T) {
	b := newBudget(RetryBudget{Ratio: 0.5, MinPerSecond: -1})
	now := brAt(0)
	assert.False(t, b.withdraw(now), "no requests, no reserve: no retries")
	for i := 0; i < 10; i++ {
		b.deposit(now)
	}
	assert.Equal(t, 5.0, b.left(now))
	for i := 0; i < 5; i++ {
		require.True(t, b.withdraw(now))
	}
	assert.False(t, b.withdraw(now))
	b.deposit(now)
	assert.False(t, b.withdraw(now), "5.5 allowed: still 5")
	b.deposit(now)
	assert.True(t, b.withdraw(now), "6 allowed")
	assert.Zero(t, b.left(now))
}

// Float rounding does not refuse a retry the formula allows exactly.
func TestBudgetExactRatio(t *testing.T) {
	b := newBudget(RetryBudget{Ratio: 0.1, MinPerSecond: -1})
	now := brAt(0)
	for i := 0; i < 30; i++ {
		b.deposit(now)
	}
	for i := 0; i < 3; i++ {
		require.True(t, b.withdraw(now), "retry %d of 0.1 × 30", i+1)
	}
	assert.False(t, b.withdraw(now))
}

// Requests and retries count for between 0.9 × Window and Window: the
// current tenth of the window and the nine before it.
func TestBudgetExpiry(t *testing.T) {
	b := newBudget(RetryBudget{Ratio: 1, MinPerSecond: -1}) // window 10s in 1s tenths
	now := brAt(0)
	for i := 0; i < 3; i++ {
		b.deposit(now.Add(500 * time.Millisecond)) // the first tenth starts at the first event
	}
	assert.Equal(t, 3.0, b.left(now.Add(10*time.Second+499*time.Millisecond)))
	assert.Zero(t, b.left(now.Add(10*time.Second+500*time.Millisecond)), "the requests' tenth has left the window")

	b = newBudget(RetryBudget{Ratio: 1, MinPerSecond: -1})
	for i := 0; i < 3; i++ {
		b.deposit(now)
	}
	for i := 0; i < 3; i++ {
		require.True(t, b.withdraw(now.Add(5*time.Second)))
	}
	for i := 0; i < 3; i++ {
		b.deposit(now.Add(12 * time.Second))
	}
	assert.Zero(t, b.left(now.Add(12*time.Second)), "the retries at 5s still count against the requests at 12s")
	assert.Equal(t, 3.0, b.left(now.Add(15*time.Second)), "and no longer at 15s")
}

func TestBudgetClock(t *testing.T) {
	t.Run("stepped back", func(t *testing.T) {
		b := newBudget(RetryBudget{Ratio: 1, MinPerSecond: -1})
		now := brAt(time.Hour)
		b.deposit(now)
		b.deposit(now.Add(-time.Hour)) // counts in the newest tenth
		assert.Equal(t, 2.0, b.left(now.Add(-time.Minute)))
		assert.True(t, b.withdraw(now.Add(-time.Second)))
		assert.Equal(t, 1.0, b.left(now))
	})
	t.Run("long idle", func(t *testing.T) {
		b := newBudget(RetryBudget{Ratio: 1, MinPerSecond: -1})
		now := brAt(0)
		for i := 0; i < 100; i++ {
			b.deposit(now.Add(time.Duration(i) * 100 * time.Millisecond))
		}
		assert.Equal(t, 100.0, b.left(now.Add(9999*time.Millisecond)))
		assert.Equal(t, 90.0, b.left(now.Add(10*time.Second)), "the first tenth has aged out")
		assert.Zero(t, b.left(now.Add(1000*time.Hour)), "everything has aged out")
		b.deposit(now.Add(1000 * time.Hour))
		assert.Equal(t, 1.0, b.left(now.Add(1000*time.Hour)))
	})
}

func TestBudgetDisabled(t *testing.T) {
	var b *budget // what newBudget returns when Disabled
	now := brAt(0)
	b.deposit(now)
	for i := 0; i < 1000; i++ {
		require.True(t, b.withdraw(now))
	}
	assert.True(t, math.IsInf(b.left(now), 1))
}

// The budget decides every retry as its formula says, and the bound stated
// in RetryBudget's comment holds over every span: a model check on a random
// run of requests and retries, in bursts and with idle gaps.
func TestBudgetMatchesModel(t *testing.T) {
	const (
		ratio   = 0.3
		minPS   = 2.0
		slots   = windowSlots
		reserve = minPS * 5 // MinPerSecond × Window in seconds
	)
	width := 500 * time.Millisecond // Window / 10
	b := newBudget(RetryBudget{Ratio: ratio, MinPerSecond: minPS, Window: 5 * time.Second})
	rnd := rand.New(rand.NewPCG(20, 26))

	var deposits, retries []int64 // per slot
	grow := func(s int) {
		for len(deposits) <= s {
			deposits = append(deposits, 0)
			retries = append(retries, 0)
		}
	}
	sumOf := func(v []int64, from, to int) (n int64) { // slots from..to, clipped
		for s := max(from, 0); s <= to && s < len(v); s++ {
			n += v[s]
		}
		return n
	}

	start := brAt(0)
	now := start
	b.deposit(start) // the first event sets where the tenths begin
	grow(0)
	deposits[0]++
	allowed, refused := 0, 0
	for i := 0; i < 6000; i++ {
		switch rnd.IntN(50) {
		case 0:
			now = now.Add(time.Duration(rnd.Int64N(int64(8 * time.Second)))) // idle gap
		default:
			now = now.Add(time.Duration(rnd.Int64N(int64(60 * time.Millisecond))))
		}
		s := int(now.Sub(start) / width)
		grow(s)
		retryHeavy := (s/20)%2 == 1 // phases where retries outnumber requests
		if (retryHeavy && rnd.IntN(5) == 0) || (!retryHeavy && rnd.IntN(5) != 0) {
			b.deposit(now)
			deposits[s]++
			continue
		}
		d, w := sumOf(deposits, s-slots+1, s), sumOf(retries, s-slots+1, s)
		limit := ratio*float64(d) + reserve
		// Retries can outnumber what the requests still in the window
		// allow, once older requests age out: left is then 0.
		require.Equal(t, max(0, math.Floor(limit-float64(w)+1e-9)), b.left(now), "event %d", i)
		want := float64(w+1) <= limit+1e-9
		got := b.withdraw(now)
		require.Equal(t, want, got, "event %d at slot %d: %d retries, %d requests in the window", i, s, w, d)
		if got {
			retries[s]++
			allowed++
		} else {
			refused++
		}
	}
	require.Greater(t, allowed, 500)
	require.Greater(t, refused, 500)

	// Over any span of S whole slots [a, b]:
	// retries ≤ Ratio × requests in [a-9, b] + reserve × ⌈S/10⌉.
	n := len(deposits)
	pd, pr := make([]int64, n+1), make([]int64, n+1)
	for s := 0; s < n; s++ {
		pd[s+1], pr[s+1] = pd[s]+deposits[s], pr[s]+retries[s]
	}
	tight := 0.0
	for a := 0; a < n; a++ {
		for e := a; e < n; e++ {
			span := e - a + 1
			r := float64(pr[e+1] - pr[a])
			d := float64(pd[e+1] - pd[max(a-slots+1, 0)])
			bound := ratio*d + reserve*math.Ceil(float64(span)/slots)
			if r > bound+1e-9 {
				t.Fatalf("slots %d..%d: %v retries, bound %v", a, e, r, bound)
			}
			if bound > 0 {
				tight = max(tight, r/bound)
			}
		}
	}
	assert.Greater(t, tight, 0.9, "the bound is nearly reached somewhere: it is the right one")
}

// Many goroutines share one budget (run with -race); at one instant it
// allows exactly what the formula allows, however the calls interleave.
func TestBudgetConcurrent(t *testing.T) {
	b := newBudget(RetryBudget{Ratio: 0.5, MinPerSecond: 1, Window: 10 * time.Second}) // reserve 10
	now := brAt(0)
	for i := 0; i < 100; i++ {
		b.deposit(now)
	}
	var got atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if b.withdraw(now) {
					got.Add(1)
				}
				b.left(now)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(60), got.Load(), "0.5 × 100 + 1 × 10")
}
