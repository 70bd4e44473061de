package dat

import (
	"fmt"
	"testing"
)

// oneEVDSide is a side whose EP reports DTO completions and connection events on one EVD,
// the configuration in which spec §6.6.17 orders them.
func oneEVDSide(t *testing.T, name string) *side {
	s := newSide(t, name)
	one := mustEVD(t, s.ia, 64, nil, EVDDTO|EVDConnection)
	ep, err := s.ia.CreateEP(s.pz, one, one, one, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.ep, s.dto, s.conn = ep, one, one
	return s
}

// drainUntilDisconnect dequeues the EVD until the connection ends and returns the DTO
// events seen before the end and the number seen after it (within a grace period).
func drainUntilDisconnect(t *testing.T, s *side) (before []DTOCompletion, end EventNumber) {
	t.Helper()
	for {
		ev := s.wait(s.dto)
		switch ev.Number {
		case DTOCompletionEvent:
			before = append(before, ev.DTO)
		case ConnectionEventDisconnected, ConnectionEventBroken:
			return before, ev.Number
		default:
			t.Fatalf("unexpected %v", ev.Number)
		}
	}
}

// TestDisconnectEventOrder: on an EVD shared by DTOs and connection events, every DTO
// completion of the connection — successful or flushed — precedes the event that ends it,
// whoever ends it, gracefully or abruptly (the race the API issue measured in 3 of 8
// runs). Each case runs many times.
func TestDisconnectEventOrder(t *testing.T) {
	const rounds = 25
	for _, c := range []struct {
		name  string
		flags CloseFlags
	}{{"peer-graceful", CloseGraceful}, {"peer-abrupt", CloseAbrupt}} {
		t.Run(c.name, func(t *testing.T) {
			for r := 0; r < rounds; r++ {
				srv, cli := oneEVDSide(t, "server"), newSide(t, "client")
				const recvs = 6
				for i := 0; i < recvs; i++ {
					if err := srv.ep.PostRecv([]LMRTriplet{srv.recvLMR.Triplet(0, 64)}, uint64(i), CompletionDefault); err != nil {
						t.Fatal(err)
					}
				}
				connectPair(t, srv, cli, nil)
				if err := cli.ep.PostSend([]LMRTriplet{cli.sendLMR.Triplet(0, 8)}, 100, CompletionDefault); err != nil {
					t.Fatal(err)
				}
				cli.waitDTO(DTOSend, 100)
				// the message has arrived (an abortive close could otherwise discard it
				// in the peer's socket, as TCP does)
				if ev := srv.wait(srv.dto); ev.Number != DTOCompletionEvent || ev.DTO.Status != DTOSuccess {
					t.Fatalf("round %d: first event %v %v", r, ev.Number, ev.DTO.Status)
				}
				if err := cli.ep.Disconnect(c.flags); err != nil {
					t.Fatal(err)
				}
				before, _ := drainUntilDisconnect(t, srv)
				if len(before) != recvs-1 {
					t.Fatalf("round %d: %d flushed receives before the end, want %d: %s", r, len(before), recvs-1, describe(before))
				}
			}
		})
	}
	t.Run("local-graceful-sends-in-flight", func(t *testing.T) {
		for r := 0; r < rounds; r++ {
			srv, cli := newSide(t, "server"), oneEVDSide(t, "client")
			const sends = 8
			for i := 0; i < sends; i++ {
				if err := srv.ep.PostRecv([]LMRTriplet{srv.recvLMR.Triplet(0, 64)}, uint64(i), CompletionDefault); err != nil {
					t.Fatal(err)
				}
			}
			connectPair(t, srv, cli, nil)
			for i := 0; i < sends; i++ {
				if err := cli.ep.PostSend([]LMRTriplet{cli.sendLMR.Triplet(0, 8)}, uint64(i), CompletionDefault); err != nil {
					t.Fatal(err)
				}
			}
			if err := cli.ep.Disconnect(CloseGraceful); err != nil {
				t.Fatal(err)
			}
			before, end := drainUntilDisconnect(t, cli)
			if end != ConnectionEventDisconnected || len(before) != sends {
				t.Fatalf("round %d: %v after %d of %d send completions: %s", r, end, len(before), sends, describe(before))
			}
			for _, d := range before {
				if d.Status != DTOSuccess {
					t.Fatalf("round %d: graceful disconnect failed a send: %s", r, describe(before))
				}
			}
		}
	})
}

func describe(ds []DTOCompletion) string {
	s := ""
	for _, d := range ds {
		s += fmt.Sprintf("[%v %d %v] ", d.Op, d.Cookie, d.Status)
	}
	return s
}
