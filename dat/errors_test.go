package dat

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// Appendix A.5 and §7.1.

func TestErrorIsMatchesTypeAndSubtype(t *testing.T) {
	e := Error{Type: TypeInvalidHandle, Subtype: SubInvalidHandleEP}
	var err error = fmt.Errorf("wrapped: %w", e)
	cases := []struct {
		target error
		want   bool
	}{
		{ErrInvalidHandle, true},
		{ErrInvalidHandleEP, true},
		{ErrInvalidHandleIA, false},
		{ErrInvalidParameter, false},
		{&Error{Type: TypeInvalidHandle}, true},
		{errors.New("other"), false},
	}
	for _, c := range cases {
		if got := errors.Is(err, c.target); got != c.want {
			t.Errorf("errors.Is(%v, %v) = %v, want %v", err, c.target, got, c.want)
		}
	}
	var de Error
	if !errors.As(err, &de) || de != e {
		t.Fatalf("errors.As = %v", de)
	}
}

func TestCodeRoundTrip(t *testing.T) {
	for rt := range typeNames {
		if rt == TypeSuccess {
			if FromCode(uint32(rt)) != nil {
				t.Fatal("DAT_SUCCESS must map to nil")
			}
			continue
		}
		for _, s := range []Subtype{SubNone, SubInvalidArg3, SubThreadSafetyNotFound} {
			e := Error{Type: rt, Subtype: s}
			c := e.Code()
			if c&ClassError == 0 {
				t.Fatalf("%v: class bit missing in %#x", e, c)
			}
			if got := FromCode(c); got != e {
				t.Fatalf("FromCode(%#x) = %v, want %v", c, got, e)
			}
			if CodeOf(fmt.Errorf("x: %w", e)) != c {
				t.Fatalf("CodeOf mismatch for %v", e)
			}
		}
	}
	if CodeOf(nil) != 0 {
		t.Fatal("CodeOf(nil)")
	}
	if got := FromCode(CodeOf(errors.New("foreign"))); !errors.Is(got, ErrInternalError) {
		t.Fatalf("foreign error maps to %v", got)
	}
}

func TestSubtypeNumbering(t *testing.T) {
	// Positions in the DAT_RETURN_SUBTYPE enumeration of Appendix A.5.
	want := map[Subtype]uint16{
		SubNone: 0, SubInterrupted: 1, SubResourceMemory: 2, SubResourceSRQ: 10,
		SubInvalidHandleIA: 11, SubInvalidHandleCSP: 26, SubInvalidHandle10: 36,
		SubInvalidArg1: 37, SubInvalidArg10: 46, SubInvalidStateEPUnconnected: 47,
	}
	for s, v := range want {
		if uint16(s) != v {
			t.Errorf("%v = %d, want %d", s, uint16(s), v)
		}
	}
	seen := map[string]bool{}
	for s := Subtype(0); s < subtypeCount; s++ {
		n := s.String()
		if seen[n] {
			t.Fatalf("duplicate subtype name %s", n)
		}
		seen[n] = true
	}
}

func TestStrError(t *testing.T) {
	for rt, name := range typeNames {
		maj, min, err := StrError(Error{Type: rt, Subtype: SubInvalidArg2}.Code())
		if rt == TypeSuccess {
			if err == nil {
				t.Fatal("success with a subtype must be invalid")
			}
			continue
		}
		if err != nil || maj != name || min != "DAT_INVALID_ARG2" {
			t.Fatalf("StrError(%v) = %q %q %v", rt, maj, min, err)
		}
	}
	if maj, _, err := StrError(0); err != nil || maj != "DAT_SUCCESS" {
		t.Fatalf("StrError(0) = %q, %v", maj, err)
	}
	for _, bad := range []uint32{0x00150000, 0x00060000 | uint32(subtypeCount), 0x3ffe0000} {
		if _, _, err := StrError(bad); !errors.Is(err, ErrInvalidParameter) {
			t.Fatalf("StrError(%#x) err = %v", bad, err)
		}
	}
}

func TestInterruptedMatchesBoth(t *testing.T) {
	err := interrupted(context.Canceled)
	if !errors.Is(err, ErrInterruptedCall) || !errors.Is(err, context.Canceled) {
		t.Fatalf("%v does not match both", err)
	}
	if errors.Is(err, ErrAbort) {
		t.Fatal("matches abort")
	}
}

func TestStringers(t *testing.T) {
	checks := []struct{ got, want string }{
		{EPStateTentativeConnectionPending.String(), "DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING"},
		{ConnectionEventNonPeerRejected.String(), "DAT_CONNECTION_EVENT_NON_PEER_REJECTED"},
		{(CompletionSuppress | CompletionBarrierFence).String(), "DAT_COMPLETION_SUPPRESS_FLAG|DAT_COMPLETION_BARRIER_FENCE_FLAG"},
		{CompletionDefault.String(), "DAT_COMPLETION_DEFAULT_FLAG"},
		{EVDDefault.String(), "DAT_EVD_DEFAULT_FLAG"},
		{(EVDDTO | EVDSoftware).String(), "DAT_EVD_SOFTWARE_FLAG|DAT_EVD_DTO_FLAG"},
		{MemPrivAll.String(), "DAT_MEM_PRIV_ALL_FLAG"},
		{DTOErrReceiverNotReady.String(), "DAT_DTO_ERR_RECEIVER_NOT_READY"},
		{HandleTypeCSP.String(), "DAT_HANDLE_TYPE_CSP"},
		{SRQStateError.String(), "DAT_SRQ_STATE_ERROR"},
		{(EVDStateEnabled | EVDStateWaitable | EVDStateConfigThreshold).String(), "DAT_EVD_STATE_ENABLED|WAITABLE|CONFIG_THRESHOLD"},
		{TypeNotImplemented.String(), "DAT_NOT_IMPLEMENTED"},
		{ErrInvalidStateEPUnconnected.Error(), "dat: DAT_INVALID_STATE (DAT_INVALID_STATE_EP_UNCONNECTED)"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	for _, n := range []EventNumber{DTOCompletionEvent, RMRBindCompletionEvent, ConnectionRequestEvent, ConnectionEventBroken, AsyncErrorEVDOverflow, SoftwareEvent} {
		if _, ok := eventNames[n]; !ok {
			t.Errorf("%#x unnamed", uint32(n))
		}
	}
	if EventNumber(0x777).String() != "DAT_EVENT_NUMBER(0x777)" {
		t.Error("unknown event number")
	}
}

// Subtype values are the C ABI of OFA DAPL's dat_error.h (libdat2 2.1.10),
// which lists DAT_INVALID_STATE_SRQ_SHUTDOWN after DAT_INVALID_STATE_SRQ_IN_USE.
func TestSubtypeValuesLibdat2(t *testing.T) {
	for _, c := range []struct {
		s    Subtype
		want Subtype
	}{
		{SubInvalidStateSRQInUse, 87}, {SubInvalidStateSRQShutdown, 88}, {SubPrivilegesRead, 89},
		{SubInvalidAddressMalformed, 99}, {SubThreadSafetyNotFound, 103},
	} {
		if c.s != c.want {
			t.Errorf("%v = %d, want %d", c.s, c.s, c.want)
		}
	}
	if got := CodeOf(ErrPrivilegesRead); got != 0x800B0059 {
		t.Errorf("DAT_PRIVILEGES_VIOLATION|DAT_PRIVILEGES_READ = %#x, want 0x800b0059", got)
	}
}
