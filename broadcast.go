package retryhttp

// broadcast tells everyone waiting that something happened: waiters get a
// channel, and fire closes it, which wakes them all at once, and forgets it,
// so the next waiters wait for the next time. A channel is made only when
// someone waits: nothing is allocated for events nobody waits for.
//
// The zero value is ready to use. It is not safe for concurrent use: the
// lock of the state it belongs to guards it.
type broadcast struct {
	ch chan struct{} // nil while nobody waits
}

// wait returns the channel closed at the next fire.
func (b *broadcast) wait() <-chan struct{} {
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// waiting reports whether anyone was given a channel since the last fire.
func (b *broadcast) waiting() bool { return b.ch != nil }

// fire wakes everyone waiting; later waiters wait for the next fire.
func (b *broadcast) fire() {
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}
