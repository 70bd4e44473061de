package perftest

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// The states of a -D run (perftest's catch_alarm): warm-up for the margin, the sample
// window (duration − 2·margin), cool-down for the margin, end. Only the sample window's
// messages are counted.
const (
	stStart int32 = iota
	stSample
	stStopSample
	stEnd
)

// durationRun drives a -D run's states from timers.
type durationRun struct {
	state          atomic.Int32
	tStart, tEnd   atomic.Uint64 // tposted[0] and tcompleted[0]: the sample window
	ended          context.Context
	end            context.CancelFunc
	mu             sync.Mutex
	timer          *time.Timer
	window, margin time.Duration
}

// startDuration starts the states now; ended is done at the end state (and with ctx).
func startDuration(ctx context.Context, duration, margin int) *durationRun {
	d := &durationRun{margin: time.Duration(margin) * time.Second,
		window: time.Duration(duration-2*margin) * time.Second}
	d.ended, d.end = context.WithCancel(ctx)
	if d.margin > 0 {
		d.after(d.margin, d.toSample)
	} else {
		d.toSample()
	}
	return d
}

func (d *durationRun) after(t time.Duration, f func()) {
	d.mu.Lock()
	d.timer = time.AfterFunc(t, f)
	d.mu.Unlock()
}

func (d *durationRun) toSample() {
	d.tStart.Store(now())
	d.state.Store(stSample)
	d.after(d.window, d.toStop)
}

func (d *durationRun) toStop() {
	d.tEnd.Store(now())
	d.state.Store(stStopSample)
	if d.margin > 0 {
		d.after(d.margin, d.toEnd)
	} else {
		d.toEnd()
	}
}

func (d *durationRun) toEnd() {
	d.state.Store(stEnd)
	d.end()
}

// sampling reports whether messages now count.
func (d *durationRun) sampling() bool { return d != nil && d.state.Load() == stSample }

// over reports whether the run has ended.
func (d *durationRun) over() bool { return d != nil && d.state.Load() == stEnd }

// stop releases the timers.
func (d *durationRun) stop() {
	if d == nil {
		return
	}
	d.mu.Lock()
	if d.timer != nil {
		d.timer.Stop()
	}
	d.mu.Unlock()
	d.end()
}
