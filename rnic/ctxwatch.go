package rnic

import "context"

// ctxWatch calls its function f when the context it last watched ends. Callers pass the
// same context call after call (a Wait loop, a polling loop), so it registers once per
// context (context.AfterFunc) rather than once per call; a new context replaces the old
// one's registration, and stop ends it (Destroy), so that a long-lived context does not
// keep what f reaches. f is set once, when the owner is made: a method value passed on
// each call would be allocated on each call.
type ctxWatch struct {
	f    func()
	done <-chan struct{}
	off  func() bool
}

// watch makes the end of ctx call w.f (nothing for a context that never ends).
func (w *ctxWatch) watch(ctx context.Context) {
	if done := ctx.Done(); done != nil && done != w.done {
		w.stop()
		w.done, w.off = done, context.AfterFunc(ctx, w.f)
	}
}

// stop ends the registration, if any.
func (w *ctxWatch) stop() {
	if w.off != nil {
		w.off()
		w.done, w.off = nil, nil
	}
}
