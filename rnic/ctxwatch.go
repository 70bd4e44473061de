package rnic

import "context"

// ctxWatch calls a function when the context it last watched ends. Callers pass the same
// context call after call (a Wait loop, a polling loop), so it registers once per context
// (context.AfterFunc) rather than once per call; a new context replaces the old one's
// registration, and stop ends it (Destroy), so that a long-lived context does not keep
// what the function reaches.
type ctxWatch struct {
	done <-chan struct{}
	off  func() bool
}

// watch makes the end of ctx call f (nothing for a context that never ends).
func (w *ctxWatch) watch(ctx context.Context, f func()) {
	if done := ctx.Done(); done != nil && done != w.done {
		w.stop()
		w.done, w.off = done, context.AfterFunc(ctx, f)
	}
}

// stop ends the registration, if any.
func (w *ctxWatch) stop() {
	if w.off != nil {
		w.off()
		w.done, w.off = nil, nil
	}
}
